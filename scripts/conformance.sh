#!/usr/bin/env bash
# Runs the official Durable Streams conformance suite
# (@durable-streams/server-conformance-tests, pinned with the TypeScript
# client it drives in scripts/node/package-lock.json) against a release build
# of ringstream started on a free loopback port with a fresh data directory.
#
# Usage: scripts/conformance.sh [--restart] [--keep-data]
#   --restart    run the suite, restart the server on the same data directory,
#                and run it again (both runs must pass)
#   --keep-data  do not delete the temporary data directory afterwards
#
# Environment:
#   RINGSTREAM_NODE_CACHE  where `npm ci` installs scripts/node (default ~/.cache/ringstream-node)
#   RINGSTREAM_BIN         use this server binary instead of building one
#
# Prints "N passed, M failed" per run; exits non-zero on any failure.
set -euo pipefail

RESTART=0
KEEP=0
for a in "$@"; do
  case "$a" in
    --restart) RESTART=1 ;;
    --keep-data) KEEP=1 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $a" >&2; exit 2 ;;
  esac
done

root="$(cd "$(dirname "$0")/.." && pwd)"

# --- Node and the pinned suite -------------------------------------------------
. "$root/scripts/lib/node-deps.sh"
node_deps
CACHE="$NODE_CACHE"
# The package's own CLI finds no test files when installed from npm, so we
# point vitest at a one-line test file of ours.
cat > "$CACHE/ringstream.conformance.test.mjs" <<'JS'
import { runConformanceTests } from "@durable-streams/server-conformance-tests"
runConformanceTests({ baseUrl: process.env.CONFORMANCE_TEST_URL })
JS

# --- the server ------------------------------------------------------------------
bin="${RINGSTREAM_BIN:-}"
if [ -z "$bin" ]; then
  (cd "$root" && cargo build --release --quiet --bin ringstream)
  bin="$root/target/release/ringstream"
fi
data="$(mktemp -d "${TMPDIR:-/tmp}/ringstream-conformance.XXXXXX")"
log="$data.log"
pid=""
stop() { if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi; pid=""; }
cleanup() { stop; [ "$KEEP" = 1 ] || rm -rf "$data" "$log" "$data.out"; }
trap cleanup EXIT

port=""
start() {
  # A short long-poll timeout: several tests wait for a 204 inside vitest's 5 s.
  "$bin" --listen 127.0.0.1:"${port:-0}" --data-dir "$data/db" --shards 2 --no-pin \
    --long-poll-timeout-ms 500 >"$data.out" 2>>"$log" &
  pid=$!
  for _ in $(seq 1 300); do
    if grep -q "listening on" "$data.out" 2>/dev/null; then break; fi
    if ! kill -0 "$pid" 2>/dev/null; then echo "conformance: server failed to start:" >&2; cat "$log" >&2; exit 3; fi
    sleep 0.1
  done
  port="$(grep -o '127.0.0.1:[0-9]*' "$data.out" | head -1 | cut -d: -f2)"
  [ -n "$port" ] || { echo "conformance: no listening line" >&2; cat "$log" >&2; exit 3; }
}

run_suite() {
  local report="$data/report-$1.json"
  local t0=$(date +%s.%N)
  (cd "$CACHE" && CONFORMANCE_TEST_URL="http://127.0.0.1:$port" \
     ./node_modules/.bin/vitest run ringstream.conformance.test.mjs --no-coverage \
     --reporter=json --outputFile.json="$report" >"$data/vitest-$1.txt" 2>&1) || true
  local t1=$(date +%s.%N)
  if [ ! -s "$report" ]; then
    echo "conformance: vitest produced no report:" >&2; tail -30 "$data/vitest-$1.txt" >&2; return 1
  fi
  node - "$report" "$t0" "$t1" "$1" <<'JS'
const fs = require("fs")
const [file, t0, t1, label] = process.argv.slice(2)
const r = JSON.parse(fs.readFileSync(file, "utf8"))
for (const f of r.testResults) for (const t of f.assertionResults)
  if (t.status === "failed")
    console.log(`  FAIL ${t.ancestorTitles.join(" > ")} :: ${t.title}\n       ${(t.failureMessages[0] || "").split("\n")[0].slice(0, 240)}`)
console.log(`conformance (${label}): ${(t1 - t0).toFixed(1)}s, ${r.numPendingTests} skipped`)
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
