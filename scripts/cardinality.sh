#!/usr/bin/env bash
# Many streams on one server: for each stream count N (default 10000 100000
# 1000000), on a fresh data directory:
#   - creates per second: loadgen --setup-only over 1 connection (10,000
#     streams at most: each create waits for its own group commit) and over
#     64 connections (all N);
#   - resident memory per stream: the server's RSS after the creates minus
#     its RSS before, over N;
#   - restart time: SIGTERM, then a new server on the same data directory,
#     from exec to "listening" in its log; and its RSS after recovery;
#   - appends spread over the N streams (for N <= 100,000): loadgen closed
#     loop, 128 connections, 1 KiB, request n of connection k to stream
#     (n*128 + k) mod N, 8 s.
# Usage: scripts/cardinality.sh [N ...]   (SHARDS=2, DURATION=8)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/server.sh
build_release loadgen
server_binary
LG=target/release/loadgen
SHARDS=${SHARDS:-2}
DURATION=${DURATION:-8}
work_dir cardinality
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

# Pinned shards, default settings: the server as it runs in production.
start() { server_start "$WORK" 0 --shards "$SHARDS"; PID=$SERVER_PID URL=$SERVER_URL SECS=$SERVER_SECS; }
stop() { server_stop "$PID"; }

for N in "${@:-10000 100000 1000000}"; do
  for n in $N; do
    rm -rf "$WORK/data"
    start
    sleep 0.5
    r0=$(rss_kib "$PID")
    if [ "$n" -le 10000 ]; then
      one=$("$LG" --target "$URL" --surface v1 --prefix one --streams "$n" --connections 1 --setup-only)
      stop; rm -rf "$WORK/data"; start; sleep 0.5; r0=$(rss_kib "$PID")
    else
      one="(not run)"
    fi
    many=$("$LG" --target "$URL" --surface v1 --streams "$n" --connections 64 --setup-only)
    sleep 1
    r1=$(rss_kib "$PID")
    echo "N=$n  1 connection: $one"
    echo "N=$n  64 connections: $many"
    echo "N=$n  RSS $((r0 / 1024)) MiB -> $((r1 / 1024)) MiB: $(( (r1 - r0) * 1024 / n )) bytes per stream"
    stop
    start
    sleep 0.5
    echo "N=$n  restart: listening after ${SECS} s; RSS $(( $(rss_kib "$PID") / 1024 )) MiB; $(du -sh "$WORK/data" | cut -f1) on disk"
    if [ "$n" -le 100000 ]; then
      "$LG" --target "$URL" --surface v1 --streams "$n" --no-setup --connections 128 --payload 1024 \
        --duration "$DURATION" --warmup 1 --quiet --out "$WORK/r.json" >/dev/null
      python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(f\"N=$n  appends over {r['streams']} streams, 128 connections: {r['achieved_rate']:.0f}/s, p50 {r['latency_us']['p50']} us, p99 {r['latency_us']['p99']} us, errors {r['errors']}\")" "$WORK/r.json"
    fi
    stop
  done
done
