#!/usr/bin/env bash
# Tiered storage against a real S3-compatible store: SeaweedFS 4.48
# (scripts/lib/seaweedfs.sh installs it into a cache) and a release build of
# ringstream with --tier s3, small segments (1 MiB) and --hot-bytes 8 MiB on
# 2 shards. The steps are in scripts/tiering-test.py; this script starts,
# kills and restarts the processes between them:
#
#  1. write 6 × --hot-bytes into 40 streams (/v1 and /ds) from 4 connections
#     at 16 MiB/s;
#     the data dir never exceeds the budget + one segment per shard; the
#     shards settle within budget; the store holds exactly one object per
#     remote segment (and a skeleton each); everything reads back byte-exact
#     from -1 and from random acknowledged offsets;
#  2. write more and kill -9 the server while its uploads run; restart on the
#     same data; everything reads back; after settling no orphan object;
#  3. stop the store, restart the server (empty block cache): /readyz says
#     degraded, cold reads answer 503 + Retry-After, appends and hot reads
#     go on, the disk grows past the budget; start the store: uploads catch
#     up, everything (the appends made meanwhile too) reads back byte-exact;
#  4. 80 streams appended round-robin with small bodies (1 MiB of one spans
#     more segments than the block cache holds) read back cold, byte-exact;
#  5. 8 /ds streams of their own written until their first segments are
#     remote, then each one's retained start moved to two thirds of it
#     (PUT .../retention/{offset}): 410 below, byte-exact from -1, objects
#     deleted from the store and none orphaned; the same after a restart;
#  6. delete every stream: the remote objects are deleted.
#
# Usage: scripts/tiering.sh [--keep]   (--keep: leave the work dir for a look)
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
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $a" >&2; exit 2 ;;
  esac
done
SHARDS=2
SEGMENT=$((1024 * 1024))
HOT=$((8 * 1024 * 1024))
SLACK=$((SHARDS * SEGMENT + 65536))
seaweedfs_install
server_binary
work_dir tiering
work=$WORK
KEEP_WORK=$KEEP
pid=""
stop_all() { [ -z "$pid" ] || server_stop "$pid" KILL; seaweedfs_stop; }
# On a failure (or the test.sh limit's SIGTERM): what the store and the server last said.
last_words() {
  [ "$EXIT_STATUS" != 0 ] || return 0
  echo "tiering: failed (status $EXIT_STATUS); the last lines of weed's log and the server's stderr:" >&2
  tail -15 "$work/s3.log" >&2 2>/dev/null || true
  tail -15 "$work/err" >&2 2>/dev/null || true
}
at_exit stop_all
at_exit last_words
py() { "${PYTHON:-python3}" scripts/tiering-test.py "$@"; }

port=0
start_ringstream() {
  server_start "$work" "$port" --shards "$SHARDS" --no-pin --segment-bytes "$SEGMENT" \
    --tier s3 --tier-endpoint "$S3_ENDPOINT" --tier-bucket "$S3_BUCKET" --hot-bytes "$HOT"
  pid=$SERVER_PID url=$SERVER_URL port=$SERVER_PORT
}

echo "== 1. write 6 x --hot-bytes, check the budget, the store, every byte" >&2
seaweedfs_start "$work/s3"
echo "tiering: SeaweedFS answers at $S3_ENDPOINT (${SECONDS} s)" >&2
start_ringstream
echo "tiering: ringstream ready at $url (${SECONDS} s)" >&2
# Paced below what the uploads sustain here (2 vCPUs shared with weed and
# the writer): the budget holds while writes do not outrun the uploads.
py write "$work/state" "$url" $((6 * HOT)) "$work/data" "$HOT" "$SLACK" $((16 * 1024 * 1024))
py settle "$url" 60
py store "$work/state" "$url" "$work/data" "$S3_ENDPOINT" "$S3_BUCKET"
py verify "$work/state" "$url"

echo "== 2. kill -9 while uploads run, restart, read everything" >&2
uploads() { curl -s -m 10 "$url/metrics" | awk '/^ringstream_tier_uploads_total.*ok/ {n += $2} END {print n + 0}'; }
over() { curl -s -m 10 "$url/metrics" | awk '/^ringstream_tier_local_bytes/ {l += $2} /^ringstream_tier_hot_budget_bytes/ {b += $2} END {print (l > b)}'; }
before="$(uploads)"
# An unpaced burst outruns the uploads; kill once some went through and more wait.
py write "$work/state" "$url" $((12 * HOT)) "$work/data" "$HOT" &
writer=$!
# Uploads run while the burst does (a backlog or not, depending on the machine).
for _ in $(seq 1 800); do
  [ "$(uploads)" -ge $((before + 4)) ] && break
  sleep 0.025
done
[ "$(uploads)" -ge $((before + 4)) ] || { echo "tiering: no uploads during the burst" >&2; exit 1; }
backlog="$(over)"
server_stop "$pid" KILL; pid=""
echo "killed with -9 during the burst after $(find "$work"/data/shard-* -name '*.skel' | wc -l) moves (over budget: $backlog)" >&2
wait "$writer"
start_ringstream
py reconcile "$work/state" "$url"
py verify "$work/state" "$url"
py settle "$url" 60
py store "$work/state" "$url" "$work/data" "$S3_ENDPOINT" "$S3_BUCKET"

echo "== 3. the object store stops for a while" >&2
seaweedfs_stop
server_stop "$pid"; pid=""
start_ringstream
py down "$work/state" "$url"
seaweedfs_restart
py settle "$url" 120
py verify "$work/state" "$url"
py store "$work/state" "$url" "$work/data" "$S3_ENDPOINT" "$S3_BUCKET"

echo "== 4. streams interleaved over many segments read back cold" >&2
py interleave "$work/il" "$url" $((88 * 1024 * 1024))
py settle "$url" 60
server_stop "$pid"; pid=""
start_ringstream
py interleave-verify "$work/il" "$url"

echo "== 5. retention reaches the object store, and holds across a restart" >&2
py retention "$work/rt" "$url" "$S3_ENDPOINT" "$S3_BUCKET" "$work/data" $((24 * 1024 * 1024))
server_stop "$pid"; pid=""
start_ringstream
py retention-verify "$work/rt" "$url"

echo "== 6. deletes reach the object store" >&2
py delete "$work/state" "$url" "$S3_ENDPOINT" "$S3_BUCKET" "$work/data"
server_stop "$pid"; pid=""
[ "$SERVER_EXIT" = 0 ] || { echo "tiering: the server did not exit 0 (status $SERVER_EXIT)" >&2; exit 1; }
echo "tiering: all checks passed" >&2
