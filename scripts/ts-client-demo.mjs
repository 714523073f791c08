// The official TypeScript client (@durable-streams/client) against the /ds
// surface: create a JSON stream in a bucket, append through an idempotent
// producer, and read live (long-poll and SSE) until every message arrived.
// With a token (a server started with --auth-file), every request carries
// it (the client's `headers`), and one without it must get 401.
// Usage: node ts-client-demo.mjs http://127.0.0.1:PORT [TOKEN]
import { DurableStream, IdempotentProducer } from "@durable-streams/client"

const base = process.argv[2]
const token = process.argv[3]
const auth = token ? { Authorization: `Bearer ${token}` } : {}
const mode = token ? "with a bearer token" : "without access control"
const bucket = `tsdemo${Date.now() % 100000}`
const fail = (msg) => { console.error(`ts client demo (${mode}): ${msg}`); process.exit(1) }

if (token) {
  const bare = await fetch(`${base}/ds/${bucket}`, { method: "PUT" })
  if (bare.status !== 401) fail(`PUT bucket without the token answered ${bare.status}, expected 401`)
}
const put = await fetch(`${base}/ds/${bucket}`, { method: "PUT", headers: auth })
if (put.status !== 201) fail(`PUT bucket answered ${put.status}`)

let passed = 0
for (const live of ["long-poll", "sse"]) {
  const url = `${base}/ds/${bucket}/chat-${live}`
  const handle = await DurableStream.create({ url, contentType: "application/json", headers: auth })
  const n = 50
  const seen = []
  const reader = await handle.stream({ offset: "-1", live, json: true })
  const done = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${live}: saw ${seen.length} of ${n} messages`)), 15000)
    reader.subscribeJson((batch) => {
      for (const item of batch.items) seen.push(item)
      if (seen.length >= n) { clearTimeout(timer); resolve() }
    })
  })
  const producer = new IdempotentProducer(handle, `demo-${live}`, { epoch: 0, lingerMs: 1 })
  for (let i = 0; i < n; i++) producer.append(JSON.stringify({ i, live }))
  await producer.flush()
  try { await done } catch (e) { fail(e.message) }
  reader.cancel?.()
  const ids = seen.map((m) => m.i)
  if (ids.length !== n || ids.some((v, k) => v !== k)) fail(`${live}: messages out of order or duplicated: ${ids}`)
  // A retry with the same producer tuple must not write twice.
  const again = await fetch(url, {
    method: "POST",
    headers: { ...auth, "content-type": "application/json", "producer-id": `demo-${live}`, "producer-epoch": "0", "producer-seq": "0" },
    body: JSON.stringify({ i: 0, live }),
  })
  if (again.status !== 200) fail(`${live}: duplicate answered ${again.status}`)
  const all = await (await fetch(`${url}?offset=-1`, { headers: auth })).json()
  if (all.length !== n) fail(`${live}: stream holds ${all.length} messages, expected ${n}`)
  passed++
  console.log(`ts client demo (${live}, ${mode}): created ${url.slice(base.length)}, ${n} producer appends, ${seen.length} read live`)
}
console.log(`ts client demo (${mode}): ${passed} passed, 0 failed`)
process.exit(0)
