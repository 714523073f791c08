#!/usr/bin/env python3
"""The official Python client (PyPI durable-streams, pinned in
scripts/python/requirements.txt) against a running server, on both surfaces
(/v1/stream/{path} and /ds/{bucket}/{stream}): create, batched concurrent
appends, JSON reads, a read from an offset, live reads by long-poll and by
SSE, and the errors the client raises. Run by scripts/python-client.sh.

Usage: python-client-test.py http://127.0.0.1:PORT
"""
import concurrent.futures
import traceback
import sys
import threading
import time

import httpx
from durable_streams import (
    DurableStream,
    SeqConflictError,
    StreamExistsError,
    StreamNotFoundError,
)

BASE = sys.argv[1]
RUN = f"{int(time.time() * 1000) % 100000}"
N = 64
results = []


def check(ok, msg):
    if not ok:
        raise AssertionError(msg)


def live_reader(handle, offset, mode, want, out, done):
    """Follows the stream from `offset` until `want` items arrived."""
    with handle.stream(offset=offset, live=mode) as res:
        for item in res.iter_json():
            out.append(item)
            if len(out) >= want:
                break
    done.set()


def surface_url(surface, name):
    if surface == "v1":
        return f"{BASE}/v1/stream/py-{RUN}-{name}"
    return f"{BASE}/ds/py{RUN}/{name}"


def exercise(surface):
    url = surface_url(surface, "events")
    handle = DurableStream.create(url, content_type="application/json")
    # Batched concurrent appends: 16 threads append at once; the client
    # coalesces what queues up while a POST is in flight.
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        acks = list(pool.map(lambda i: handle.append({"i": i, "surface": surface}), range(N)))
    check(all(a.next_offset for a in acks), "every append is acknowledged with an offset")
    batches = len({a.next_offset for a in acks})
    items = handle.stream(offset="-1", live=False).read_json()
    check(sorted(m["i"] for m in items) == list(range(N)), f"{surface}: read back {len(items)} of {N}")
    # A read from an offset returns what came after it, in order.
    mid = handle.append({"i": N}).next_offset
    for i in range(N + 1, N + 4):
        handle.append({"i": i})
    rest = handle.stream(offset=mid, live=False).read_json()
    check([m["i"] for m in rest] == [N + 1, N + 2, N + 3], f"{surface}: read from {mid}: {rest}")
    tail = handle.head().offset
    # At the tail a catch-up read is empty (/ds answers 204 there, /v1 200).
    check(handle.stream(offset=tail, live=False).read_json() == [], f"{surface}: read at the tail")
    # Live reads: long-poll and SSE, each from the tail, while appends come.
    for mode in ("long-poll", "sse"):
        got, done = [], threading.Event()
        t = threading.Thread(target=live_reader, args=(handle, tail, mode, 5, got, done), daemon=True)
        t.start()
        time.sleep(0.3)  # the reader waits at the tail before the appends
        for k in range(5):
            tail = handle.append({"live": mode, "k": k}).next_offset
        check(done.wait(15), f"{surface} {mode}: saw {len(got)} of 5 live messages")
        check([m["k"] for m in got] == list(range(5)), f"{surface} {mode}: {got}")
    # Writer coordination: a Stream-Seq lower than the last is refused.
    handle.append({"seq": 2}, seq="0002")
    try:
        handle.append({"seq": 1}, seq="0001")
        raise AssertionError(f"{surface}: a lower Stream-Seq was accepted")
    except SeqConflictError as e:
        check(e.status == 409, f"{surface}: {e!r}")
    # Errors: create with another content type, a missing stream.
    try:
        DurableStream.create(url, content_type="text/plain")
        raise AssertionError(f"{surface}: create with another content type succeeded")
    except StreamExistsError as e:
        check(e.status == 409, f"{surface}: {e!r}")
    missing = DurableStream(surface_url(surface, "missing"))
    for call in (missing.head, missing.delete, lambda: missing.stream(offset="-1", live=False).read_json()):
        try:
            call()
            raise AssertionError(f"{surface}: a missing stream answered")
        except StreamNotFoundError as e:
            check(e.status == 404, f"{surface}: {e!r}")
    handle.delete()
    try:
        handle.head()
        raise AssertionError(f"{surface}: the deleted stream still answers HEAD")
    except StreamNotFoundError:
        pass
    handle.close()
    return batches


def main():
    r = httpx.put(f"{BASE}/ds/py{RUN}")
    check(r.status_code == 201, f"PUT bucket: {r.status_code} {r.text}")
    passed = failed = 0
    for surface in ("v1", "ds"):
        try:
            batches = exercise(surface)
            passed += 1
            print(f"python client ({surface}): {N} concurrent appends in {batches} batches, JSON reads, "
                  f"read from an offset, long-poll and SSE live reads, Stream-Seq conflict, 404/409 errors")
        except Exception as e:  # report, then go on to the other surface
            traceback.print_exc()
            failed += 1
            print(f"python client ({surface}): FAILED: {e!r}")
    print(f"python client: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


main()
