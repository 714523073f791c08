#!/usr/bin/env bash
# Runs the official Durable Streams conformance suite
# (@durable-streams/server-conformance-tests, pinned with the TypeScript
# client it drives in scripts/node/package-lock.json) against a release build
# of ringstream started on a free loopback port with a fresh data directory,
# or against a server (or proxy) that is already running (--url).
#
# Usage: scripts/conformance.sh [--restart] [--subscriptions] [--keep-data] [--url URL]
#   --restart    run the suite, restart the server on the same data directory,
#                and run it again (both runs must pass)
#   --subscriptions  also run the suite's 6 "Reserved subscription APIs" tests
#                (338 in all; off by default, as in the package's own CLI)
#   --keep-data  do not delete the temporary data directory afterwards
#   --url URL    start no server: run the suite once against URL (e.g. the
#                proxy of scripts/multinode.sh); not with --restart
#
# Environment:
#   RINGSTREAM_NODE_CACHE  where `npm ci` installs scripts/node (default ~/.cache/ringstream-node)
#   RINGSTREAM_BIN         use this server binary instead of building one
#   CONFORMANCE_URL        the same as --url
#
# Prints "N passed, M failed" per run; exits non-zero on any failure.
set -euo pipefail

RESTART=0
SUBSCRIPTIONS=0
KEEP=0
URL="${CONFORMANCE_URL:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --restart) RESTART=1 ;;
    --subscriptions) SUBSCRIPTIONS=1 ;;
    --keep-data) KEEP=1 ;;
    --url) [ $# -ge 2 ] || { echo "--url needs a URL" >&2; exit 2; }; URL="$2"; shift ;;
    --url=*) URL="${1#--url=}" ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
if [ -n "$URL" ] && [ "$RESTART" = 1 ]; then echo "--restart starts its own server: not with --url" >&2; exit 2; fi

root="$(cd "$(dirname "$0")/.." && pwd)"
. "$root/scripts/lib/server.sh"

# --- Node and the pinned suite -------------------------------------------------
. "$root/scripts/lib/node-deps.sh"
node_deps
CACHE="$NODE_CACHE"
# The package's own CLI finds no test files when installed from npm, so we
# point vitest at a one-line test file of ours.
cat > "$CACHE/ringstream.conformance.test.mjs" <<'JS'
import { runConformanceTests } from "@durable-streams/server-conformance-tests"
runConformanceTests({
  baseUrl: process.env.CONFORMANCE_TEST_URL,
  subscriptions: process.env.CONFORMANCE_SUBSCRIPTIONS === "1",
})
JS

# --- the server ------------------------------------------------------------------
work_dir conformance
data=$WORK
KEEP_WORK=$KEEP
pid=""
port=0
base=""
start() {
  if [ -n "$URL" ]; then base="${URL%/}"; return; fi
  # A short long-poll timeout: several tests wait for a 204 inside vitest's 5 s.
  server_start "$data" "$port" "${SERVER_TEST_FLAGS[@]}" --long-poll-timeout-ms 500
  pid=$SERVER_PID port=$SERVER_PORT base=$SERVER_URL
}
stop() { server_stop "$pid"; }

# vitest's default 5 s per test is too short for one test of the suite on a
# 2-core machine: "chunk-size pagination" spends about 4 s (measured here,
# more on CI) in 102,400 expect() calls of its own after two GETs that take
# the server some 20 ms. A 15 s limit keeps a hung request a failure.
run_suite() {
  local report="$data/report-$1.json"
  local t0 t1
  t0=$(date +%s.%N)
  (cd "$CACHE" && CONFORMANCE_TEST_URL="$base" CONFORMANCE_SUBSCRIPTIONS="$SUBSCRIPTIONS" \
     ./node_modules/.bin/vitest run ringstream.conformance.test.mjs --no-coverage --testTimeout=15000 \
     --reporter=json --outputFile.json="$report" >"$data/vitest-$1.txt" 2>&1) || true
  t1=$(date +%s.%N)
  if [ ! -s "$report" ]; then
    echo "conformance: vitest produced no report:" >&2; tail -30 "$data/vitest-$1.txt" >&2; return 1
  fi
  CONFORMANCE_TEST_URL="$base" node - "$report" "$t0" "$t1" "$1" <<'JS'
const fs = require("fs")
const [file, t0, t1, label] = process.argv.slice(2)
const r = JSON.parse(fs.readFileSync(file, "utf8"))
for (const f of r.testResults) for (const t of f.assertionResults)
  if (t.status === "failed")
    console.log(`  FAIL ${t.ancestorTitles.join(" > ")} :: ${t.title}\n       ${(t.failureMessages[0] || "").split("\n")[0].slice(0, 240)}`)
console.log(`conformance (${label}, ${process.env.CONFORMANCE_TEST_URL}): ${(t1 - t0).toFixed(1)}s, ${r.numPendingTests} skipped`)
console.log(`${r.numPassedTests} passed, ${r.numFailedTests} failed`)
process.exit(r.numFailedTests === 0 && r.numPassedTests > 0 && r.success !== false ? 0 : 1)
JS
}

start
status=0
run_suite first || status=1
if [ "$RESTART" = 1 ]; then
  stop
  start
  run_suite after-restart || status=1
fi
exit $status
