#!/usr/bin/env bash
# The cell nemesis (tests/cell_nemesis.rs) for as long as asked, outside
# the test run: three real processes (--shards 1) under four concurrent
# writers while the leader is killed and restarted, a follower killed and
# restarted, the leader paused (SIGSTOP) and woken, both followers killed
# and restarted, one fault after another; then the checker (every
# acknowledged append once at its offset on every node, the same stream
# everywhere, byte-identical segment files) and a summary line with the
# failover times.
#
#   scripts/cell-nemesis.sh [SECONDS]     # default 600 (release build)
set -euo pipefail
cd "$(dirname "$0")/.."
NEMESIS_SECS="${1:-600}" exec cargo test --release --test cell_nemesis -- --ignored --nocapture
