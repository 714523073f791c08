#!/usr/bin/env bash
# Tiered storage in a cell against a real S3-compatible store: SeaweedFS
# 4.48 (scripts/lib/seaweedfs.sh installs it into a cache) and three
# release-build processes with --tier s3, --shards 2, 1 MiB segments and
# --hot-bytes 8 MiB each. The steps are in scripts/cell-tiering-test.py: a
# burst of appends, the leader killed with -9 while its uploads run, appends
# under the new leader, the old one back; then one object per remote segment
# per group (no orphan, not one per node), the same skeletons on every node,
# every byte read back through every node; a node replaced the runbook's
# way copies the skeletons and serves; deleting every stream empties the
# store.
#
# Usage: scripts/cell-tiering.sh [--keep]   (--keep: leave the work dir for a look)
# Environment: RINGSTREAM_BIN (a server binary instead of building one),
# RINGSTREAM_SEAWEEDFS_CACHE, PYTHON.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/seaweedfs.sh
. scripts/lib/server.sh
KEEP=0
for a in "$@"; do
  case "$a" in
    --keep) KEEP=1 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $a" >&2; exit 2 ;;
  esac
done
seaweedfs_install
server_binary
work_dir cell-tiering
work=$WORK
KEEP_WORK=$KEEP
last_words() {
  [ "$EXIT_STATUS" != 0 ] || return 0
  echo "cell-tiering: failed (status $EXIT_STATUS); the last lines of weed's log and each node's stderr:" >&2
  tail -15 "$work/s3.log" >&2 2>/dev/null || true
  for n in 1 2 3; do echo "--- node $n" >&2; tail -15 "$work/n$n/err" >&2 2>/dev/null || true; done
}
at_exit seaweedfs_stop
at_exit last_words
seaweedfs_start "$work/s3"
echo "cell-tiering: SeaweedFS answers at $S3_ENDPOINT (${SECONDS} s)" >&2
export S3_ENDPOINT S3_BUCKET
"${PYTHON:-python3}" scripts/cell-tiering-test.py "$SERVER_BIN" "$work"
echo "cell-tiering: all checks passed (${SECONDS} s)" >&2
