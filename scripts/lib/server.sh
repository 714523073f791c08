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
