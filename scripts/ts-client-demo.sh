#!/usr/bin/env bash
# Runs scripts/ts-client-demo.mjs (the official TypeScript client under
# /ds/{bucket}) against a release build on a free port. The client comes with
# the conformance suite's npm install (scripts/conformance.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/server.sh
CACHE="${RINGSTREAM_CONFORMANCE_CACHE:-$HOME/.cache/ringstream-conformance}"
[ -d "$CACHE/node_modules/@durable-streams/client" ] || {
  mkdir -p "$CACHE"; [ -f "$CACHE/package.json" ] || echo '{"name":"ringstream-conformance","private":true}' > "$CACHE/package.json"
  (cd "$CACHE" && npm install --no-audit --no-fund --loglevel=error @durable-streams/client >&2); }
cargo build --release --quiet --bin ringstream
work="$(mktemp -d "${TMPDIR:-/tmp}/ringstream-tsdemo.XXXXXX")"
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT
start_server "$work"
cp scripts/ts-client-demo.mjs "$CACHE/ringstream-ts-client-demo.mjs"
(cd "$CACHE" && node ringstream-ts-client-demo.mjs "$url")
