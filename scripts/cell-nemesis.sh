#!/usr/bin/env bash
# The cell nemesis (tests/cell_nemesis.rs) for as long as asked, outside
# the test run: three real processes (--shards 1) under four concurrent
# writers while the leader is killed and restarted, a follower killed and
# restarted, the leader paused (SIGSTOP) and woken, both followers killed
# and restarted, the leader and a follower killed and restarted, all three
# killed at once and restarted in a changing order, a rolling restart
# (each node stopped with SIGTERM and started again, followers first), one
# fault after another (`--power`: only the two that kill two or three
# nodes; `--rolling`: only rolling restarts); then the checker (every
# acknowledged append once at its offset on every node, the same stream
# everywhere, byte-identical segment files) and a summary line with the
# failover times and the longest time without an acknowledgement.
# `--wipe`: a follower's data directory emptied and the node started again with --cell-join
# (it copies its peers' sealed segments and must catch up within 60 s),
# then the leader killed, in turn.
# `--replace`: a node replaced through the membership API, the runbook's
# way (DELETE /_cell/members/N through another node, killed, emptied,
# started with --cell-join, POST /_cell/members/N until a voter again; the
# leader every other time, which hands its lead over first), then the
# leader killed, in turn.
# `--reclaim`: 1 MiB segments, and a 20 MB stream written first is deleted
# a third of the way through, so its segments go through the log while
# the faults go on; every node must have deleted them after healing.
#
# `--shards N`: N shards a node (N groups, steered to one leader); the
# writers' stream is in one group, the deleted stream of --reclaim may be in
# another (its create and delete span groups).
#
#   scripts/cell-nemesis.sh [SECONDS] [--power|--rolling|--wipe|--replace] [--reclaim] [--shards N]   # default 600 (release build)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=600 FAULTS=processes
while [ $# -gt 0 ]; do
  arg="$1"; shift
  case "$arg" in
    --shards) export NEMESIS_SHARDS="${1:?--shards needs a number}"; shift ;;
    --power) FAULTS=power ;;
    --rolling) FAULTS=rolling ;;
    --wipe) FAULTS=wipe ;;
    --replace) FAULTS=replace ;;
    --reclaim) export NEMESIS_RECLAIM=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    [0-9]*) SECS="$arg" ;;
    *) echo "cell-nemesis: unknown argument '$arg' (SECONDS, --power, --rolling, --wipe, --replace, --reclaim, --shards N, --help)" >&2; exit 2 ;;
  esac
done
NEMESIS_SECS="$SECS" NEMESIS_FAULTS="$FAULTS" exec cargo test --release --test cell_nemesis -- --ignored --nocapture
