#!/usr/bin/env bash
# CI smoke run of the load generator against a release build: a few seconds
# of the canonical workload (closed loop) and a short open-loop run with live
# readers, checking the JSON report's shape, non-zero throughput and zero
# errors. No latency thresholds here: figures belong in docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/server.sh
cargo build --release --quiet -p ringstream -p loadgen
work="$(mktemp -d "${TMPDIR:-/tmp}/ringstream-smoke.XXXXXX")"
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT
start_server "$work"

target/release/loadgen --target "$url" --duration 3 --warmup 0.5 --quiet --out "$work/closed.json" >/dev/null
target/release/loadgen --target "$url" --surface ds --rate 500 --streams 8 --connections 4 --readers 2 \
  --duration 3 --warmup 0.5 --quiet --producer --out "$work/open.json" >/dev/null

python3 - "$work/closed.json" "$work/open.json" <<'PY'
import json, sys
def check(path, readers=False):
    r = json.load(open(path))
    for k in ("achieved_rate", "target_rate", "errors", "bytes_per_sec", "latency_us"):
        assert k in r, f"{path}: missing {k}"
    for k in ("p50", "p90", "p99", "p999", "p9999", "max"):
        assert k in r["latency_us"], f"{path}: missing latency_us.{k}"
    assert r["achieved_rate"] > 0, f"{path}: zero throughput"
    assert r["errors"] == 0, f"{path}: {r['errors']} errors: {r.get('errors_by_status')}"
    if readers:
        assert r["deliveries"] > 0, f"{path}: readers saw no deliveries"
        assert "p99" in r["delivery_latency_us"]
    return r
a = check(sys.argv[1]); b = check(sys.argv[2], readers=True)
print(f"loadgen smoke: closed loop {a['achieved_rate']:.0f}/s, open loop {b['achieved_rate']:.0f}/s "
      f"with {b['deliveries']} live deliveries: 2 passed, 0 failed")
PY
