#!/usr/bin/env bash
# Paired benchmark of live reads in a replicated cell: the same cell of
# three nodes (--shards 1 each, on loopback, every server --no-pin), the
# writers always on node 1 (the leader every group is steered to), the live
# readers on the leader itself or on follower node 2, alternating between
# the two in each pair. What a follower's live read costs over the leader's:
# it applies the entry one replication hop later, and each of its live
# reads first catches up with the leader's commit (a read index round,
# src/cell/catch_up.rs). Per run: delivery latency (append sent -> the
# reader has it) p50/p99, and the appends' p99; then medians and the
# median of the per-pair ratios follower/leader.
#
#   scripts/bench-follower-reads.sh [PAIRS] [--sse]   # default 3, long-poll
# Workload: open loop 2,000 appends/s of 1 KiB on 16 connections to 64
# streams, 64 live readers (one a stream), 10 s after 1 s of warm-up.
# Environment: RINGSTREAM, LOADGEN (default: build the release binaries).
set -euo pipefail
cd "$(dirname "$0")/.."
PAIRS=3 MODE=long-poll
for arg in "$@"; do
  case "$arg" in
    --sse) MODE=sse ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    [0-9]*) PAIRS="$arg" ;;
    *) echo "bench-follower-reads: unknown argument '$arg' (PAIRS, --sse, --help)" >&2; exit 2 ;;
  esac
done
. scripts/lib/build.sh
server_binary
if [ -z "${LOADGEN:-}" ]; then
  build_release loadgen
  LOADGEN=target/release/loadgen
fi
exec python3 - "$SERVER_BIN" "$LOADGEN" "$PAIRS" "$MODE" <<'PY'
import json, os, subprocess, sys, tempfile
sys.dont_write_bytecode = True  # no __pycache__ in scripts/lib
sys.path.insert(0, "scripts/lib")
import cell  # scripts/lib/cell.py
import pairs as pairs_lib  # scripts/lib/pairs.py
binary, loadgen, pairs, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
warmup, duration = 1.0, 10.0
flags = ["--connections", "16", "--rate", "2000", "--streams", "64", "--readers", "64", "--read-mode", mode]

def run(where):
    work = tempfile.mkdtemp(prefix="ringstream-followerbench.")
    nodes = cell.start(binary, work, "--shards", "1", "--no-pin")
    out = f"{work}/report.json"
    reader = nodes[0].url if where == "leader" else nodes[1].url
    done = subprocess.run([loadgen, "--target", nodes[0].url, "--read-target", reader, "--quiet", "--out", out,
                           "--warmup", str(warmup), "--duration", str(duration), *flags], stdout=subprocess.DEVNULL)
    for n in nodes:
        n.stop()
    if done.returncode != 0:
        subprocess.run(["rm", "-rf", work])
        sys.exit(f"loadgen failed with the readers on the {where}")
    r = json.load(open(out))
    subprocess.run(["rm", "-rf", work])
    d = r["delivery_latency_us"]
    return {"d50": d["p50"], "d99": d["p99"], "a99": r["latency_us"]["p99"], "deliveries": r.get("deliveries", 0)}

def show(i, where, r):
    print(f"{mode} pair {i} readers on the {where}: delivery p50 {r['d50']} us, p99 {r['d99']} us; "
          f"append p99 {r['a99']} us", flush=True)

runs = pairs_lib.alternate(pairs, "leader", "follower", run, show)
for where in ("leader", "follower"):
    m = lambda k: pairs_lib.median(runs, where, k)
    print(f"{mode} readers on the {where}: median delivery p50 {m('d50'):.0f} us, p99 {m('d99'):.0f} us; "
          f"append p99 {m('a99'):.0f} us")
for k, label in (("d50", "delivery p50"), ("d99", "delivery p99"), ("a99", "append p99")):
    mid, lo, hi = pairs_lib.ratio(runs, "leader", "follower", k)
    print(f"{mode} follower/leader {label}: median {mid:.2f} (pairs {lo:.2f}-{hi:.2f})", flush=True)
PY
