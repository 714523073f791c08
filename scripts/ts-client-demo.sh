#!/usr/bin/env bash
# Runs scripts/ts-client-demo.mjs (the official TypeScript client under
# /ds/{bucket}) against a release build on a free port. The client comes with
# the conformance suite's npm install (scripts/conformance.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${RINGSTREAM_CONFORMANCE_CACHE:-$HOME/.cache/ringstream-conformance}"
[ -d "$CACHE/node_modules/@durable-streams/client" ] || {
  mkdir -p "$CACHE"; [ -f "$CACHE/package.json" ] || echo '{"name":"ringstream-conformance","private":true}' > "$CACHE/package.json"
  (cd "$CACHE" && npm install --no-audit --no-fund --loglevel=error @durable-streams/client >&2); }
cargo build --release --quiet --bin ringstream
work="$(mktemp -d "${TMPDIR:-/tmp}/ringstream-tsdemo.XXXXXX")"
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT
target/release/ringstream --listen 127.0.0.1:0 --data-dir "$work/data" --shards 2 --no-pin \
  --long-poll-timeout-ms 1000 >"$work/out" 2>"$work/err" &
pid=$!
for _ in $(seq 1 300); do grep -q "listening on" "$work/out" 2>/dev/null && break; sleep 0.1; done
url="http://$(grep -o '127.0.0.1:[0-9]*' "$work/out" | head -1)"
cp scripts/ts-client-demo.mjs "$CACHE/ringstream-ts-client-demo.mjs"
(cd "$CACHE" && node ringstream-ts-client-demo.mjs "$url")
