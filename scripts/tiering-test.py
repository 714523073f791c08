#!/usr/bin/env python3
"""Steps of scripts/tiering.sh against a running ringstream with --tier s3.

Each step is a subcommand; what was acknowledged is kept in a JSON state
file between steps, so the shell script can kill and restart the server and
the object store in between. Standard library only (S3 listings go through
curl's SigV4 signing).

  write STATE URL BYTES DATA_DIR BUDGET [SLACK [RATE]]
                                          append BYTES over the streams (at most RATE bytes/s),
                                          sampling the data dir; fail past BUDGET + SLACK
  verify STATE URL                        every stream from -1 and from random acknowledged offsets
  interleave STATE URL BYTES              80 streams round-robin, small appends
  interleave-verify STATE URL             read them back (cold, each 1 MiB spans more blocks than the cache)
  reconcile STATE URL                     after a kill -9: adopt whole appends whose answer was lost
  settle URL SECONDS                      wait until every shard is within its budget
  store STATE URL DATA_DIR S3_ENDPOINT BUCKET   store holds what the server says is remote; no orphans
  down STATE URL                          store down: appends, hot reads ok; cold reads 503; /readyz degraded
  delete STATE URL S3_ENDPOINT BUCKET     delete every stream: the remote objects go
"""

import hashlib
import http.client
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from urllib.parse import quote, urlparse

V1 = [f"/v1/stream/tier-{i}" for i in range(30)]
DS = [f"/ds/tier-{b}/s{i}" for b in ("a", "b") for i in range(5)]
STREAMS = V1 + DS


def fail(msg):
    print(f"tiering-test: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


class Client:
    def __init__(self, url):
        u = urlparse(url)
        self.host, self.port = u.hostname, u.port
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)

    def req(self, method, path, body=None, headers=None):
        for attempt in range(2):
            try:
                self.conn.request(method, path, body=body, headers=headers or {})
                r = self.conn.getresponse()
                return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
            except (ConnectionError, http.client.HTTPException):
                self.conn.close()
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
                if attempt:
                    raise


def blob(stream, i):
    """The i-th append of a stream: 16 to 64 KiB of bytes that depend on both."""
    n = 16384 + (i * 7919 + len(stream) * 131) % 49152
    seed = hashlib.sha256(f"{stream}#{i}".encode()).digest()
    return (seed * (n // 32 + 1))[:n]


def load(path):
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    return {s: [] for s in STREAMS}


def save(path, state):
    with open(path + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(path + ".tmp", path)


def metrics(c):
    st, _, body = c.req("GET", "/metrics")
    if st != 200:
        fail(f"/metrics: {st}")
    out = {}
    for line in body.decode().splitlines():
        m = re.match(r'^(ringstream_tier_\w+)\{shard="(\d+)"(?:,result="(\w+)")?\} (\d+)', line)
        if m:
            name = m.group(1) + (f":{m.group(3)}" if m.group(3) else "")
            out.setdefault(name, {})[int(m.group(2))] = int(m.group(4))
    return out


def total(m, name):
    return sum(m.get(name, {}).values())


def dir_bytes(d):
    apparent = allocated = 0
    for root, _, files in os.walk(d):
        for f in files:
            try:
                s = os.stat(os.path.join(root, f))
            except FileNotFoundError:
                continue
            apparent += s.st_size
            allocated += s.st_blocks * 512
    return apparent, allocated


def create_streams(c, streams):
    for s in streams:
        st, _, d = c.req("PUT", s, b"", {"Content-Type": "application/octet-stream"})
        if st not in (200, 201):
            fail(f"PUT {s}: {st} {d[:200]}")


def create_all(c):
    for b in ("tier-a", "tier-b"):
        st, _, _ = c.req("PUT", f"/ds/{b}")
        if st not in (200, 201):
            fail(f"PUT /ds/{b}: {st}")
    create_streams(c, STREAMS)


def append(c, state, s):
    i = len(state[s])
    st, h, d = c.req("POST", s, blob(s, i), {"Content-Type": "application/octet-stream"})
    if st not in (200, 204):
        fail(f"POST {s} #{i}: {st} {d[:200]}")
    state[s].append(h["stream-next-offset"])
    return len(blob(s, i))


def cmd_write(state_path, url, nbytes, data_dir, budget, rate=0):
    """Appends about nbytes round-robin over the streams from 4 connections,
    at most `rate` bytes/s (0: as fast as the server takes them); samples
    the data directory every 100 ms."""
    state = load(state_path)
    c = Client(url)
    if not any(state.values()):
        create_all(c)
    samples, stop = [], threading.Event()
    t0 = time.time()

    def sample():
        while not stop.is_set():
            samples.append((round(time.time() - t0, 2), *dir_bytes(data_dir)))
            stop.wait(0.1)

    sampler = threading.Thread(target=sample)
    sampler.start()
    lock = threading.Lock()
    written = [0]
    groups = [STREAMS[k::4] for k in range(4)]

    cut, refused = [None], [False]

    def writer(group):
        cl = Client(url)
        while True:
            with lock:
                if written[0] >= nbytes or cut[0]:
                    return
            for s in group:
                try:
                    n = append(cl, state, s)
                except (OSError, http.client.HTTPException) as e:
                    # The server was killed: what was acknowledged is kept.
                    cut[0] = e
                    return
                except SystemExit:
                    # fail() in a thread ends only the thread: end them all, then the run.
                    refused[0] = cut[0] = True
                    return
                with lock:
                    written[0] += n
                    ahead = written[0] / rate - (time.time() - t0) if rate else 0
                if ahead > 0:
                    time.sleep(ahead)

    threads = [threading.Thread(target=writer, args=(g,)) for g in groups]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    sampler.join()
    save(state_path, state)
    if refused[0]:
        sys.exit(1)
    secs = time.time() - t0
    if cut[0]:
        print(f"the server went away after {written[0]} bytes ({cut[0]!r}); the acknowledged appends are kept")
    peak = max(a for _, a, _ in samples)
    print(f"wrote {written[0]} bytes in {secs:.1f} s ({written[0] / secs / 1e6:.1f} MB/s"
          f"{f', paced at {rate / 1e6:.0f} MB/s' if rate else ''}); data dir peak {peak} bytes (budget {budget})")
    with open(state_path + f".du-{int(t0)}", "w") as f:
        json.dump(samples, f)
    return peak


def expected(state, s, upto=None):
    n = len(state[s]) if upto is None else upto
    return b"".join(blob(s, i) for i in range(n))


def read_from(c, s, offset):
    got, off = b"", offset
    while True:
        st, h, d = c.req("GET", f"{s}?offset={off}")
        if st == 204 and h.get("stream-up-to-date") == "true" and not d:
            # /ds answers a read at the tail with 204 (no content).
            return 200, h, got
        if st != 200:
            return st, h, d
        got += d
        off = h["stream-next-offset"]
        if h.get("stream-up-to-date") == "true":
            return 200, h, got


def cmd_verify(state_path, url):
    state = load(state_path)
    c = Client(url)
    rng = random.Random(42)
    n = 0
    for s in STREAMS:
        st, _, got = read_from(c, s, "-1")
        if st != 200:
            fail(f"GET {s} from -1: {st} {got[:200]}")
        want = expected(state, s)
        if got != want:
            fail(f"{s}: read {len(got)} bytes from -1, wrote {len(want)}; first difference at "
                 f"{next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))}")
        for _ in range(3):
            k = rng.randrange(len(state[s]))
            st, _, got = read_from(c, s, state[s][k])
            tail = want[len(expected(state, s, k + 1)):]
            if st != 200 or got != tail:
                fail(f"{s} from the offset acknowledged for append {k}: {st}, {len(got)} bytes, want {len(tail)}")
        n += len(want)
    print(f"verified {n} bytes over {len(STREAMS)} streams (from -1 and 3 random acknowledged offsets each)")


def cmd_reconcile(state_path, url):
    """After a kill -9: an append in flight at the kill may have become
    durable without its answer. Such an append must be whole (the next blob
    exactly) and then counts as acknowledged; anything else fails."""
    state = load(state_path)
    c = Client(url)
    adopted = 0
    for s in STREAMS:
        while True:
            offset = state[s][-1] if state[s] else "-1"
            st, h, got = read_from(c, s, offset)
            if st != 200:
                fail(f"{s} from {offset}: {st}")
            if not got:
                break
            if got[: len(blob(s, len(state[s])))] != blob(s, len(state[s])):
                fail(f"{s}: {len(got)} unacknowledged bytes after the last acknowledged append are not the next append")
            # The next append, whole: adopt it with the offset that follows it.
            st, h, d = c.req("GET", f"{s}?offset={offset}")
            state[s].append(h["stream-next-offset"] if len(d) == len(blob(s, len(state[s]))) else fail(
                f"{s}: the unacknowledged append did not come back alone"))
            adopted += 1
    save(state_path, state)
    print(f"reconciled: {adopted} appends in flight at the kill were durable (whole); nothing else unacknowledged")


IL = [f"/v1/stream/il-{i}" for i in range(80)]


def il_blob(s, i):
    n = 1024 + (i * 7919 + len(s) * 131) % 15360
    seed = hashlib.sha256(f"{s}~{i}".encode()).digest()
    return (seed * (n // 32 + 1))[:n]


def cmd_interleave(state_path, url, nbytes):
    """80 streams appended round-robin with 1 to 16 KiB bodies: 1 MiB of one
    stream spans about 40 segments of its shard, more than the block cache."""
    c = Client(url)
    counts = {s: 0 for s in IL}
    create_streams(c, IL)
    written = 0
    while written < nbytes:
        for s in IL:
            body = il_blob(s, counts[s])
            st, _, d = c.req("POST", s, body, {"Content-Type": "application/octet-stream"})
            if st not in (200, 204):
                fail(f"POST {s}: {st} {d[:200]}")
            counts[s] += 1
            written += len(body)
    save(state_path, counts)
    print(f"interleaved: {written} bytes round-robin over {len(IL)} streams")


def cmd_interleave_verify(state_path, url):
    counts = load(state_path)
    c = Client(url)
    m0 = metrics(c)
    answers = 0
    for s in IL:
        want = b"".join(il_blob(s, i) for i in range(counts[s]))
        got, off = b"", "-1"
        while True:
            st, h, d = c.req("GET", f"{s}?offset={off}")
            if st != 200:
                fail(f"GET {s} at {off} (interleaved, cold): {st} {d[:200]}")
            answers += 1
            got += d
            off = h["stream-next-offset"]
            if h.get("stream-up-to-date") == "true":
                break
        if got != want:
            fail(f"{s}: read {len(got)} bytes back, wrote {len(want)}")
    fetched = total(metrics(c), "ringstream_tier_cold_reads_total:fetched") - total(m0, "ringstream_tier_cold_reads_total:fetched")
    if fetched == 0:
        fail("the interleaved streams were not cold")
    print(f"interleaved: {len(IL)} streams read back byte-exact from cold segments "
          f"({answers} answers, {fetched} block fetches)")


def cmd_settle(url, secs):
    c = Client(url)
    t0 = time.time()
    deadline = t0 + float(secs)
    up0 = total(metrics(c), "ringstream_tier_uploaded_bytes_total")
    while time.time() < deadline:
        m = metrics(c)
        over = [s for s, v in m["ringstream_tier_local_bytes"].items() if v > m["ringstream_tier_hot_budget_bytes"][s]]
        if not over:
            up, dt = total(m, "ringstream_tier_uploaded_bytes_total") - up0, time.time() - t0
            if up > 4 * 1024 * 1024:
                print(f"caught up: uploaded {up} bytes in {dt:.2f} s ({up / dt / 1e6:.1f} MB/s)")
            print(f"settled: local {total(m, 'ringstream_tier_local_bytes')} bytes, "
                  f"remote {total(m, 'ringstream_tier_remote_bytes')} bytes in "
                  f"{total(m, 'ringstream_tier_remote_segments')} segments")
            return
        time.sleep(0.2)
    fail(f"shards still over their budget after {secs} s: {metrics(c)}")


def s3_list(endpoint, bucket, prefix=""):
    keys, token = [], None
    while True:
        # SigV4 signs the query with '/' and '=' percent-encoded.
        q = f"list-type=2&prefix={quote(prefix, safe='')}" + (f"&continuation-token={quote(token, safe='')}" if token else "")
        out = subprocess.run(
            ["curl", "-sSf", "--aws-sigv4", "aws:amz:us-east-1:s3",
             "--user", f"{os.environ['AWS_ACCESS_KEY_ID']}:{os.environ['AWS_SECRET_ACCESS_KEY']}",
             "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", f"{endpoint}/{bucket}?{q}"],
            capture_output=True, check=True, text=True).stdout
        keys += [(k, int(n)) for k, n in re.findall(r"<Key>([^<]+)</Key>.*?<Size>(\d+)</Size>", out, re.S)]
        m = re.search(r"<NextContinuationToken>([^<]+)</NextContinuationToken>", out)
        if not m:
            return keys
        token = m.group(1)


def cmd_store(state_path, url, data_dir, endpoint, bucket):
    c = Client(url)
    m = metrics(c)
    node = open(os.path.join(data_dir, "ringstream.node-id")).read().strip()
    keys = s3_list(endpoint, bucket, f"ringstream/{node}/")
    remote = total(m, "ringstream_tier_remote_segments")
    if len(keys) != remote:
        fail(f"{len(keys)} objects in the store, the server names {remote} remote segments (orphans or losses)")
    stored = sum(n for _, n in keys)
    if stored != total(m, "ringstream_tier_remote_bytes"):
        fail(f"the store holds {stored} bytes, the server counts {total(m, 'ringstream_tier_remote_bytes')}")
    skels = segs = 0
    for shard in os.listdir(data_dir):
        if shard.startswith("shard-"):
            names = os.listdir(os.path.join(data_dir, shard))
            mine = {int(k.rsplit("/", 1)[1][:-4]) for k, _ in keys if f"/{shard}/" in k}
            sk = {int(n[:-5]) for n in names if n.endswith(".skel")}
            local = {int(n[:-4]) for n in names if n.endswith(".seg")}
            if sk != mine:
                fail(f"{shard}: skeletons {sorted(sk)} but objects {sorted(mine)}")
            if sk & local:
                fail(f"{shard}: segments both local and remote: {sorted(sk & local)}")
            skels += len(sk)
            segs += len(local)
    written = sum(len(expected(load(state_path), s)) for s in STREAMS)
    if stored + dir_bytes(data_dir)[0] < written:
        fail(f"store ({stored}) and local disk together hold less than the {written} bytes written")
    print(f"store: {len(keys)} objects, {stored} bytes, one per remote segment and skeleton; "
          f"{segs} local segment files; {written} bytes of appends")


def cmd_down(state_path, url):
    state = load(state_path)
    c = Client(url)
    # The server learns the store is down from its first request to it (the
    # boot-time sweep, retried twice with backoff), which runs beside the
    # serving: /readyz says degraded from then on, within the request
    # timeout (TIER_REQUEST_TIMEOUT_MS, 5 s) at the latest.
    deadline = time.time() + 20
    while True:
        st, _, d = c.req("GET", "/readyz")
        if st == 200 and d.startswith(b"degraded") or time.time() > deadline:
            break
        time.sleep(0.1)
    if st != 200 or not d.startswith(b"degraded"):
        fail(f"/readyz with the store down, 20 s after the restart: {st} {d!r}")
    # Cold: the oldest data of a stream, not cached after a restart.
    cold = 0
    for s in STREAMS:
        st, h, d = c.req("GET", f"{s}?offset=-1")
        if st == 503:
            if "retry-after" not in h:
                fail(f"{s}: 503 without Retry-After")
            cold += 1
        elif st == 200:
            if d != expected(state, s)[: len(d)]:
                fail(f"{s}: a read with the store down served other bytes")
        else:
            fail(f"{s} from -1 with the store down: {st} {d[:200]}")
    if cold == 0:
        fail("no read needed the object store: nothing was cold")
    # Appends keep being acknowledged, and read back while hot.
    before = sum(len(v) for v in state.values())
    for _ in range(8):
        for s in STREAMS:
            append(c, state, s)
    save(state_path, state)
    for s in STREAMS:
        k = len(state[s]) - 8
        st, _, got = read_from(c, s, state[s][k - 1])
        if st != 200 or got != expected(state, s)[len(expected(state, s, k)):]:
            fail(f"{s}: hot read with the store down: {st}")
    m = metrics(c)
    if total(m, "ringstream_tier_store_up") != 0:
        fail("ringstream_tier_store_up is not 0 with the store down")
    over = total(m, "ringstream_tier_local_bytes") - total(m, "ringstream_tier_hot_budget_bytes")
    added = sum(len(v) for v in state.values()) - before
    print(f"store down: {cold} of {len(STREAMS)} streams answered 503 + Retry-After from -1, /readyz degraded, "
          f"{added} appends acknowledged and read back hot; local disk {over} bytes over budget")


RT = [f"/ds/tier-a/rt{i}" for i in range(8)]


def remote_consistent(c, endpoint, bucket, node):
    """The server's remote segments and the store's objects, once they agree."""
    m = metrics(c)
    keys = s3_list(endpoint, bucket, f"ringstream/{node}/")
    return m, len(keys) == total(m, "ringstream_tier_remote_segments"), len(keys)


def cmd_retention(state_path, url, endpoint, bucket, data_dir, nbytes):
    """/ds streams of their own, written round-robin until their first
    segments went to the store; then each stream's retained start moved to
    two thirds of it: 410 below it, byte-exact from -1, and the objects that
    held only data before the starts deleted from the store (no orphan)."""
    c = Client(url)
    node = open(os.path.join(data_dir, "ringstream.node-id")).read().strip()
    offsets = {s: [] for s in RT}
    create_streams(c, RT)
    written = 0
    while written < nbytes:
        for s in RT:
            written += append(c, offsets, s)
    cmd_settle(url, 120)
    m0 = metrics(c)
    remote0, deleted0 = total(m0, "ringstream_tier_remote_segments"), total(m0, "ringstream_tier_remote_deleted_total")
    keep = {}
    for s in RT:
        k = len(offsets[s]) * 2 // 3
        start = offsets[s][k - 1]
        st, h, d = c.req("PUT", f"{s}/retention/{start}")
        if st != 204 or h.get("stream-retained-offset") != start:
            fail(f"PUT {s}/retention/{start}: {st} {h.get('stream-retained-offset')} {d[:200]}")
        keep[s] = (k, start)
    deadline = time.time() + 60
    while True:
        m, agree, objects = remote_consistent(c, endpoint, bucket, node)
        deleted = total(m, "ringstream_tier_remote_deleted_total") - deleted0
        if deleted > 0 and agree:
            break
        if time.time() > deadline:
            fail(f"60 s after retention: {deleted} remote segments deleted, {objects} objects in the store, "
                 f"the server names {total(m, 'ringstream_tier_remote_segments')}")
        time.sleep(0.5)
    save(state_path, {s: [offsets[s], keep[s][0]] for s in RT})
    cmd_retention_verify(state_path, url)
    print(f"retention: {written} bytes over {len(RT)} /ds streams, each kept from two thirds on; remote segments "
          f"{remote0} -> {total(m, 'ringstream_tier_remote_segments')}, {deleted} deleted from the store, "
          f"{objects} objects left, one per remote segment")


def cmd_retention_verify(state_path, url):
    """What retention kept reads back byte-exact from -1; below it, 410."""
    c = Client(url)
    for s, (offsets, k) in load(state_path).items():
        start = offsets[k - 1]
        st, h, d = c.req("GET", f"{s}?offset={offsets[0]}")
        if st != 410 or h.get("stream-retained-offset") != start:
            fail(f"GET {s} below its retained start: {st} {h.get('stream-retained-offset')} (want 410 at {start})")
        st, h, got = read_from(c, s, "-1")
        want = b"".join(blob(s, i) for i in range(k, len(offsets)))
        if st != 200 or got != want:
            fail(f"{s} from -1 after retention: {st}, {len(got)} bytes, want {len(want)}")
    print(f"retention: {len(load(state_path))} streams answer 410 below their retained start and read back "
          f"byte-exact from it")


def cmd_delete(state_path, url, endpoint, bucket, data_dir):
    c = Client(url)
    for s in STREAMS + IL + RT:
        st, _, _ = c.req("DELETE", s)
        if st not in (200, 204):
            fail(f"DELETE {s}: {st}")
    node = open(os.path.join(data_dir, "ringstream.node-id")).read().strip()
    deadline = time.time() + 60
    while time.time() < deadline:
        m = metrics(c)
        keys = s3_list(endpoint, bucket, f"ringstream/{node}/")
        if total(m, "ringstream_tier_remote_segments") == 0 and not keys:
            print(f"deleted every stream: no remote segment left, the store holds no object of this node "
                  f"({total(m, 'ringstream_tier_remote_deleted_total')} objects deleted)")
            save(state_path, {s: [] for s in STREAMS})
            return
        time.sleep(0.5)
    fail(f"after deleting every stream: {total(m, 'ringstream_tier_remote_segments')} remote segments, "
         f"{len(keys)} objects")


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "write":
        rate = int(args[6]) if len(args) > 6 else 0
        peak = cmd_write(args[0], args[1], int(args[2]), args[3], int(args[4]), rate)
        slack = int(args[5]) if len(args) > 5 else 0
        if slack and peak > int(args[4]) + slack:
            fail(f"the data dir peaked at {peak} bytes, over the budget {args[4]} + slack {slack}")
    elif cmd == "verify":
        cmd_verify(*args)
    elif cmd == "interleave":
        cmd_interleave(args[0], args[1], int(args[2]))
    elif cmd == "interleave-verify":
        cmd_interleave_verify(*args)
    elif cmd == "reconcile":
        cmd_reconcile(*args)
    elif cmd == "settle":
        cmd_settle(*args)
    elif cmd == "store":
        cmd_store(*args)
    elif cmd == "down":
        cmd_down(*args)
    elif cmd == "retention":
        cmd_retention(*args[:5], int(args[5]))
    elif cmd == "retention-verify":
        cmd_retention_verify(*args)
    elif cmd == "delete":
        cmd_delete(*args)
    else:
        fail(f"unknown step {cmd}")
