#!/usr/bin/env python3
"""The steps of scripts/cell-tiering.sh: tiered storage in a cell of three
real processes (--shards 2, 1 MiB segments, --hot-bytes 8 MiB each) against
a real S3-compatible store that the shell script started ($S3_ENDPOINT,
$S3_BUCKET, AWS_* in the environment). Standard library only.

  1. a burst of appends through a follower; the leader (node 1) is killed
     with -9 while its uploads run; appends go on through node 3 under the
     new leader; node 1 starts again (and, steered, leads again);
  2. settled: every node within its budget; the store holds exactly one
     object per remote segment per group (no orphan, not one per node), and
     every node holds the same skeletons, no file beside any;
  3. every stream reads back byte-exact through every node, from -1 and
     from random acknowledged offsets (cold reads from the group's objects);
  4. node 3 is replaced the runbook's way (removed, emptied, started with
     --cell-join, added): it copies the sealed segments and the skeletons,
     and serves every byte;
  5. every disk lost: the three nodes emptied and made again from the store
     (--restore-from-tier): a leader, every stream a byte-exact prefix of
     what was acknowledged (at most the hot tail lost), appends taken again;
  6. every stream deleted: reclamation through the log empties the store.

Usage: cell-tiering-test.py BINARY WORK
"""

import importlib.util
import json
import os
import random
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import cell  # noqa: E402  scripts/lib/cell.py
import server  # noqa: E402  scripts/lib/server.py

_spec = importlib.util.spec_from_file_location(
    "tiering_test", os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiering-test.py"))
tt = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tt)

SHARDS = 2
SEGMENT = 1024 * 1024
HOT = 8 * 1024 * 1024
STREAMS = [f"/v1/stream/ct-{i}" for i in range(12)]


def fail(msg):
    print(f"cell-tiering: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def say(msg):
    print(f"cell-tiering: {msg}", file=sys.stderr, flush=True)


class Cell:
    """Three nodes; each keeps its HTTP port across restarts."""

    def __init__(self, binary, work):
        self.binary, self.work = binary, work
        self.secret = cell.write_secret(work)
        self.peers = [f"127.0.0.1:{p}" for p in cell.peer_ports(3, SHARDS)]
        self.voters = ",".join(f"{i + 1}@{p}" for i, p in enumerate(self.peers))
        # Kept across restarts; from the ephemeral range, above every peer port.
        self.ports = cell.free_ports(3)
        self.nodes = {}

    def flags(self, n, join=False):
        cell_list = f"{n}@{self.peers[n - 1]},1@{self.peers[0]}" if join else self.voters
        return ["--shards", str(SHARDS), "--no-pin", "--segment-bytes", str(SEGMENT), "--node-id", str(n),
                "--cell", cell_list, "--cell-secret-file", self.secret, *(["--cell-join"] if join else []),
                "--tier", "s3", "--tier-endpoint", os.environ["S3_ENDPOINT"], "--tier-bucket",
                os.environ["S3_BUCKET"], "--hot-bytes", str(HOT)]

    def data(self, n):
        return os.path.join(self.work, f"n{n}", "data")

    def start(self, n, join=False):
        self.nodes[n] = server.start(self.binary, os.path.join(self.work, f"n{n}"), *self.flags(n, join),
                                     port=self.ports[n - 1], ready_timeout=120)

    def kill(self, n):
        s = self.nodes.pop(n)
        s.proc.kill()
        s.proc.wait()

    def url(self, n):
        return f"http://127.0.0.1:{self.ports[n - 1]}"

    def leader(self):
        return next((n for n in self.nodes if cell.leads(self.url(n))), None)

    def stop_all(self):
        for n in list(self.nodes):
            self.nodes.pop(n).stop()


def wait(what, secs, check):
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    fail(f"{what} not within {secs} s")


def blob(s, i):
    return tt.blob(s, i)


def append(c, state, s, retry=False):
    """One append; with `retry`, a 503 (no leader yet) is asked again, after
    checking whether the append landed anyway (a 503 does not say)."""
    i = len(state[s])
    for _ in range(600):
        st, h, d = c.req("POST", s, blob(s, i), {"Content-Type": "application/octet-stream"})
        if st in (200, 204):
            state[s].append(h["stream-next-offset"])
            return
        if st != 503 or not retry:
            fail(f"POST {s} #{i}: {st} {d[:200]}")
        time.sleep(0.1)
        landed = landed_offset(c, state, s)
        if landed:
            state[s].append(landed)
            return
    fail(f"POST {s} #{i}: 503 for a minute")


def landed_offset(c, state, s):
    """The offset after the next append if it is in the stream whole (None if absent)."""
    offset = state[s][-1] if state[s] else "-1"
    st, h, d = c.req("GET", f"{s}?offset={offset}")
    if st == 503:
        return None
    if st != 200:
        fail(f"GET {s} at {offset}: {st}")
    if not d:
        return None
    if d != blob(s, len(state[s])):
        fail(f"{s}: unacknowledged bytes after the last acknowledged append are not the next append")
    return h["stream-next-offset"]


def metrics(url):
    return tt.metrics(tt.Client(url))


def uploads(url):
    return tt.total(metrics(url), "ringstream_tier_uploads_total:ok")


def over_budget(url):
    m = metrics(url)
    return [s for s, v in m.get("ringstream_tier_local_bytes", {}).items()
            if v > m["ringstream_tier_hot_budget_bytes"][s]]


def step_write_and_kill(c, state):
    client = tt.Client(c.url(2))
    for s in STREAMS:
        # A create spans groups: 503 until the leader of every group has retold (a moment after it leads).
        for _ in range(100):
            st, _, d = client.req("PUT", s, b"", {"Content-Type": "application/octet-stream"})
            if st != 503:
                break
            time.sleep(0.1)
        if st not in (200, 201):
            fail(f"PUT {s} through node 2: {st} {d[:200]}")
    written, i = 0, 0
    before = uploads(c.url(1))
    # A burst through a follower (forwarded), then the kill while the
    # leader's uploads run (it is still over its budget, and more are due).
    while written < 6 * HOT:
        s = STREAMS[i % len(STREAMS)]
        append(client, state, s)
        written += len(blob(s, len(state[s]) - 1))
        i += 1
    wait("uploads on the leader", 60, lambda: uploads(c.url(1)) >= before + 2)
    backlog = bool(over_budget(c.url(1)))
    moved = uploads(c.url(1)) - before
    c.kill(1)
    say(f"killed the leader (node 1) with -9 after {moved} uploads (still over its budget: {backlog}); "
        f"{written} bytes written through node 2")
    new = wait("a new leader", 30, c.leader)
    say(f"node {new} leads")
    client = tt.Client(c.url(3))
    while written < 8 * HOT:
        s = STREAMS[i % len(STREAMS)]
        append(client, state, s, retry=True)
        written += len(blob(s, len(state[s]) - 1))
        i += 1
    c.start(1)
    wait("node 1 leading again", 60, lambda: c.leader() == 1)
    say(f"node 1 restarted and leads again; {written} bytes written in all")


def skeletons(c, n):
    out = {}
    for g in range(SHARDS):
        names = os.listdir(os.path.join(c.data(n), f"shard-{g}"))
        sk = {int(x[:-5]) for x in names if x.endswith(".skel")}
        local = {int(x[:-4]) for x in names if x.endswith(".seg")}
        if sk & local:
            return None
        out[g] = sk
    return out


def objects():
    keys = tt.s3_list(os.environ["S3_ENDPOINT"], os.environ["S3_BUCKET"], "ringstream/")
    out = {g: [] for g in range(SHARDS)}
    for k, _ in keys:
        m = re.fullmatch(r"ringstream/cell/shard-(\d+)/(\d{20})\.t(\d+)\.seg", k)
        if not m:
            fail(f"an object of another shape: {k}")
        out[int(m.group(1))].append((int(m.group(2)), int(m.group(3))))
    return out


def settled(c):
    """Every node within budget, the same skeletons everywhere, one object each."""
    if any(over_budget(c.url(n)) for n in c.nodes):
        return None
    skels = [skeletons(c, n) for n in sorted(c.nodes)]
    if None in skels or any(s != skels[0] for s in skels):
        return None
    objs = objects()
    for g in range(SHARDS):
        numbers = [no for no, _ in objs[g]]
        if sorted(numbers) != sorted(skels[0][g]):
            return None
    return skels[0], objs


def step_settle(c):
    skels, objs = wait("the cell settled (budgets, skeletons, one object per remote segment)", 120,
                       lambda: settled(c))
    remote = tt.total(metrics(c.url(1)), "ringstream_tier_remote_segments")
    count = sum(len(v) for v in objs.values())
    if count != remote:
        fail(f"{count} objects, the leader names {remote} remote segments")
    if count == 0:
        fail("nothing moved to the store")
    terms = sorted({t for v in objs.values() for _, t in v})
    swept = 0
    for n in (1, 2, 3):
        with open(os.path.join(c.work, f"n{n}", "err")) as f:
            swept += sum(int(m) for m in re.findall(r"deleted (\d+) objects earlier leaders left", f.read()))
    say(f"settled: {count} objects for {remote} remote segments (groups: "
        f"{', '.join(f'{g}: {len(objs[g])}' for g in range(SHARDS))}), uploaded in terms {terms}, "
        f"{swept} left by a deposed leader swept; "
        f"every node holds the same {sum(len(v) for v in skels.values())} skeletons and no file beside one")
    return count


def verify(c, state, n):
    client = tt.Client(c.url(n))
    rng = random.Random(n)
    total = 0
    for s in STREAMS:
        want = b"".join(blob(s, i) for i in range(len(state[s])))
        st, _, got = tt.read_from(client, s, "-1")
        if st != 200 or got != want:
            fail(f"node {n}: {s} from -1: {st}, {len(got)} bytes, want {len(want)}")
        for _ in range(2):
            k = rng.randrange(len(state[s]))
            st, _, got = tt.read_from(client, s, state[s][k])
            tail = want[len(b"".join(blob(s, i) for i in range(k + 1))):]
            if st != 200 or got != tail:
                fail(f"node {n}: {s} from the offset of append {k}: {st}")
        total += len(want)
    fetched = tt.total(metrics(c.url(n)), "ringstream_tier_cold_reads_total:fetched")
    say(f"node {n}: {total} bytes over {len(STREAMS)} streams read back byte-exact ({fetched} cold block fetches)")
    if fetched == 0:
        fail(f"node {n} served no cold read")


def members(c, via, n, method):
    body = json.dumps({"peer": c.peers[n - 1]}).encode() if method == "POST" else None
    req = urllib.request.Request(f"{c.url(via)}/_cell/members/{n}", data=body, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def step_replace(c, state):
    t0 = time.monotonic()
    wait("node 3 removed", 60, lambda: members(c, 1, 3, "DELETE") == 200)
    c.kill(3)
    shutil.rmtree(c.data(3))
    # It boots only once added (its peers refuse it until then): added from here meanwhile.
    booting = threading.Thread(target=c.start, args=(3, True))
    booting.start()
    wait("node 3 added again as a voter", 120, lambda: members(c, 1, 3, "POST") == 200)
    booting.join()
    skels = skeletons(c, 3)
    if skels != skeletons(c, 1):
        fail(f"node 3's skeletons {skels} are not node 1's {skeletons(c, 1)}")
    say(f"node 3 replaced (emptied, joined, added) in {time.monotonic() - t0:.1f} s; it copied "
        f"{sum(len(v) for v in skels.values())} skeletons")
    verify(c, state, 3)


def step_restore(c, state):
    """Every disk lost: the three nodes killed and emptied, each made again
    from the store (--restore-from-tier), started: a leader, every stream a
    byte-exact prefix of what was acknowledged, at most the hot tail short;
    appends are taken again."""
    for n in (1, 2, 3):
        c.kill(n)
        shutil.rmtree(c.data(n))
    for n in (1, 2, 3):
        out = subprocess.run([c.binary, "--data-dir", c.data(n), *c.flags(n), "--restore-from-tier"],
                             capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            fail(f"node {n}: --restore-from-tier exited {out.returncode}: {out.stderr[-2000:]}")
        if n == 1:
            for line in out.stdout.splitlines():
                say(f"restored: {line}")
    for n in (1, 2, 3):
        c.start(n)
    wait("a leader in the restored cell", 60, c.leader)
    client = tt.Client(c.url(2))
    written = restored = whole = 0
    for s in STREAMS:
        want = b"".join(blob(s, i) for i in range(len(state[s])))
        st, _, got = tt.read_from(client, s, "-1")
        if st != 200 or not want.startswith(got):
            fail(f"{s} after the restore: {st}, {len(got)} bytes, not a prefix of the {len(want)} acknowledged")
        kept = next(k for k in range(len(state[s]) + 1) if len(b"".join(blob(s, i) for i in range(k))) >= len(got))
        if len(b"".join(blob(s, i) for i in range(kept))) != len(got):
            fail(f"{s} after the restore: {len(got)} bytes end inside an append")
        state[s] = state[s][:kept]
        written, restored, whole = written + len(want), restored + len(got), whole + (got == want)
    lost = written - restored
    if restored == 0 or lost > HOT + 2 * SHARDS * SEGMENT:
        fail(f"restored {restored} of {written} bytes: more lost ({lost}) than the hot tail")
    say(f"restored cell: {restored} of {written} acknowledged bytes served ({lost} lost with the disks: the hot "
        f"tail), {whole} of {len(STREAMS)} streams whole, every stream a byte-exact prefix")
    for s in STREAMS:
        append(client, state, s, retry=True)
    for n in (1, 2, 3):
        verify(c, state, n)


def step_delete(c):
    client = tt.Client(c.url(2))
    for s in STREAMS:
        st, _, d = client.req("DELETE", s)
        if st not in (200, 204):
            fail(f"DELETE {s}: {st} {d[:200]}")

    left = {}

    def empty():
        left["objects"], left["skeletons"] = objects(), [skeletons(c, n) for n in c.nodes]
        return (all(not v for v in left["objects"].values())
                and all(s and not any(s.values()) for s in left["skeletons"]))
    deadline = time.monotonic() + 120
    while not empty():
        if time.monotonic() > deadline:
            fail(f"the store not emptied by reclamation within 120 s: objects {left['objects']}, "
                 f"skeletons {left['skeletons']}")
        time.sleep(0.2)
    say("every stream deleted: the store holds no object, no node a skeleton")


def main():
    binary, work = sys.argv[1], sys.argv[2]
    c = Cell(binary, work)
    try:
        for n in (1, 2, 3):
            c.start(n)
        wait("node 1 leading", 30, lambda: c.leader() == 1)
        state = {s: [] for s in STREAMS}
        step_write_and_kill(c, state)
        step_settle(c)
        for n in (1, 2, 3):
            verify(c, state, n)
        step_replace(c, state)
        step_restore(c, state)
        step_delete(c)
        say("all checks passed")
    finally:
        c.stop_all()


if __name__ == "__main__":
    main()
