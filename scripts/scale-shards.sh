#!/usr/bin/env bash
# Shard scaling, prepared for a larger machine (e.g. 16 cores; never part of
# the test suite): for each shard count (default 1 2 4 8 16, capped at the
# CPUs), a fresh ringstream on a fresh data directory, then loadgen closed
# loop with 1 KiB durable appends over 1,000 streams, both spreads (rotate:
# every connection writes every stream; pinned: one writer per stream),
# 64 connections per shard, loadgen on LOADGEN_THREADS threads (default a
# quarter of the CPUs). Per run: appends/s, p50/p99, server CPU per append,
# the share of requests that crossed cores and connections moved. Prints a
# Markdown table for docs/benchmarks.md and keeps every loadgen report in
# $OUT (default bench-results/scale-<timestamp>).
#
# Usage: scripts/scale-shards.sh [SHARDS ...]   (DURATION=10, STREAMS=1000)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/server.sh
build_release loadgen
server_binary
LG=target/release/loadgen
CPUS=$(nproc)
DURATION=${DURATION:-10}
STREAMS=${STREAMS:-1000}
LOADGEN_THREADS=${LOADGEN_THREADS:-$(( CPUS / 4 > 0 ? CPUS / 4 : 1 ))}
OUT=${OUT:-bench-results/scale-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
work_dir scale
cpu_s() { awk -v t="$(getconf CLK_TCK)" '{print ($14 + $15) / t}' "/proc/$1/stat"; }
metric() { curl -s "$URL/metrics" | awk -v m="$1" 'index($1, m "{") == 1 || $1 == m {s += $2} END {print s + 0}'; }

echo "machine: $CPUS CPUs, $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); loadgen threads $LOADGEN_THREADS" | tee "$OUT/machine.txt"
# In this shell (not a pipeline's subshell), so the servers are stopped at exit.
{
echo "| shards | spread | appends/s | p50 µs | p99 µs | server CPU µs/append | requests crossing cores | connections moved |"
echo "|---|---|---|---|---|---|---|---|"
for S in "${@:-1 2 4 8 16}"; do
  for s in $S; do
    [ "$s" -le "$CPUS" ] || continue
    for spread in rotate pinned; do
      rm -rf "$WORK/data"
      server_start "$WORK" 0 --shards "$s"
      PID=$SERVER_PID URL=$SERVER_URL
      c=$(( 64 * s ))
      "$LG" --target "$URL" --surface v1 --streams "$STREAMS" --setup-only --connections 64 >/dev/null
      h0=$(metric ringstream_handoffs_total); r0=$(metric ringstream_http_requests_total)
      "$LG" --target "$URL" --surface v1 --streams "$STREAMS" --no-setup --spread "$spread" --connections "$c" \
        --threads "$LOADGEN_THREADS" --payload 1024 --duration "$DURATION" --warmup 1 --quiet \
        --out "$OUT/s$s-$spread.json" >/dev/null &
      L=$!
      sleep 1.5; t0=$(cpu_s "$PID"); a0=$(metric ringstream_appends_total)
      sleep "$(echo "$DURATION - 1" | bc)"; t1=$(cpu_s "$PID"); a1=$(metric ringstream_appends_total)
      wait "$L" || true
      h1=$(metric ringstream_handoffs_total); r1=$(metric ringstream_http_requests_total)
      moved=$(curl -s "$URL/metrics" | awk '/^ringstream_connections_moved_total/ && /direction="out"/ {s += $2} END {print s + 0}')
      server_stop "$PID"
      python3 - "$OUT/s$s-$spread.json" "$s" "$spread" "$t0" "$t1" "$a0" "$a1" "$h0" "$h1" "$r0" "$r1" "$moved" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s, spread = sys.argv[2], sys.argv[3]
t0, t1, a0, a1, h0, h1, r0, r1, moved = map(float, sys.argv[4:])
cpu = (t1 - t0) * 1e6 / max(a1 - a0, 1)
cross = (h1 - h0) / max(r1 - r0, 1)
print(f"| {s} | {spread} | {r['achieved_rate']:,.0f} | {r['latency_us']['p50']} | {r['latency_us']['p99']} | {cpu:.1f} | {cross:.0%} | {moved:.0f} |")
PY
    done
  done
done
} > >(tee "$OUT/table.md")
