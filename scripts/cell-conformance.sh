#!/usr/bin/env bash
# A replicated cell of three release servers on loopback (`--shards 1`, a
# secret file of mode 600), then the official conformance suite, its
# subscription tests included (338), against a follower's address (its
# writes, HEADs, reads at the tail and the subscription API are forwarded to
# the leader over the peer link; the leader delivers the webhooks, signed
# with the key every node derives from the cell secret) and against the
# leader's, and the TypeScript and Python clients through the follower.
# Every run must pass.
#
# `--shards N`: N shards a node (N groups, led by one node; requests that
# span groups run there).
#
# Usage: scripts/cell-conformance.sh [--keep-data] [--shards N]
# Environment: RINGSTREAM_BIN (a server binary instead of building one).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/server.sh
while [ $# -gt 0 ]; do
  case "$1" in
    --keep-data) KEEP_WORK=1; shift ;;
    --shards) export CELL_SHARDS="${2:?--shards needs a number}"; shift 2 ;;
    *) echo "cell-conformance: unknown argument '$1' (--keep-data, --shards N)" >&2; exit 2 ;;
  esac
done
work_dir cell-conformance

# A short long-poll timeout: several tests wait for a 204 inside vitest's limit.
cell_start "$WORK" --long-poll-timeout-ms 500
leader=${CELL_URL[1]} follower=${CELL_URL[2]}
echo "cell-conformance: leader $leader, follower $follower"

status=0
echo "cell-conformance: the suite through the follower"
scripts/conformance.sh --subscriptions --url "$follower" || status=1
echo "cell-conformance: the suite on the leader"
scripts/conformance.sh --subscriptions --url "$leader" || status=1
echo "cell-conformance: the TypeScript client through the follower"
scripts/ts-client-demo.sh --url "$follower" || status=1
echo "cell-conformance: the Python client through the follower"
scripts/python-client.sh --url "$follower" || status=1
forwarded=$(curl -s "$follower/metrics" | awk '/^ringstream_cell_forwarded_requests_total.*to_leader/ {n += $2} END {print n + 0}')
echo "cell-conformance: the follower forwarded ${forwarded:-0} requests to the leader"
[ "${forwarded:-0}" -gt 0 ] || { echo "cell-conformance: the follower forwarded nothing" >&2; status=1; }
exit $status
