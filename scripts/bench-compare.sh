#!/usr/bin/env bash
# Side-by-side benchmark, one machine, one run:
#   1. the floors: 4 KiB O_DIRECT write + fdatasync (QD1) and a loopback TCP
#      round trip, each a small probe;
#   2. ringstream, Electric's Rust Durable Streams server (crates.io
#      durable-streams, `wal` mode: group-commit fdatasync before every ack)
#      and the Node reference server (npm @durable-streams/server,
#      file-backed), alternating: for each of --pairs pairs every server in
#      turn (the order rotates) runs every workload on a fresh process and
#      data directory: 1 KiB durable appends over 100 streams, closed loop at
#      32, 128 and 256 connections, open loop at 5,000 and 20,000/s over 128
#      connections (scripts/lib/compare.py), each connection writing every
#      stream in turn (loadgen --spread rotate); and
#      pinned-c32 and pinned-c128: closed loop, one writer per stream
#      (connection k writes stream k mod 100, --spread pinned);
#      and `floor` (loadgen/src/bin/http-floor.rs: an epoll server that
#      stores nothing and answers every request at once, so what it costs
#      per request is what HTTP over loopback TCP costs on this machine; no
#      server answering the same requests can go below it);
#   3. medians, and the median per-pair ratios of ringstream to each peer
#      (throughput, p99, server CPU per append);
#   4. one chart per workload (`loadgen plot`: latency percentile curve,
#      rate and p50/p99 per second, the servers overlaid), chart-W.svg.
# The peers are installed into a cache by this script, pinned.
# Results (every run and the summary as JSON, every loadgen report in
# runs/, the charts, and the text) go to $OUT (default
# ./bench-results/<timestamp>); --charts DIR also copies the charts there as
# bench-compare-W.svg (docs/img for docs/benchmarks.md).
#
# Usage: scripts/bench-compare.sh [--duration SECS] [--pairs N] [--shards N]
#                                 [--servers a,b,c] [--workloads w1,w2] [--charts DIR]
# Servers: ringstream, electric, reference, floor, and ringstream-cell (a
# replicated cell of three ringstream nodes, one shard each, on this
# machine: the load goes to the leader, an append is acknowledged once
# durable on two nodes, the CPU counted is the three processes'; its
# nodes run --no-pin, as three pinned servers would share the first CPU).
# Environment: ELECTRIC_VERSION (0.1.5), REF_VERSION (0.3.7), PEER_CACHE
# (~/.cache/ringstream-peers), RINGSTREAM (the server binary to measure;
# default target/release/ringstream).
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=10
PAIRS=3
SHARDS=0
SERVERS=ringstream,electric,reference,floor
WORKLOADS=closed-c32,closed-c128,closed-c256,open-5k,open-20k,pinned-c32,pinned-c128
CHARTS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) DURATION="$2"; shift 2 ;;
    --pairs) PAIRS="$2"; shift 2 ;;
    --shards) SHARDS="$2"; shift 2 ;;
    --servers) SERVERS="$2"; shift 2 ;;
    --workloads) WORKLOADS="$2"; shift 2 ;;
    --skip-ref) SERVERS="${SERVERS//,reference/}"; shift ;;
    --charts) CHARTS="$2"; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
OUT="${OUT:-bench-results/$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$OUT"
REF_VERSION="${REF_VERSION:-0.3.7}"
ELECTRIC_VERSION="${ELECTRIC_VERSION:-0.1.5}"
PEER_CACHE="${PEER_CACHE:-$HOME/.cache/ringstream-peers}"
REF_CACHE="${REF_CACHE:-$PEER_CACHE/node-reference-$REF_VERSION}"
ELECTRIC="$PEER_CACHE/durable-streams-$ELECTRIC_VERSION/bin/durable-streams-server"

. scripts/lib/build.sh
build_release loadgen
server_binary
RS="$SERVER_BIN"
LG=target/release/loadgen
WORK="$(mktemp -d "${TMPDIR:-/tmp}/ringstream-bench.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

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

# --- 2. the peers, pinned, in a cache ------------------------------------------------
if [[ ",$SERVERS," == *,electric,* ]] && [ ! -x "$ELECTRIC" ]; then
  echo "installing durable-streams $ELECTRIC_VERSION (Electric's Rust server) into $PEER_CACHE" >&2
  cargo install --quiet durable-streams --locked --version "$ELECTRIC_VERSION" \
    --root "$PEER_CACHE/durable-streams-$ELECTRIC_VERSION"
fi
if [[ ",$SERVERS," == *,reference,* ]]; then
  pkg="$REF_CACHE/node_modules/@durable-streams/server/package.json"
  have=""
  if [ -f "$pkg" ]; then have="$(node -p "require('$pkg').version" 2>/dev/null || true)"; fi
  if [ "$have" != "$REF_VERSION" ]; then
    mkdir -p "$REF_CACHE"
    [ -f "$REF_CACHE/package.json" ] || echo '{"name":"ringstream-refserver","private":true,"type":"module"}' > "$REF_CACHE/package.json"
    (cd "$REF_CACHE" && npm install --no-audit --no-fund --loglevel=error "@durable-streams/server@$REF_VERSION" >&2)
  fi
  cat > "$REF_CACHE/bench-server.mjs" <<'JS'
import { DurableStreamTestServer } from "@durable-streams/server"
const s = new DurableStreamTestServer({ port: Number(process.env.PORT), host: "127.0.0.1", dataDir: process.env.DATA_DIR, compression: false })
await s.start()
console.log(`listening ${s.url}`)
process.on("SIGTERM", () => process.exit(0))
JS
fi

# --- 3. side by side, alternating ---------------------------------------------------
echo "servers: $SERVERS; workloads: $WORKLOADS; $PAIRS pairs of ${DURATION} s windows" | tee -a "$OUT/summary.txt"
python3 scripts/lib/compare.py --servers "$SERVERS" --workloads "$WORKLOADS" --pairs "$PAIRS" \
  --duration "$DURATION" --shards "$SHARDS" --ringstream "$RS" --electric "$ELECTRIC" \
  --reference "$REF_CACHE/bench-server.mjs" --loadgen "$LG" --floor target/release/http-floor --out "$OUT/compare.json" | tee -a "$OUT/summary.txt"
if [ -n "$CHARTS" ]; then
  mkdir -p "$CHARTS"
  for c in "$OUT"/chart-*.svg; do cp "$c" "$CHARTS/bench-compare-$(basename "$c" .svg | sed 's/^chart-//').svg"; done
  echo "charts copied to $CHARTS" | tee -a "$OUT/summary.txt"
fi
echo "results in $OUT"
