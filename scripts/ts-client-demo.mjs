// The official TypeScript client (@durable-streams/client, the version pinned
// in scripts/node/) against both surfaces, /v1/stream/{path} and
// /ds/{bucket}/{stream}: create a JSON stream, batched concurrent appends,
// appends through an idempotent producer, a live read (long-poll and SSE)
// that sees every message in order, a read from an offset, and the errors
// the client maps (create conflict, missing stream, invalid JSON).
// With a token (a server started with --auth-file), every request carries
// it (the client's `headers`), and one without it must get 401.
// Usage: node ts-client-demo.mjs http://127.0.0.1:PORT [TOKEN]
import { DurableStream, DurableStreamError, IdempotentProducer } from "@durable-streams/client"

const base = process.argv[2]
const token = process.argv[3]
const auth = token ? { Authorization: `Bearer ${token}` } : {}
const mode = token ? "with a bearer token" : "without access control"
const run = `${Date.now() % 100000}`
const fail = (msg) => { console.error(`ts client demo (${mode}): ${msg}`); process.exit(1) }
const check = (ok, msg) => { if (!ok) fail(msg) }

const bucket = `tsdemo${run}`
if (token) {
  const bare = await fetch(`${base}/ds/${bucket}`, { method: "PUT" })
  check(bare.status === 401, `PUT bucket without the token answered ${bare.status}, expected 401`)
}
const put = await fetch(`${base}/ds/${bucket}`, { method: "PUT", headers: auth })
check(put.status === 201, `PUT bucket answered ${put.status}`)

// The HTTP status of the client's error. Most 4xx come as FetchError from
// the client's backoff wrapper (status set), some as DurableStreamError
// (code set, status usually set); both carry the status.
async function errorStatus(promise) {
  try { await promise } catch (e) {
    if (e instanceof DurableStreamError || typeof e.status === "number") return e.status ?? e.code
    return `${e.name}: ${e.message}`
  }
  return "no error"
}

async function demo(surface, live) {
  const path = surface === "v1" ? `/v1/stream/${bucket}/v1-${live}` : `/ds/${bucket}/chat-${live}`
  const url = `${base}${path}`
  const handle = await DurableStream.create({ url, contentType: "application/json", headers: auth })
  const n = 50
  const seen = []
  const reader = await handle.stream({ offset: "-1", live, json: true })
  const done = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${surface} ${live}: saw ${seen.length} of ${2 * n} messages`)), 15000)
    reader.subscribeJson((batch) => {
      for (const item of batch.items) seen.push(item)
      if (seen.length >= 2 * n) { clearTimeout(timer); resolve() }
    })
  })
  // Batched: appends fired without awaiting each one are coalesced.
  await Promise.all(Array.from({ length: n }, (_, i) => handle.append(JSON.stringify({ i, live }))))
  const mid = (await handle.head()).offset
  const producer = new IdempotentProducer(handle, `demo-${live}`, { epoch: 0, lingerMs: 1 })
  for (let i = n; i < 2 * n; i++) producer.append(JSON.stringify({ i, live }))
  await producer.flush()
  try { await done } catch (e) { fail(e.message) }
  reader.cancel?.()
  const ids = seen.map((m) => m.i)
  const batched = ids.slice(0, n).sort((a, b) => a - b)
  check(batched.every((v, k) => v === k), `${surface} ${live}: batched appends lost or duplicated: ${ids}`)
  check(ids.slice(n).every((v, k) => v === n + k), `${surface} ${live}: producer appends out of order: ${ids}`)
  // A retry with the same producer tuple must not write twice.
  const again = await fetch(url, {
    method: "POST",
    headers: { ...auth, "content-type": "application/json", "producer-id": `demo-${live}`, "producer-epoch": "0", "producer-seq": "0" },
    body: JSON.stringify({ i: n, live }),
  })
  check(again.status === (surface === "v1" ? 204 : 200), `${surface} ${live}: duplicate answered ${again.status}`)
  // From an offset: the first read's offset after one batch, then the rest.
  const whole = await handle.stream({ offset: "-1", live: false, json: true })
  const all = await whole.json()
  check(all.length === 2 * n, `${surface} ${live}: stream holds ${all.length} messages, expected ${2 * n}`)
  const rest = await (await handle.stream({ offset: mid, live: false, json: true })).json()
  check(rest.length === n && rest.every((m, k) => m.i === n + k), `${surface} ${live}: read from ${mid}: ${rest.map((m) => m.i)}`)
  const tail = await handle.stream({ offset: whole.offset, live: false, json: true })
  check((await tail.json()).length === 0 && tail.upToDate, `${surface} ${live}: a read from the tail offset is not empty`)
  // Errors, as the client maps them.
  const conflict = await errorStatus(DurableStream.create({ url, contentType: "text/plain", headers: auth }))
  check(conflict === 409, `${surface}: create with another content type: ${conflict}`)
  const missing = new DurableStream({ url: `${url}-missing`, headers: auth })
  const notFound = await errorStatus(missing.stream({ offset: "-1", live: false }).then((r) => r.body()))
  check(notFound === 404, `${surface}: reading a missing stream: ${notFound}`)
  const bad = await errorStatus(handle.append("{not json"))
  check(bad === 400, `${surface}: invalid JSON: ${bad}`)
  console.log(`ts client demo (${surface}, ${live}, ${mode}): ${path}: ${n} batched + ${n} producer appends, ${seen.length} read live, from-offset and error checks`)
}

let passed = 0
for (const surface of ["v1", "ds"]) for (const live of ["long-poll", "sse"]) { await demo(surface, live); passed++ }
console.log(`ts client demo (${mode}): ${passed} passed, 0 failed`)
process.exit(0)
