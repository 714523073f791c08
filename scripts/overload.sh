#!/usr/bin/env bash
# Overload and recovery, measured (docs/benchmarks.md, "Overload and
# recovery"). Against a release server with default limits (2 shards):
#   1. before: a moderate open-loop rate (--rate R, 1 KiB appends, 16 conns);
#   2. during: a flood far beyond capacity (FLOOD_CONNS closed-loop
#      connections appending FLOOD_BODY-byte bodies) with the same moderate
#      load running alongside it;
#   3. after: the moderate load again, 1 s after the flood has stopped, and
#      once more right after that (after2).
# Prints p50/p99 of the moderate load in each phase (and requests it could
# not send on schedule), the latency of one closed-loop client before,
# during and after, the 503 count of each run, and the server's resident
# memory (peak VmHWM and VmRSS samples).
# No thresholds: this is a measurement, not a test.
#
# Usage: scripts/overload.sh [RATE] [SECONDS]   (defaults 1000, 10)
# Environment: FLOOD_CONNS (256), FLOOD_BODY (1048576), FLOOD_THREADS (2),
# SERVER_FLAGS (extra server flags, e.g. "--max-pending-bytes 4194304").
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/server.sh
rate="${1:-1000}"
secs="${2:-10}"
flood_conns="${FLOOD_CONNS:-256}"
flood_body="${FLOOD_BODY:-1048576}"
flood_threads="${FLOOD_THREADS:-2}"
build_release ringstream loadgen
work_dir overload
work=$WORK
sampler=""
stop_sampler() { [ -z "$sampler" ] || kill "$sampler" 2>/dev/null || true; }
at_exit stop_sampler
# shellcheck disable=SC2086 # SERVER_FLAGS is a list of flags
server_start "$work" 0 "${SERVER_TEST_FLAGS[@]}" --long-poll-timeout-ms 1000 ${SERVER_FLAGS:-}
pid=$SERVER_PID url=$SERVER_URL

kib() { awk -v k="$1" '$1 == k":" { print $2 }' "/proc/$pid/status"; }
# VmRSS every 100 ms, tagged with the phase in $work/phase.
echo setup >"$work/phase"
( while kill -0 "$pid" 2>/dev/null; do
    echo "$(cat "$work/phase") $(kib VmRSS)" >>"$work/rss"
    sleep 0.1
  done ) &
sampler=$!

moderate() { # NAME
  target/release/loadgen --target "$url" --rate "$rate" --connections 16 --streams 64 --prefix steady \
    --duration "$secs" --warmup 1 --allow-errors --quiet --out "$work/$1.json" >/dev/null
}
# One client, closed loop: the latency of a single request, which an
# open-loop schedule that has fallen behind cannot show.
probe() { # NAME
  target/release/loadgen --target "$url" --rate 0 --connections 1 --streams 1 --prefix probe \
    --duration 5 --warmup 0.5 --timeout 60 --allow-errors --quiet --out "$work/$1-probe.json" >/dev/null
}

echo before >"$work/phase"
moderate before
probe before
echo flood >"$work/phase"
target/release/loadgen --target "$url" --rate 0 --connections "$flood_conns" --threads "$flood_threads" \
  --streams "$flood_conns" --prefix flood --payload "$flood_body" --duration "$((secs + 4))" --warmup 0 \
  --timeout 60 --allow-errors --quiet --out "$work/flood.json" >/dev/null &
flood=$!
sleep 2
probe during &
moderate during
wait "$flood"
echo after >"$work/phase"
sleep 1
moderate after
probe after
echo after2 >"$work/phase"
moderate after2
echo "done" >"$work/phase"
hwm="$(kib VmHWM)"
rss_end="$(kib VmRSS)"

python3 - "$work" "$rate" "$hwm" "$rss_end" "$flood_conns" "$flood_body" <<'PY'
import json, sys, collections
work, rate, hwm, rss_end, conns, body = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], int(sys.argv[6])
peak = collections.defaultdict(int)
for line in open(f"{work}/rss"):
    parts = line.split()
    if len(parts) == 2 and parts[1].isdigit():
        peak[parts[0]] = max(peak[parts[0]], int(parts[1]))
def ms(us): return f"{us / 1000:.2f} ms"
print(f"moderate load: --rate {rate}, 16 connections, 1 KiB appends")
print(f"{'phase':8} {'achieved/s':>10} {'p50':>10} {'p99':>10} {'p999':>10} {'max':>10}  {'unsent':>6}  errors (by status)  peak RSS")
for name in ("before", "during", "after", "after2"):
    r = json.load(open(f"{work}/{name}.json"))
    l = r["latency_us"]
    phase = "flood" if name == "during" else name
    print(f"{name:8} {r['achieved_rate']:10.0f} {ms(l['p50']):>10} {ms(l['p99']):>10} {ms(l['p999']):>10} "
          f"{ms(l['max']):>10}  {r['unsent']:>6}  {r['errors']} {r['errors_by_status']}  {peak[phase] / 1024:.0f} MiB")
print("one client, closed loop, 1 KiB appends (5 s)")
print(f"{'phase':8} {'requests':>10} {'p50':>10} {'p99':>10} {'max':>10}")
for name in ("before", "during", "after"):
    r = json.load(open(f"{work}/{name}-probe.json"))
    l = r["latency_us"]
    print(f"{name:8} {r['requests']:>10} {ms(l['p50']):>10} {ms(l['p99']):>10} {ms(l['max']):>10}  {r['errors']} {r['errors_by_status']}")
f = json.load(open(f"{work}/flood.json"))
print(f"flood: {conns} connections x {body // 1024} KiB bodies, closed loop: {f['requests']} appends accepted "
      f"({f['bytes_per_sec'] / 2**20:.0f} MiB/s), errors {f['errors']} {f['errors_by_status']}, "
      f"warm-up errors {f['warmup_errors']}")
print(f"server memory: peak VmHWM {hwm / 1024:.0f} MiB, VmRSS at the end {rss_end / 1024:.0f} MiB")
PY
