#!/usr/bin/env bash
# The cell nemesis (tests/cell_nemesis.rs) with network partitions: inside
# a private user and network namespace (scripts/lib/netns.sh, nftables
# installed into a cache at a pinned version), three real processes whose
# peer links run between 127.0.0.1, 127.0.0.2 and 127.0.0.3, under four
# concurrent writers, while links are cut and healed one fault after
# another: the leader cut off from both followers (it must step down, answer
# an append 503 and acknowledge nothing, while the other two elect a
# leader), a follower cut off, the leader's packets to the followers dropped
# one way (over TCP: both ways stall), the followers cut from each other,
# each fault's effect checked while it lasts; with --all, the process
# faults of scripts/cell-nemesis.sh too. Then the same checker: every
# acknowledged append once at its offset on every node, the same stream
# everywhere, byte-identical segment files.
#
# With --shards N (N > 1), also the groups' leaders split: group 1's links
# cut between the leader and both followers (group 0's kept), so no node
# leads both; a request that spans groups (a bucket's create) must be
# refused (503) through every node while it lasts, and taken within 20 s
# of the heal.
#
#   scripts/cell-partition.sh [SECONDS] [--all] [--release] [--shards N]
#       SECONDS: how long faults come (default 40: each partition twice);
#       --release: a release build (for long runs; CI uses the debug one
#       `cargo test` built); --shards N: N shards a node (NEMESIS_SHARDS).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=40 FAULTS=partitions PROFILE=()
while [ $# -gt 0 ]; do
  arg="$1"; shift
  case "$arg" in
    --shards) export NEMESIS_SHARDS="${1:?--shards needs a number}"; shift ;;
    --all) FAULTS=all ;;
    --release) PROFILE=(--release) ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    [0-9]*) SECS="$arg" ;;
    *) echo "cell-partition: unknown argument '$arg' (SECONDS, --all, --release, --shards N, --help)" >&2; exit 2 ;;
  esac
done
# Built outside: inside the namespace there is no network for cargo.
cargo test "${PROFILE[@]}" --test cell_nemesis --no-run --quiet
exec env NEMESIS_SECS="$SECS" NEMESIS_FAULTS="$FAULTS" scripts/lib/netns.sh run \
  cargo test "${PROFILE[@]}" --offline --quiet --test cell_nemesis -- --ignored --nocapture
