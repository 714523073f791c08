#!/usr/bin/env bash
# A replicated cell of three release servers on loopback (`--shards 1`, a
# secret file of mode 600), then the official conformance suite against a
# follower's address (its writes, HEADs and reads at the tail are forwarded
# to the leader over the peer link) and against the leader's, and the
# TypeScript and Python clients through the follower. Every run must pass.
#
# Usage: scripts/cell-conformance.sh [--keep-data]
# Environment: RINGSTREAM_BIN (a server binary instead of building one).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/server.sh
[ "${1:-}" = "--keep-data" ] && KEEP_WORK=1
work_dir cell-conformance

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
secret="$WORK/secret"
head -c 32 /dev/urandom | base64 > "$secret"
chmod 600 "$secret"
voters=""
for id in 1 2 3; do voters="$voters${voters:+,}$id@127.0.0.1:$(free_port)"; done

urls=()
for id in 1 2 3; do
  # A short long-poll timeout: several tests wait for a 204 inside vitest's limit.
  server_start "$WORK/node$id" 0 --shards 1 --no-pin --long-poll-timeout-ms 500 \
    --node-id "$id" --cell "$voters" --cell-secret-file "$secret"
  urls+=("$SERVER_URL")
done

# The leader: the node whose /leaderz answers 200 (30 s at most).
leader=""
for _ in $(seq 1 300); do
  for u in "${urls[@]}"; do
    [ "$(curl -s -o /dev/null -m 2 -w '%{http_code}' "$u/leaderz" || true)" = 200 ] && leader=$u
  done
  [ -n "$leader" ] && break
  sleep 0.1
done
[ -n "$leader" ] || { echo "cell-conformance: no node leads after 30 s" >&2; exit 1; }
follower=""
for u in "${urls[@]}"; do [ "$u" != "$leader" ] && { follower=$u; break; }; done
echo "cell-conformance: leader $leader, follower $follower"

status=0
echo "cell-conformance: the suite through the follower"
scripts/conformance.sh --url "$follower" || status=1
echo "cell-conformance: the suite on the leader"
scripts/conformance.sh --url "$leader" || status=1
echo "cell-conformance: the TypeScript client through the follower"
scripts/ts-client-demo.sh --url "$follower" || status=1
echo "cell-conformance: the Python client through the follower"
scripts/python-client.sh --url "$follower" || status=1
forwarded=$(curl -s "$follower/metrics" | awk '/^ringstream_cell_forwarded_requests_total.*to_leader/ {print $2}')
echo "cell-conformance: the follower forwarded ${forwarded:-0} requests to the leader"
[ "${forwarded:-0}" -gt 0 ] || { echo "cell-conformance: the follower forwarded nothing" >&2; status=1; }
exit $status
