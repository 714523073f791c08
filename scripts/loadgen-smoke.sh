#!/usr/bin/env bash
# CI smoke run of the load generator against a release build: a few seconds
# of the canonical workload (closed loop) and a short open-loop run with live
# readers, checking the JSON report's shape (schema version 2: host facts,
# the per-second time series), non-zero throughput and zero errors; then
# `loadgen plot` of both reports into an SVG, and the exit statuses of a
# usage error (2) and of a run that cannot connect (1). No latency
# thresholds here: figures belong in docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/server.sh
build_release ringstream loadgen
work_dir smoke
work=$WORK
server_start "$work" 0 "${SERVER_TEST_FLAGS[@]}" --long-poll-timeout-ms 1000
url=$SERVER_URL

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
    assert r["schema_version"] == 2, f"{path}: schema_version {r.get('schema_version')}"
    h = r["host"]
    assert h["cpus"] > 0 and h["kernel"] and "commit" in h["loadgen_build"], h
    ts = r["time_series"]
    assert [s["t_s"] for s in ts] == [0, 1, 2], f"{path}: time_series {ts}"
    assert sum(s["requests"] for s in ts) == r["requests"], f"{path}: the seconds do not add up to requests"
    assert all(s["requests"] > 0 and 0 < s["p50_us"] <= s["p99_us"] <= s["max_us"] for s in ts), ts
    assert r["achieved_rate"] > 0, f"{path}: zero throughput"
    assert r["errors"] == 0, f"{path}: {r['errors']} errors: {r.get('errors_by_status')}"
    if readers:
        assert r["deliveries"] > 0, f"{path}: readers saw no deliveries"
        assert "p99" in r["delivery_latency_us"]
    return r
a = check(sys.argv[1]); b = check(sys.argv[2], readers=True)
print(f"loadgen smoke: closed loop {a['achieved_rate']:.0f}/s, open loop {b['achieved_rate']:.0f}/s "
      f"with {b['deliveries']} live deliveries")
PY

target/release/loadgen plot "$work/closed.json" "$work/open.json" --label closed --label open --out "$work/chart.svg"
python3 - "$work/chart.svg" <<'PY'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
ns = "{http://www.w3.org/2000/svg}"
text = " ".join(t.text or "" for t in root.iter(ns + "text"))
for want in ("percentile", "99.9%", "Achieved rate per second", "closed", "open"):
    assert want in text, f"chart lacks {want!r}"
lines = list(root.iter(ns + "polyline"))
assert len(lines) >= 6, f"{len(lines)} lines drawn"
print(f"loadgen plot: {len(lines)} lines, legend and axes present")
PY
set +e
target/release/loadgen --streams 0 2>/dev/null; usage=$?
target/release/loadgen plot "$work/closed.json" --out "$work/chart.png" 2>/dev/null; png=$?
target/release/loadgen --target http://127.0.0.1:1 --duration 1 --warmup 0 --quiet >/dev/null 2>&1; failed=$?
set -e
if [ "$usage" != 2 ] || [ "$png" != 2 ] || [ "$failed" != 1 ]; then
  echo "loadgen exit statuses: usage $usage (want 2), png $png (want 2), no server $failed (want 1)" >&2; exit 1
fi
echo "loadgen smoke: reports, plot, exit statuses: 3 passed, 0 failed"
