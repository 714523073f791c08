#!/usr/bin/env bash
# Paired A/B benchmark of two ringstream binaries on one machine, in one
# run: for each pair, A then B (the order alternates between pairs), each on
# a fresh data directory, the same loadgen workload; per run the achieved
# rate, p50/p99 and the server's CPU time per append (utime+stime of the
# server process over the measured window, from /proc). Prints every run,
# then the medians and the median of the per-pair ratios B/A.
#
#   scripts/bench-pairs.sh A_BINARY B_BINARY [PAIRS] [-- loadgen flags]
#   scripts/bench-pairs.sh /tmp/old/ringstream target/release/ringstream 5
#   scripts/bench-pairs.sh A B 3 -- --connections 128 --streams 100
# Default workload: the canonical one (loadgen with only --target: 64
# streams, 16 connections, 1 KiB closed loop, 10 s after 1 s warmup).
# Environment: SHARDS (2), LOADGEN (default target/release/loadgen, built).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
A="$1"; B="$2"; shift 2
PAIRS=5
if [ $# -gt 0 ] && [ "$1" != "--" ]; then PAIRS="$1"; shift; fi
[ "${1:-}" = "--" ] && shift
if [ -z "${LOADGEN:-}" ]; then
  . scripts/lib/build.sh
  build_release loadgen
  LOADGEN=target/release/loadgen
fi
exec python3 - "$A" "$B" "$PAIRS" "${SHARDS:-2}" "$LOADGEN" "$@" <<'PY'
import json, os, statistics, subprocess, sys, tempfile, time
sys.dont_write_bytecode = True  # no __pycache__ in scripts/lib
sys.path.insert(0, "scripts/lib")
import server  # scripts/lib/server.py
a, b, pairs, shards, loadgen, extra = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6:]
tick = os.sysconf("SC_CLK_TCK")
def arg(name, default):
    return float(extra[extra.index(name) + 1]) if name in extra else default
warmup, duration = arg("--warmup", 1.0), arg("--duration", 10.0)

def cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tick

def run(binary):
    work = tempfile.mkdtemp(prefix="ringstream-pairs.")
    srv = server.start(binary, work, "--shards", shards)  # pinned, default settings
    url = srv.url
    out = f"{work}/report.json"
    lg = subprocess.Popen([loadgen, "--target", url, "--quiet", "--out", out, *extra], stdout=subprocess.DEVNULL)
    time.sleep(warmup + 0.3)  # creation and warm-up are not measured
    c0 = cpu_s(srv.pid)
    time.sleep(duration - 0.6)
    c1 = cpu_s(srv.pid)
    failed = lg.wait() != 0
    srv.stop()
    if failed:  # the server is stopped and its directory removed first
        subprocess.run(["rm", "-rf", work])
        sys.exit(f"loadgen failed against {binary}")
    r = json.load(open(out))
    subprocess.run(["rm", "-rf", work])
    rate = r["achieved_rate"]
    return {"rate": rate, "p50": r["latency_us"]["p50"], "p99": r["latency_us"]["p99"],
            "cpu_us": (c1 - c0) * 1e6 / (rate * (duration - 0.6))}

runs = {a: [], b: []}
for i in range(pairs):
    for binary in ((a, b) if i % 2 == 0 else (b, a)):
        r = run(binary)
        runs[binary].append(r)
        print(f"pair {i + 1} {'A' if binary == a else 'B'}: {r['rate']:.0f}/s, p50 {r['p50']} us, p99 {r['p99']} us, "
              f"server CPU {r['cpu_us']:.1f} us/append", flush=True)
med = lambda xs: statistics.median(xs)
for label, binary in (("A", a), ("B", b)):
    rs = runs[binary]
    print(f"{label} {binary}: median {med([r['rate'] for r in rs]):.0f}/s, p99 {med([r['p99'] for r in rs]):.0f} us, "
          f"CPU {med([r['cpu_us'] for r in rs]):.1f} us/append")
for k, name in (("rate", "throughput"), ("p99", "p99"), ("cpu_us", "CPU per append")):
    ratios = [y[k] / x[k] for x, y in zip(runs[a], runs[b])]
    print(f"B/A {name}: median {med(ratios):.2f} (pairs {min(ratios):.2f}-{max(ratios):.2f})")
PY
