# Sourced by scripts that need a throwaway release server.
# start_server WORKDIR [extra flags...]: starts target/release/ringstream on a
# free loopback port with data in WORKDIR/data (2 shards, unpinned, 1 s
# long-poll), waits for its "listening" line, and sets $pid and $url.
# The caller builds the binary first and kills $pid on exit.
start_server() {
  local work="$1"; shift
  target/release/ringstream --listen 127.0.0.1:0 --data-dir "$work/data" --shards 2 --no-pin \
    --long-poll-timeout-ms 1000 "$@" >"$work/out" 2>"$work/err" &
  pid=$!
  for _ in $(seq 1 300); do grep -q "listening on" "$work/out" 2>/dev/null && break; sleep 0.1; done
  url="http://$(grep -o '127.0.0.1:[0-9]*' "$work/out" | head -1)"
  if [ "$url" = "http://" ]; then
    echo "$(basename "$0"): server did not start:" >&2; cat "$work/err" >&2; exit 3
  fi
}

# bench_server BINARY DATA_DIR SHARDS LOG: starts BINARY as benchmarks run it
# (pinned shards, default settings) on a free loopback port, waits for its
# "listening" line, and sets $PID, $URL and $SECS (exec to listening). Exits
# with the log when the server ends first. bench_stop: SIGTERM, then waits.
bench_server() {
  local bin=$1 data=$2 shards=$3 log=$4 t0
  t0=$(date +%s.%N)
  "$bin" --listen 127.0.0.1:0 --data-dir "$data" --shards "$shards" >"$log" 2>&1 &
  PID=$!
  until grep -q "listening on" "$log"; do
    kill -0 "$PID" 2>/dev/null || { cat "$log" >&2; exit 1; }
    sleep 0.01
  done
  URL="http://$(grep "listening on" "$log" | grep -o '127.0.0.1:[0-9]*' | head -1)"
  SECS=$(echo "$(date +%s.%N) - $t0" | bc)
}
bench_stop() { kill -TERM "$PID"; wait "$PID" || true; PID=""; }
