#!/usr/bin/env bash
# A long soak of the cell simulation (tests/cell_sim.rs), beyond what CI
# runs: SEEDS seeds from FIRST, each with FAULT_MS of virtual time under
# faults, in a release build. Prints each seed's summary; exits non-zero
# with the seed to replay when one fails.
#
#   scripts/cell-sim-soak.sh [SEEDS] [FIRST] [FAULT_MS]
#   scripts/cell-sim-soak.sh 1000 100 30000    # default: seeds 100..1099, 30 s each
#   scripts/cell-sim-soak.sh 200 5000 120000   # 200 seeds of two minutes of faults
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS="${1:-1000}" FIRST="${2:-100}" FAULT_MS="${3:-30000}"
start=$(date +%s) status=0
CELL_SIM_SEEDS="$SEEDS" CELL_SIM_FIRST_SEED="$FIRST" CELL_SIM_FAULT_MS="$FAULT_MS" \
  cargo test --release --test cell_sim every_acknowledged -- --nocapture 2>&1 \
  | grep -E "^seed |panicked|acknowledged p|replay:|test result" || status=$?
echo "soak: seeds $FIRST..$((FIRST + SEEDS - 1)), ${FAULT_MS} ms of faults each, $(( $(date +%s) - start )) s, exit $status"
exit "$status"
