# shellcheck shell=bash
# Sourced by scripts that cut links between loopback addresses
# (scripts/lib/netns.sh). nftables_install: makes $NFT a command that runs
# exactly Debian bookworm's nftables $NFTABLES_DEB_VERSION, without root,
# the way scripts/lib/debpkg.sh unpacks a package: a system nft of exactly
# that version is used as it is; otherwise the .deb is fetched with
# `apt-get download`, unpacked with `dpkg -x` into the cache together with
# the libraries the host lacks (libnftables1 at exactly the same version,
# then whatever `ldd` still misses: libnftnl11, and libjansson4, libmnl0 or
# libxtables12 where the host lacks them), and $NFT is a wrapper that sets
# LD_LIBRARY_PATH. The tree is reused while its recorded version is the pinned
# one; changing NFTABLES_DEB_VERSION (below) reinstalls. `nft --version` must
# report v1.0.6, or the install fails.
#
# Installing needs the network (apt); run it before entering a private network
# namespace (scripts/lib/netns.sh does). Running nft needs CAP_NET_ADMIN in
# the current network namespace, which `unshare -rn` gives without root.
#
# Environment: RINGSTREAM_NFTABLES_CACHE (default ~/.cache/ringstream-nftables).

# shellcheck source=scripts/lib/debpkg.sh
. "$(dirname "${BASH_SOURCE[0]}")/debpkg.sh"

NFTABLES_DEB_VERSION="1.0.6-2+deb12u2"
NFTABLES_UPSTREAM_VERSION="${NFTABLES_DEB_VERSION%%-*}"

# _nftables_check WRAPPER: prints `nft --version` ("nftables v1.0.6 (Lester
# Gooch #5)") if it names the pinned upstream version.
_nftables_check() {
  local v; v="$("$1" --version 2>&1 | sed -n 1p)"
  case "$v" in
    "nftables v$NFTABLES_UPSTREAM_VERSION "*|"nftables v$NFTABLES_UPSTREAM_VERSION") echo "$v" ;;
    *) _debpkg_log "the unpacked nft reports '$v', expected nftables v$NFTABLES_UPSTREAM_VERSION"; return 1 ;;
  esac
}

# shellcheck disable=SC2034 # NFT is for the caller
nftables_install() {
  NFTABLES_CACHE="${RINGSTREAM_NFTABLES_CACHE:-$HOME/.cache/ringstream-nftables}"
  debpkg_install nftables "$NFTABLES_DEB_VERSION" "$NFTABLES_CACHE" usr/sbin/nft \
    _nftables_check "NFTABLES_DEB_VERSION in scripts/lib/nftables.sh" || return 1
  NFT="$DEBPKG_CMD"
}
