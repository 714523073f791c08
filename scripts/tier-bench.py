#!/usr/bin/env python3
"""Measurements of tiered storage for scripts/tier-bench.sh (stdlib only).

  run URL DATA_DIR SEGMENT_BYTES   phase 1: write; prints JSON of the hot reads and disk samples
  cold URL STATE                   phase 2 (after a restart: empty block cache): cold reads

Phase 1 writes 150 "probe" streams of one 64 KiB append each, every probe
followed by 1 MiB of filler in another stream, so that each probe sits in a
block of its own (cold reads fetch 1 MiB blocks); each probe is read once
right after its append (hot: from memory or the local disk). The writes run
unpaced, so uploads run behind them; the data directory is sampled every
0.25 s until every shard is within its budget again.
"""

import http.client
import json
import os
import statistics
import sys
import threading
import time
from urllib.parse import urlparse

PROBES = 150
PROBE = 64 * 1024
FILLER_APPEND = 64 * 1024
FILLER_PER_PROBE = 16


def client(url):
    u = urlparse(url)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=60)


def req(c, method, path, body=None, headers=None):
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()


def tier_totals(c):
    _, _, body = req(c, "GET", "/metrics")
    out = {}
    for line in body.decode().splitlines():
        if line.startswith("ringstream_tier_"):
            name, value = line.rsplit(" ", 1)
            key = name.split("{")[0] + (":" + name.split('result="')[1].split('"')[0] if "result=" in name else "")
            out[key] = out.get(key, 0) + int(value)
    return out


def within_budget(c, poll_s):
    """Waits until every shard's local bytes are within its budget; returns the totals then."""
    while True:
        m = tier_totals(c)
        if m["ringstream_tier_local_bytes"] <= m["ringstream_tier_hot_budget_bytes"]:
            return m
        time.sleep(poll_s)


def appends_by_shard(c):
    _, _, body = req(c, "GET", "/metrics")
    out = {}
    for line in body.decode().splitlines():
        if line.startswith("ringstream_appends_total{"):
            out[line.split('shard="')[1].split('"')[0]] = int(line.rsplit(" ", 1)[1])
    return out


def shard_of_append(c, path, body):
    """Appends `body` to `path`; returns the shard that took it (the one
    whose append count moved)."""
    before = appends_by_shard(c)
    st, _, _ = req(c, "POST", path, body, {"Content-Type": "application/octet-stream"})
    assert st in (200, 204), st
    after = appends_by_shard(c)
    (shard,) = [k for k in after if after[k] != before.get(k)]
    return shard


def du(d):
    return sum(os.stat(os.path.join(r, f)).st_size for r, _, fs in os.walk(d) for f in fs
               if os.path.exists(os.path.join(r, f)))


def probe_bytes(i):
    return bytes([(i * 31 + j) % 251 for j in range(256)]) * (PROBE // 256)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def run(url, data_dir):
    c = client(url)
    # One filler stream per shard, so that every probe is followed by filler
    # in its own shard's log.
    fillers = {}
    for k in range(64):
        path = f"/v1/stream/filler-{k}"
        req(c, "PUT", path, b"", {"Content-Type": "application/octet-stream"})
        fillers.setdefault(shard_of_append(c, path, b"f" * FILLER_APPEND), path)
    samples, stop, t0 = [], threading.Event(), time.time()

    def sampler():
        while not stop.is_set():
            samples.append((time.time() - t0, du(data_dir)))
            stop.wait(0.25)

    th = threading.Thread(target=sampler)
    th.start()
    m0 = tier_totals(c)
    hot, filler = [], b"f" * FILLER_APPEND
    for i in range(PROBES):
        path = f"/v1/stream/probe-{i}"
        req(c, "PUT", path, b"", {"Content-Type": "application/octet-stream"})
        filler_path = fillers[shard_of_append(c, path, probe_bytes(i))]
        t = time.perf_counter()
        st, _, d = req(c, "GET", f"{path}?offset=-1")
        hot.append((time.perf_counter() - t) * 1e3)
        assert st == 200 and d == probe_bytes(i), (st, len(d))
        for _ in range(FILLER_PER_PROBE):
            req(c, "POST", filler_path, filler, {"Content-Type": "application/octet-stream"})
    written_at = time.time() - t0
    m = within_budget(c, 0.1)
    settled_at = time.time() - t0
    time.sleep(0.5)
    stop.set()
    th.join()
    uploaded = m["ringstream_tier_uploaded_bytes_total"] - m0.get("ringstream_tier_uploaded_bytes_total", 0)
    written = PROBES * (PROBE + FILLER_PER_PROBE * FILLER_APPEND)
    print(json.dumps({
        "written": written, "written_s": written_at, "settled_s": settled_at, "uploaded": uploaded,
        "uploads": m["ringstream_tier_uploads_total:ok"], "budget": m["ringstream_tier_hot_budget_bytes"],
        "hot_ms": hot, "disk": samples,
    }))


def cold(url, state_path):
    state = json.load(open(state_path))
    c = client(url)
    m0 = tier_totals(c)
    lat = []
    # The probes written first are remote (the budget holds the newest data).
    n = 100
    for i in range(n):
        t = time.perf_counter()
        st, _, d = req(c, "GET", f"/v1/stream/probe-{i}?offset=-1")
        lat.append((time.perf_counter() - t) * 1e3)
        assert st == 200 and d == probe_bytes(i), (i, st, len(d))
    m = tier_totals(c)
    fetched = m["ringstream_tier_cold_reads_total:fetched"] - m0.get("ringstream_tier_cold_reads_total:fetched", 0)
    if fetched != n:
        sys.exit(f"tier-bench: {fetched} block fetches for {n} reads: not every read was cold")
    hot = state["hot_ms"]
    mb = 1e6
    print("| read of one 64 KiB append (`GET ?offset=-1`) | n | p50 | p99 | max |")
    print("|---|---|---|---|---|")
    print(f"| hot (just appended: memory) | {len(hot)} | {pct(hot, 50):.2f} ms | {pct(hot, 99):.2f} ms | {max(hot):.2f} ms |")
    print(f"| cold (remote segment, empty cache: one 1 MiB range GET) | {n} | {pct(lat, 50):.2f} ms | "
          f"{pct(lat, 99):.2f} ms | {max(lat):.2f} ms |")
    print(f"| cold / hot (p50) | | {pct(lat, 50) / pct(hot, 50):.1f}x | {pct(lat, 99) / pct(hot, 99):.1f}x | |")
    print()
    print(f"Written: {state['written'] / mb:.1f} MB in {state['written_s']:.1f} s "
          f"({state['written'] / state['written_s'] / mb:.1f} MB/s, one connection, unpaced, with a read after each probe).")
    print(f"Uploaded: {state['uploaded'] / mb:.1f} MB in {state['uploads']} segment moves by {state['settled_s']:.1f} s "
          f"after the first write: {state['uploaded'] / state['settled_s'] / mb:.1f} MB/s while writing and catching up.")
    print()
    print("| t (s) | data dir (MB) |")
    print("|---|---|")
    disk = state["disk"]
    step = max(1, len(disk) // 12)
    for t, b in disk[::step] + [max(disk, key=lambda s: s[1])]:
        print(f"| {t:.1f} | {b / mb:.1f} |")
    print(f"\nBudget (--hot-bytes): {state['budget'] / mb:.1f} MB; peak {max(b for _, b in disk) / mb:.1f} MB "
          f"(last row), settled {disk[-1][1] / mb:.1f} MB.")


def backlog_write(url, nbytes):
    """With the store down: append nbytes (a backlog the uploads must move)."""
    c = client(url)
    req(c, "PUT", "/v1/stream/backlog", b"", {"Content-Type": "application/octet-stream"})
    for _ in range(nbytes // FILLER_APPEND):
        st, _, _ = req(c, "POST", "/v1/stream/backlog", b"b" * FILLER_APPEND, {"Content-Type": "application/octet-stream"})
        assert st in (200, 204), st


def backlog_drain(url):
    """The store is back: time the uploads from the first one of the backlog
    until every shard is within budget; nothing else runs."""
    c = client(url)
    m0 = tier_totals(c)
    # From the last poll that saw no upload done (the moves may all finish
    # between two polls), over every byte of the backlog.
    t0 = time.time()
    while tier_totals(c)["ringstream_tier_uploads_total:ok"] == m0["ringstream_tier_uploads_total:ok"]:
        t0 = time.time()
        time.sleep(0.01)
    m = within_budget(c, 0.02)
    dt = time.time() - t0
    up = m["ringstream_tier_uploaded_bytes_total"] - m0["ringstream_tier_uploaded_bytes_total"]
    moves = m["ringstream_tier_uploads_total:ok"] - m0["ringstream_tier_uploads_total:ok"]
    print(f"Upload throughput with nothing else running (a backlog left by a store outage): "
          f"{up / 1e6:.1f} MB in {moves} segment moves in {dt:.2f} s = **{up / dt / 1e6:.1f} MB/s** "
          f"({dt / max(moves, 1) * 1e3:.0f} ms per 4 MiB segment; with 4 MiB segments a shard runs 4 moves at once).")


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "cold":
        cold(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "backlog-write":
        backlog_write(sys.argv[2], int(sys.argv[3]))
    else:
        backlog_drain(sys.argv[2])
