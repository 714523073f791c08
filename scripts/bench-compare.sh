#!/usr/bin/env bash
# Side-by-side benchmark, one machine, one run:
#   1. the floors: 4 KiB O_DIRECT write + fdatasync (QD1) and a loopback TCP
#      round trip, each a small probe;
#   2. ringstream: saturation (closed loop) of durable 1 KiB appends over 64
#      streams, then open loop at 25 / 50 / 75 % of it;
#   3. the Node reference server (npm @durable-streams/server, file-backed),
#      the same on /v1/stream;
#   4. the ratios.
# Results (loadgen JSON reports and a summary) go to $OUT (default
# ./bench-results/<timestamp>).
#
# Usage: scripts/bench-compare.sh [--duration SECS] [--shards N] [--skip-ref]
# Environment: REF_VERSION (default 0.3.7), REF_CACHE (npm cache dir),
# RINGSTREAM (the server binary to measure; default target/release/ringstream).
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=10
SHARDS=""
SKIP_REF=0
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) DURATION="$2"; shift 2 ;;
    --shards) SHARDS="$2"; shift 2 ;;
    --skip-ref) SKIP_REF=1; shift ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
OUT="${OUT:-bench-results/$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$OUT"
REF_VERSION="${REF_VERSION:-0.3.7}"
REF_CACHE="${REF_CACHE:-$HOME/.cache/ringstream-refserver}"

cargo build --release --quiet -p ringstream -p loadgen
RS="${RINGSTREAM:-target/release/ringstream}"
LG=target/release/loadgen
WORK="$(mktemp -d "${TMPDIR:-/tmp}/ringstream-bench.XXXXXX")"
PIDS=()
cleanup() { for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT

echo "machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" | tee "$OUT/summary.txt"
echo "load tool and servers share these CPUs" | tee -a "$OUT/summary.txt"

# --- 1. floors -------------------------------------------------------------------
python3 - "$WORK" <<'PY' | tee -a "$OUT/summary.txt"
import mmap, os, socket, statistics, sys, threading, time
work = sys.argv[1]
def pct(xs, p):
    xs = sorted(xs); return xs[min(len(xs) - 1, int(p * len(xs)))]
path = os.path.join(work, "floor.dat")
size = 16 << 20
with open(path, "wb") as f:          # pre-zeroed, like a ringstream segment
    f.write(b"\0" * size); f.flush(); os.fsync(f.fileno())
fd = os.open(path, os.O_RDWR | os.O_DIRECT)
buf = mmap.mmap(-1, 4096); buf.write(b"x" * 4096)
lat = []
for i in range(3000):
    t = time.perf_counter_ns()
    os.pwrite(fd, buf, (i % 4096) * 4096); os.fdatasync(fd)
    lat.append((time.perf_counter_ns() - t) / 1000)
os.close(fd)
print(f"disk floor (4 KiB O_DIRECT write + fdatasync, QD1, pre-zeroed): p50 {pct(lat,.5):.0f} us, p99 {pct(lat,.99):.0f} us")
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
def echo():
    c, _ = srv.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        d = c.recv(64)
        if not d: return
        c.sendall(d)
threading.Thread(target=echo, daemon=True).start()
cl = socket.create_connection(srv.getsockname()); cl.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
rtt = []
for i in range(5000):
    t = time.perf_counter_ns(); cl.sendall(b"x" * 64); n = 0
    while n < 64: n += len(cl.recv(64 - n))
    rtt.append((time.perf_counter_ns() - t) / 1000)
print(f"loopback round trip (64 B, python): p50 {pct(rtt,.5):.0f} us, p99 {pct(rtt,.99):.0f} us")
PY

wait_listening() { # file pattern
  for _ in $(seq 1 600); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "server did not start; log:" >&2; cat "$1" >&2; exit 3
}

# Runs the saturation search and the open-loop fractions against $1 (base URL), label $2.
measure() {
  local url="$1" label="$2" best=0 c
  for c in 16 64 256; do
    "$LG" --target "$url" --surface v1 --streams 64 --connections "$c" --payload 1024 \
      --duration "$DURATION" --warmup 2 --rate 0 --quiet --allow-errors --prefix "sat$c" \
      --out "$OUT/$label-closed-c$c.json" > "$OUT/$label-closed-c$c.txt"
    local r; r=$(python3 -c "import json;print(int(json.load(open('$OUT/$label-closed-c$c.json'))['achieved_rate']))")
    echo "$label closed loop, $c connections: $r appends/s"
    [ "$r" -gt "$best" ] && best=$r
  done
  echo "$best" > "$OUT/$label-saturation"
  local f
  for f in 25 50 75; do
    local rate=$(( best * f / 100 ))
    [ "$rate" -ge 1 ] || rate=1
    "$LG" --target "$url" --surface v1 --streams 64 --connections 256 --payload 1024 \
      --duration "$DURATION" --warmup 2 --rate "$rate" --quiet --allow-errors --prefix "open$f" \
      --out "$OUT/$label-open$f.json" --hgrm "$OUT/$label-open$f.hgrm" > "$OUT/$label-open$f.txt"
    python3 - "$OUT/$label-open$f.json" "$label" "$f" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); l = r["latency_us"]
print(f"{sys.argv[2]} open loop at {sys.argv[3]}% ({r['target_rate']:.0f}/s target, {r['achieved_rate']:.0f}/s achieved): "
      f"p50 {l['p50']} us, p99 {l['p99']} us, p99.9 {l['p999']} us, max {l['max']} us, errors {r['errors']}")
PY
  done
}

# --- 2. ringstream -----------------------------------------------------------------
mkdir -p "$WORK/rs"
"$RS" --listen 127.0.0.1:0 --data-dir "$WORK/rs" ${SHARDS:+--shards "$SHARDS"} >"$WORK/rs.out" 2>"$WORK/rs.err" &
PIDS+=($!)
wait_listening "$WORK/rs.out" "listening on"
RS_URL="http://$(grep -o '127.0.0.1:[0-9]*' "$WORK/rs.out" | head -1)"
measure "$RS_URL" ringstream | tee -a "$OUT/summary.txt"
curl -s "$RS_URL/metrics" > "$OUT/ringstream-metrics.txt" || true
grep -E "flush_batch_records_(sum|count)|flush_seconds_(sum|count)|shard_requests_total|handoffs_total|mesh_calls_total" "$OUT/ringstream-metrics.txt" | tee -a "$OUT/summary.txt" || true
kill "${PIDS[-1]}"; wait "${PIDS[-1]}" 2>/dev/null || true

# --- 3. the reference server ---------------------------------------------------------
if [ "$SKIP_REF" = 0 ]; then
  pkg="$REF_CACHE/node_modules/@durable-streams/server/package.json"
  have="$( [ -f "$pkg" ] && node -p "require('$pkg').version" 2>/dev/null || true)"
  if [ "$have" != "$REF_VERSION" ]; then
    mkdir -p "$REF_CACHE"
    [ -f "$REF_CACHE/package.json" ] || echo '{"name":"ringstream-refserver","private":true,"type":"module"}' > "$REF_CACHE/package.json"
    (cd "$REF_CACHE" && npm install --no-audit --no-fund --loglevel=error "@durable-streams/server@$REF_VERSION" >&2)
  fi
  cat > "$REF_CACHE/bench-server.mjs" <<'JS'
import { DurableStreamTestServer } from "@durable-streams/server"
const s = new DurableStreamTestServer({ port: 0, host: "127.0.0.1", dataDir: process.env.DATA_DIR, compression: false })
await s.start()
console.log(`listening ${s.url}`)
process.on("SIGTERM", () => process.exit(0))
JS
  mkdir -p "$WORK/ref"
  (cd "$REF_CACHE" && DATA_DIR="$WORK/ref" exec node bench-server.mjs) >"$WORK/ref.out" 2>"$WORK/ref.err" &
  PIDS+=($!)
  wait_listening "$WORK/ref.out" "listening"
  REF_URL="$(grep -o 'http://[0-9.]*:[0-9]*' "$WORK/ref.out" | head -1)"
  measure "$REF_URL" reference | tee -a "$OUT/summary.txt"
  kill "${PIDS[-1]}" 2>/dev/null || true

  # --- 4. ratios ----------------------------------------------------------------------
  python3 - "$OUT" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys, os
o = sys.argv[1]
rs = int(open(os.path.join(o, "ringstream-saturation")).read()); ref = int(open(os.path.join(o, "reference-saturation")).read())
print(f"saturation: ringstream {rs}/s vs reference {ref}/s = {rs / max(ref, 1):.1f}x")
for f in (25, 50, 75):
    a = json.load(open(os.path.join(o, f"ringstream-open{f}.json")))["latency_us"]
    b = json.load(open(os.path.join(o, f"reference-open{f}.json")))["latency_us"]
    print(f"open loop at {f}% of each one's saturation: p99 ringstream {a['p99']} us vs reference {b['p99']} us")
PY
fi
echo "results in $OUT"
