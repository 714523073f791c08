#!/usr/bin/env bash
# Figures of tiered storage (scripts/tier-bench.py): upload throughput, the
# latency of a 64 KiB read from a cold (remote) segment against a hot one,
# and the local disk usage over the run, against a real SeaweedFS 4.48
# (scripts/lib/seaweedfs.sh) and a release build with --tier s3,
# --segment-bytes 4 MiB, --hot-bytes 24 MiB, 2 shards. Prints markdown
# tables (docs/benchmarks.md keeps them). A benchmark, not a test: run it on
# a quiet machine.
# Usage: scripts/tier-bench.sh   Environment: RINGSTREAM_BIN, PYTHON.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/seaweedfs.sh
. scripts/lib/server.sh
case "${1:-}" in -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
seaweedfs_install
server_binary
work_dir tier-bench
work=$WORK
at_exit seaweedfs_stop
seaweedfs_start "$work/s3"
start() {
  server_start "$work" 0 --shards 2 --segment-bytes $((4 << 20)) \
    --tier s3 --tier-endpoint "$S3_ENDPOINT" --tier-bucket "$S3_BUCKET" --hot-bytes $((24 << 20))
  pid=$SERVER_PID url=$SERVER_URL
}
start
"${PYTHON:-python3}" scripts/tier-bench.py run "$url" "$work/data" > "$work/state.json"
server_stop "$pid"
[ "$SERVER_EXIT" = 0 ] || { echo "tier-bench: the server exited $SERVER_EXIT" >&2; exit 1; }
start
"${PYTHON:-python3}" scripts/tier-bench.py cold "$url" "$work/state.json"
echo
seaweedfs_stop
"${PYTHON:-python3}" scripts/tier-bench.py backlog-write "$url" $((96 << 20))
seaweedfs_restart
"${PYTHON:-python3}" scripts/tier-bench.py backlog-drain "$url"
echo
echo "Machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), SeaweedFS on the same host over loopback."
