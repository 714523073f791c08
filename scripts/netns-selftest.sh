#!/usr/bin/env bash
# Proves the partition tooling the replicated-cell tests stand on
# (scripts/lib/netns.sh, scripts/lib/nftables.sh): installs the pinned
# nftables, enters a private user and network namespace (no root needed on
# the host), starts three TCP echo servers on 127.0.0.1, 127.0.0.2 and
# 127.0.0.3 port 7001, and probes every directed pair (scripts/netns-selftest.py:
# a TCP echo through a client bound to the source address, and a UDP
# datagram, each with a 1 s timeout) after each step:
#
#   1. nothing cut: all 6 pairs connect and deliver;
#   2. cut 127.0.0.1 127.0.0.2: .1 -> .2 datagrams are lost, .2 -> .1 ones
#      arrive; TCP between .1 and .2 times out both ways (a handshake needs
#      both directions); .1 <-> .3 and .2 <-> .3 still work;
#   3. heal_all: everything works again;
#   4. cut_both 127.0.0.2 127.0.0.3: both directions lost, .1 unaffected;
#   5. heal 127.0.0.3 127.0.0.2: only .2 -> .3 is still cut;
#   6. heal_all: everything works again.
#
# Exits 1, naming each probe that did not behave as expected; 0 when all
# did. --plant skips applying the cuts (the heals still run), so steps 2, 4
# and 5 must fail: it shows the probes can see a missing partition.
#
# Environment: RINGSTREAM_NFTABLES_CACHE (see scripts/lib/nftables.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

PLANT=0
for arg in "$@"; do
  case "$arg" in
    --plant) PLANT=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "netns-selftest: unknown argument '$arg' (--plant, --help)" >&2; exit 2 ;;
  esac
done

# shellcheck source=scripts/lib/netns.sh
. scripts/lib/netns.sh
# Outside: install nftables and come back here inside the namespace.
netns_inside || exec scripts/lib/netns.sh run bash "$0" "$@"

A=127.0.0.1 B=127.0.0.2 C=127.0.0.3
echo "netns-selftest: inside a private network namespace as uid $(id -u) (host uid $(awk '{print $2}' /proc/self/uid_map)); $("$NFT" --version)"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/ringstream-netns.XXXXXX")"
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for addr in "$A" "$B" "$C"; do
  python3 scripts/netns-selftest.py serve "$addr" 7001 >"$WORK/$addr.out" 2>&1 &
  PIDS+=("$!")
done
for i in 0 1 2; do
  addr=$(echo "$A $B $C" | cut -d' ' -f$((i + 1)))
  for _ in $(seq 1 500); do
    grep -q listening "$WORK/$addr.out" && break
    kill -0 "${PIDS[$i]}" 2>/dev/null || { echo "netns-selftest: the echo server on $addr exited:" >&2; cat "$WORK/$addr.out" >&2; exit 1; }
    sleep 0.01
  done
  grep -q listening "$WORK/$addr.out" || { echo "netns-selftest: the echo server on $addr is not listening after 5 s" >&2; exit 1; }
done

FAILED=()
# step NAME [--cut X>Y]...: probes all pairs against the cuts named.
step() {
  local name="$1"; shift
  echo "== $name"
  python3 scripts/netns-selftest.py check "$A" "$B" "$C" "$@" || FAILED+=("$name")
}
# apply ARGS...: netns.sh ARGS, unless --plant and ARGS cut.
apply() {
  case "$PLANT:$1" in
    1:cut|1:cut_both) echo "-- planted: NOT applying: $*" ;;
    *) echo "-- $*"; scripts/lib/netns.sh "$@" ;;
  esac
}

step "nothing cut"
apply cut "$A" "$B"
step "cut $A $B" --cut "$A>$B"
apply heal_all
step "healed"
apply cut_both "$B" "$C"
step "cut_both $B $C" --cut "$B>$C" --cut "$C>$B"
apply heal "$C" "$B"
step "heal $C $B (still cut: $B -> $C)" --cut "$B>$C"
apply heal_all
step "healed again"

if [ ${#FAILED[@]} -gt 0 ]; then
  echo "netns-selftest: FAILED: expectations did not hold after: $(IFS=';'; echo "${FAILED[*]}")" >&2
  exit 1
fi
echo "netns-selftest: every expectation held"
