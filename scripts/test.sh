#!/usr/bin/env bash
# Every test of the project: unit, integration (real server over real
# sockets), the criterion benchmarks run once each as tests, storage fault injection, the official conformance suite against
# a release build twice (across a restart on the same data), the official
# TypeScript client on both surfaces (/v1/stream and /ds; without access
# control, then with a bearer token) and the Python client on both, a short
# loadgen smoke run (report, plot), the deploy files' checks, three nodes
# behind the HAProxy configuration of docs/deploy/ (the conformance suite
# and the TypeScript client through it, a node killed and restarted), a
# replicated cell of three (the conformance suite through a follower and on
# the leader, the TypeScript and Python clients through the follower), the
# same cell under writers while nftables cuts links between its nodes in a
# private network namespace (scripts/cell-partition.sh), the same cell
# behind HAProxy with TLS and HTTP/2 (docs/deploy/haproxy-cell.cfg) with
# curl and ten SSE readers in headless Chromium (scripts/cell-h2.sh), tiered
# storage against a real SeaweedFS (scripts/tiering.sh: budget, kill -9
# during uploads, the store stopped and started, deletes), and a short run
# of each fuzz target (fuzz/, cargo-fuzz). The release binaries are built
# once, here; the scripts below reuse them (scripts/lib/build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/build.sh
cargo test --workspace
build_release ringstream loadgen
# Each criterion benchmark once, as a test (they must build and run).
cargo test --workspace --benches
scripts/fuzz-smoke.sh
scripts/conformance.sh --restart --subscriptions
scripts/ts-client-demo.sh
scripts/python-client.sh
scripts/loadgen-smoke.sh
scripts/check-deploy.sh
scripts/multinode.sh
scripts/cell-conformance.sh
scripts/cell-partition.sh
scripts/cell-h2.sh
scripts/tiering.sh
