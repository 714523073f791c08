#!/usr/bin/env bash
# Paired benchmark of a replicated cell against a single node, same binary,
# same machine, one run: for each pair and workload, a single node
# (--shards 1) and a cell of three nodes (--shards 1 each, on loopback; the
# load goes to node 1, which every group is steered to be led by), the
# order alternating between pairs, each on fresh data directories. Per run:
# the achieved rate, p50/p99, and CPU time per append (the single node's,
# and the cell's three nodes summed); every server --no-pin (three on one
# machine would otherwise share CPU 0). Prints every run, then medians and
# the median of the per-pair ratios cell/single. Failed appends (a 503 while
# leadership moves) are counted and printed, not fatal.
#
#   scripts/bench-cell.sh [PAIRS]        # default 3
# Workloads: closed loop, 32 and 128 connections; open loop 5,000/s on 32
# connections; 1 KiB appends to 64 streams, 10 s after 1 s warm-up.
# Environment: RINGSTREAM, LOADGEN (default: build the release binaries).
set -euo pipefail
cd "$(dirname "$0")/.."
PAIRS="${1:-3}"
. scripts/lib/build.sh
server_binary
if [ -z "${LOADGEN:-}" ]; then
  build_release loadgen
  LOADGEN=target/release/loadgen
fi
exec python3 - "$SERVER_BIN" "$LOADGEN" "$PAIRS" <<'PY'
import json, os, subprocess, sys, tempfile, time
sys.dont_write_bytecode = True  # no __pycache__ in scripts/lib
sys.path.insert(0, "scripts/lib")
import server  # scripts/lib/server.py
import cell  # scripts/lib/cell.py
import pairs as pairs_lib  # scripts/lib/pairs.py
binary, loadgen, pairs = sys.argv[1], sys.argv[2], int(sys.argv[3])
tick = os.sysconf("SC_CLK_TCK")
warmup, duration = 1.0, 10.0
workloads = {
    "closed c32": ["--connections", "32", "--rate", "0"],
    "closed c128": ["--connections", "128", "--rate", "0"],
    "open 5000/s": ["--connections", "32", "--rate", "5000"],
}

def cpu_s(pids):
    total = 0
    for pid in pids:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        total += (int(f[11]) + int(f[12])) / tick
    return total

def start(kind, work):
    if kind == "single":
        s = server.start(binary, work, "--shards", "1", "--no-pin")
        return [s], s.url
    nodes = cell.start(binary, work, "--shards", "1", "--no-pin")
    return nodes, nodes[0].url

def run(kind, flags):
    work = tempfile.mkdtemp(prefix="ringstream-cellbench.")
    nodes, url = start(kind, work)
    out = f"{work}/report.json"
    lg = subprocess.Popen([loadgen, "--target", url, "--quiet", "--out", out, "--warmup", str(warmup),
                           "--duration", str(duration), "--allow-errors", *flags], stdout=subprocess.DEVNULL)
    time.sleep(warmup + 0.3)
    pids = [n.pid for n in nodes]
    c0 = cpu_s(pids)
    time.sleep(duration - 0.6)
    c1 = cpu_s(pids)
    failed = lg.wait() != 0
    for n in nodes:
        n.stop()
    if failed:
        subprocess.run(["rm", "-rf", work])
        sys.exit(f"loadgen failed against the {kind}")
    r = json.load(open(out))
    subprocess.run(["rm", "-rf", work])
    rate = r["achieved_rate"]
    return {"rate": rate, "p50": r["latency_us"]["p50"], "p99": r["latency_us"]["p99"],
            "cpu_us": (c1 - c0) * 1e6 / (rate * (duration - 0.6)), "errors": r.get("errors", 0)}

for name, flags in workloads.items():
    def show(i, kind, r):
        print(f"{name} pair {i} {kind}: {r['rate']:.0f}/s, p50 {r['p50']} us, p99 {r['p99']} us, "
              f"CPU {r['cpu_us']:.1f} us/append, {r['errors']} failed appends", flush=True)

    runs = pairs_lib.alternate(pairs, "single", "cell", lambda kind: run(kind, flags), show)
    for kind in ("single", "cell"):
        m = lambda k: pairs_lib.median(runs, kind, k)
        print(f"{name} {kind}: median {m('rate'):.0f}/s, p99 {m('p99'):.0f} us, CPU {m('cpu_us'):.1f} us/append")
    for k, label in (("rate", "throughput"), ("p99", "p99"), ("cpu_us", "CPU per append")):
        mid, lo, hi = pairs_lib.ratio(runs, "single", "cell", k)
        print(f"{name} cell/single {label}: median {mid:.2f} (pairs {lo:.2f}-{hi:.2f})", flush=True)
PY
