#!/usr/bin/env bash
# Runs scripts/ts-client-demo.mjs (the official TypeScript client, on both
# surfaces: /v1/stream and /ds/{bucket}) against a release build on a free
# port, twice: on a server without access control, then on one started with
# an auth file, the client passing its bearer token in `headers` (and a
# request without it must get 401). The client is the exact version pinned
# in scripts/node/ (the one the conformance suite runs with too).
#
# Usage: scripts/ts-client-demo.sh [--url URL]
#   --url URL  start no server: run the demo once, without a token, against
#              URL (e.g. the proxy of scripts/multinode.sh)
# Environment: TS_DEMO_URL (the same as --url), RINGSTREAM_NODE_CACHE (see
# scripts/lib/node-deps.sh).
set -euo pipefail
URL="${TS_DEMO_URL:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --url) [ $# -ge 2 ] || { echo "--url needs a URL" >&2; exit 2; }; URL="$2"; shift ;;
    --url=*) URL="${1#--url=}" ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
cd "$(dirname "$0")/.."
. scripts/lib/server.sh
. scripts/lib/node-deps.sh
node_deps
CACHE="$NODE_CACHE"
if [ -n "$URL" ]; then
  cp scripts/ts-client-demo.mjs "$CACHE/ringstream-ts-client-demo.mjs"
  (cd "$CACHE" && node ringstream-ts-client-demo.mjs "${URL%/}")
  exit 0
fi
work_dir tsdemo
work=$WORK
cp scripts/ts-client-demo.mjs "$CACHE/ringstream-ts-client-demo.mjs"
start() { server_start "$1" 0 "${SERVER_TEST_FLAGS[@]}" --long-poll-timeout-ms 1000 "${@:2}"; }

# 1. No access control (loopback).
start "$work/open"
(cd "$CACHE" && node ringstream-ts-client-demo.mjs "$SERVER_URL")
server_stop "$SERVER_PID"

# 2. An auth file with one random token, admin over the demo's buckets.
token="$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')"
mkdir "$work/auth"
cat > "$work/auth/auth.toml" <<TOML
[[token]]
name    = "tsdemo"
sha256  = "$(printf '%s' "$token" | sha256sum | cut -d' ' -f1)"
buckets = ["tsdemo*"]
rights  = ["admin"]
TOML
start "$work/auth" --auth-file "$work/auth/auth.toml"
(cd "$CACHE" && node ringstream-ts-client-demo.mjs "$SERVER_URL" "$token")
