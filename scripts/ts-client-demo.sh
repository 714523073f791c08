#!/usr/bin/env bash
# Runs scripts/ts-client-demo.mjs (the official TypeScript client, on both
# surfaces: /v1/stream and /ds/{bucket}) against a release build on a free
# port. The client is the exact version pinned in scripts/node/ (the one the
# conformance suite runs with too).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/server.sh
. scripts/lib/node-deps.sh
node_deps
CACHE="$NODE_CACHE"
cargo build --release --quiet --bin ringstream
work="$(mktemp -d "${TMPDIR:-/tmp}/ringstream-tsdemo.XXXXXX")"
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT
start_server "$work"
cp scripts/ts-client-demo.mjs "$CACHE/ringstream-ts-client-demo.mjs"
(cd "$CACHE" && node ringstream-ts-client-demo.mjs "$url")
