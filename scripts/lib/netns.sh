#!/usr/bin/env bash
# shellcheck shell=bash
# A private network for tests that partition nodes: a user and network
# namespace of its own (`unshare -rn`, no root needed on the host) whose
# loopback is up, so 127.0.0.1, 127.0.0.2 and 127.0.0.3 (all of 127.0.0.0/8
# is local on lo) can be three nodes, and links between those addresses cut
# and healed with nftables (scripts/lib/nftables.sh, Debian's 1.0.6).
#
#   scripts/lib/netns.sh run CMD [ARG...]  installs nftables (before entering:
#       apt needs the network), then runs CMD inside a new namespace with lo
#       up and $NFT exported; exits with CMD's status. Everything that must see
#       the partition (the servers and the test driver) runs under CMD: a cut
#       holds only in this namespace, and the namespace, its rules with it,
#       goes away with its last process. Already inside, CMD runs as it is in
#       the same namespace, so a script may re-exec itself through `run`.
#   scripts/lib/netns.sh cut A B        drop every IPv4 packet from A to B
#   scripts/lib/netns.sh cut_both A B   cut A B and cut B A
#   scripts/lib/netns.sh cut_ports A B P,Q   drop every TCP packet between A
#                                       and B, either way, to or from port
#                                       P or Q (one group's links of a cell)
#   scripts/lib/netns.sh heal A B       undo cut A B
#   scripts/lib/netns.sh heal_all       undo every cut
#   scripts/lib/netns.sh show           print the cuts (nft's listing)
#
# cut, cut_both, cut_ports, heal, heal_all and show work only inside a namespace made by
# `run` (they refuse anywhere else, so they never touch the host's firewall);
# there they run $NFT as the namespace's root, whose CAP_NET_ADMIN over its
# own network namespace is all nftables asks for. Sourced, this file defines
# the same as functions: netns_run, netns_cut, netns_cut_both, netns_cut_ports, netns_heal,
# netns_heal_all, netns_show, and netns_inside (true inside such a namespace).
#
# The cuts are one nft table, `inet ringstream_partition`, with a chain on the
# INPUT hook and one rule per cut: `ip saddr A ip daddr B drop`. On loopback
# a packet passes OUTPUT as it is sent and INPUT as it is received. Dropping
# it at INPUT loses it silently after the sender has sent it, as a broken
# network would; at OUTPUT the kernel reports the drop to the sender (UDP's
# sendto() fails with EPERM, checked on Linux 6.18), which no real partition
# does.
#
# "One way" is about packets: after `cut A B`, nothing A sends reaches B while
# everything B sends reaches A (scripts/netns-selftest.sh checks both with UDP
# datagrams). TCP needs both directions, so for TCP a one-way cut stalls
# connections both ways: A's SYN to B is lost, and B's SYN reaches A but A's
# SYN-ACK is lost, so connect() times out from either side. On a connection
# already open, B's data still reaches A's application (once), but A's ACKs
# are lost, so B retransmits until its send window fills and then stalls;
# A's data never reaches B. A test that wants "A cannot reach B but B can
# reach A" at the message level needs a transport that does not wait for
# answers (UDP), not this cut.

NETNS_TABLE="ringstream_partition"
NETNS_SH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"

_netns_die() { echo "netns.sh: $*" >&2; return 1; }

# netns_inside: true in a namespace `netns_run` made (and not in a further
# namespace a process inside made).
netns_inside() {
  [ -n "${RINGSTREAM_NETNS:-}" ] && [ "$(readlink /proc/self/ns/net)" = "$RINGSTREAM_NETNS" ]
}

_netns_require() {
  netns_inside || _netns_die "not inside a namespace of 'scripts/lib/netns.sh run': refusing to change this network namespace's firewall" || return 1
  [ -n "${NFT:-}" ] || _netns_die "NFT is not set (scripts/lib/netns.sh run exports it)"
}

_netns_addr() {
  [[ "$1" =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || _netns_die "not an IPv4 address: '$1'"
}

# _netns_prepare: what entering needs, checked (and nftables installed)
# before entering.
_netns_prepare() {
  command -v unshare >/dev/null || _netns_die "unshare (util-linux) is missing" || return 1
  command -v ip >/dev/null || _netns_die "ip (iproute2) is missing: it brings lo up" || return 1
  if ! unshare -rn true 2>/dev/null; then
    _netns_die "unshare -rn fails here: $(unshare -rn true 2>&1 | tail -1); user namespaces must be allowed" \
      "(sysctl user.max_user_namespaces > 0; kernel.unprivileged_userns_clone=1 on Debian kernels before 6.1;" \
      "kernel.apparmor_restrict_unprivileged_userns=0 on Ubuntu 23.10 and later)"
    return 1
  fi
  if [ -z "${NFT:-}" ]; then
    # shellcheck source=scripts/lib/nftables.sh
    . "$(dirname "$NETNS_SH")/nftables.sh"
    nftables_install || return 1
  fi
  export NFT
}

# netns_run CMD...: CMD in a new namespace (as a child; `netns.sh run` execs).
netns_run() {
  [ $# -gt 0 ] || _netns_die "usage: netns.sh run CMD [ARG...]" || return 1
  if netns_inside; then "$@"; return; fi
  _netns_prepare || return 1
  unshare -rn -- bash "$NETNS_SH" _enter "$@"
}

# _netns_enter CMD...: the first step inside the new namespace: lo up, the
# three node addresses checked local, then CMD in place of this shell.
_netns_enter() {
  ip link set lo up || _netns_die "cannot bring lo up in the new namespace" || return 1
  local a route
  for a in 127.0.0.1 127.0.0.2 127.0.0.3; do
    route="$(ip -o route get "$a" 2>&1)"
    [[ "$route" == "local $a dev lo "* ]] || _netns_die "$a is not local on lo after 'ip link set lo up': $route" || return 1
  done
  RINGSTREAM_NETNS="$(readlink /proc/self/ns/net)"
  export RINGSTREAM_NETNS
  "$NFT" list ruleset >/dev/null || _netns_die "$NFT cannot list the namespace's ruleset as its root" || return 1
  exec "$@"
}

netns_cut() {
  _netns_require && _netns_addr "$1" && _netns_addr "$2" || return 1
  "$NFT" -f - <<NFT
add table inet $NETNS_TABLE
add chain inet $NETNS_TABLE input { type filter hook input priority filter; policy accept; }
add rule inet $NETNS_TABLE input ip saddr $1 ip daddr $2 drop
NFT
}

netns_cut_both() { netns_cut "$1" "$2" && netns_cut "$2" "$1"; }

netns_cut_ports() {
  _netns_require && _netns_addr "$1" && _netns_addr "$2" || return 1
  [[ "$3" =~ ^[0-9]+(,[0-9]+)*$ ]] || _netns_die "ports must be N or N,M,...: '$3'" || return 1
  "$NFT" -f - <<NFT
add table inet $NETNS_TABLE
add chain inet $NETNS_TABLE input { type filter hook input priority filter; policy accept; }
add rule inet $NETNS_TABLE input ip saddr $1 ip daddr $2 tcp dport { $3 } drop
add rule inet $NETNS_TABLE input ip saddr $1 ip daddr $2 tcp sport { $3 } drop
add rule inet $NETNS_TABLE input ip saddr $2 ip daddr $1 tcp dport { $3 } drop
add rule inet $NETNS_TABLE input ip saddr $2 ip daddr $1 tcp sport { $3 } drop
NFT
}

netns_heal() {
  _netns_require && _netns_addr "$1" && _netns_addr "$2" || return 1
  local h
  # `nft -a` ends each rule with "# handle N".
  for h in $("$NFT" -a list chain inet "$NETNS_TABLE" input 2>/dev/null \
    | awk -v a="$1" -v b="$2" '$1 == "ip" && $2 == "saddr" && $3 == a && $5 == "daddr" && $6 == b && $7 == "drop" { print $NF }'); do
    "$NFT" delete rule inet "$NETNS_TABLE" input handle "$h" || return 1
  done
}

netns_heal_all() {
  _netns_require || return 1
  # Adding the table first makes the delete succeed when nothing was cut.
  "$NFT" -f - <<NFT
add table inet $NETNS_TABLE
delete table inet $NETNS_TABLE
NFT
}

netns_show() {
  _netns_require || return 1
  "$NFT" list table inet "$NETNS_TABLE" 2>/dev/null || echo "no cuts"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  cmd="${1:-}"
  [ $# -eq 0 ] || shift
  case "$cmd" in
    run)
      [ $# -gt 0 ] || { echo "usage: netns.sh run CMD [ARG...]" >&2; exit 2; }
      netns_inside && exec "$@"
      _netns_prepare
      exec unshare -rn -- bash "$NETNS_SH" _enter "$@" ;;
    _enter) _netns_enter "$@" ;;
    cut|cut_both|heal)
      [ $# -eq 2 ] || { _netns_die "usage: netns.sh $cmd A B" || exit 2; }
      "netns_$cmd" "$1" "$2" ;;
    cut_ports)
      [ $# -eq 3 ] || { _netns_die "usage: netns.sh cut_ports A B P[,Q...]" || exit 2; }
      netns_cut_ports "$1" "$2" "$3" ;;
    heal_all|show) "netns_$cmd" ;;
    *) echo "usage: netns.sh run CMD [ARG...] | cut A B | cut_both A B | cut_ports A B PORTS | heal A B | heal_all | show" >&2; exit 2 ;;
  esac
fi
