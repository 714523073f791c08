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
# the leader, the TypeScript and Python clients through the follower; with
# one shard a node, then two), the
# same cell under writers while nftables cuts links between its nodes in a
# private network namespace (scripts/cell-partition.sh; with two shards a
# node also a cut that splits the groups' leaders), the same cell
# behind HAProxy with TLS and HTTP/2 (docs/deploy/haproxy-cell.cfg) with
# curl and ten SSE readers in headless Chromium (scripts/cell-h2.sh), tiered
# storage against a real SeaweedFS (scripts/tiering.sh: budget, kill -9
# during uploads, the store stopped and started, deletes) and in a cell
# (scripts/cell-tiering.sh: the leader killed during uploads, one object per
# segment per group, a node replaced from skeletons), and a short run
# of each fuzz target (fuzz/, cargo-fuzz). The release binaries are built
# once, here; the scripts below reuse them (scripts/lib/build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/build.sh

# step LIMIT COMMAND...: one step of the suite, stopped (with its whole
# process group: servers, weed, Chromium) if it runs past LIMIT seconds, so
# that a hang fails its own step with a name instead of the whole CI run.
# Each step prints what it took; the limits are about four times what a
# step takes on the 2-core CI machine (docs/testing.md).
step() {
  local limit=$1 t0=$SECONDS rc=0
  shift
  timeout -k 30 "$limit" "$@" || rc=$?
  case "$rc" in
    124 | 137) echo "test.sh: FAIL: '$*' ran past its limit of $limit s and was stopped" >&2 ;;
  esac
  echo "test.sh: '$*' took $((SECONDS - t0)) s (exit $rc)" >&2
  return "$rc"
}

step 2700 cargo test --workspace
build_release ringstream loadgen
# Each criterion benchmark once, as a test (they must build and run).
step 1200 cargo test --workspace --benches
step 1200 scripts/fuzz-smoke.sh
step 600 scripts/conformance.sh --restart --subscriptions
step 300 scripts/ts-client-demo.sh
step 300 scripts/python-client.sh
step 300 scripts/loadgen-smoke.sh
step 300 scripts/check-deploy.sh
step 600 scripts/multinode.sh
step 600 scripts/cell-conformance.sh
step 600 scripts/cell-conformance.sh --shards 2
step 600 scripts/cell-partition.sh
step 600 scripts/cell-partition.sh --shards 2
step 300 scripts/cell-h2.sh
step 900 scripts/tiering.sh
step 600 scripts/cell-tiering.sh
echo "test.sh: every step passed in $SECONDS s" >&2
