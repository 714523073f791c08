#!/usr/bin/env bash
# Every test of the project: unit, integration (real server over real
# sockets), storage fault injection, the official conformance suite against
# a release build twice (across a restart on the same data), the official
# TypeScript client under /ds, a short loadgen smoke run, and a short run of
# each fuzz target (fuzz/, cargo-fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace
scripts/fuzz-smoke.sh
scripts/conformance.sh --restart
scripts/ts-client-demo.sh
scripts/loadgen-smoke.sh
