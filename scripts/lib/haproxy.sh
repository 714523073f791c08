# shellcheck shell=bash
# Sourced by scripts that need HAProxy (scripts/multinode.sh,
# scripts/check-deploy.sh). haproxy_install: makes $HAPROXY a command that
# runs exactly Debian's haproxy $HAPROXY_DEB_VERSION, without root
# (scripts/lib/debpkg.sh):
#
#   - a system haproxy whose dpkg version is exactly the pinned one is used
#     as it is;
#   - otherwise the package is fetched with `apt-get download` (no root
#     needed) and unpacked with `dpkg -x` into the cache, together with the
#     library packages the host lacks: `ldd` on the unpacked binary names the
#     missing libraries, and the not-installed `lib*` packages among the
#     Depends of what was unpacked so far are fetched and unpacked in turn
#     until `ldd` finds everything. $HAPROXY is then a small wrapper in the
#     cache that sets LD_LIBRARY_PATH and execs the unpacked binary.
#
# The unpacked tree is reused while its recorded version is the pinned one;
# changing HAPROXY_DEB_VERSION (below) reinstalls. `haproxy -v` must report
# the upstream version (2.6.12), or the install fails.
#
# Environment: RINGSTREAM_HAPROXY_CACHE (default ~/.cache/ringstream-haproxy).
# When the host's package lists are missing or lack the version, a private
# `apt-get update` into the cache (no root) is tried once.

# shellcheck source=scripts/lib/debpkg.sh
. "$(dirname "${BASH_SOURCE[0]}")/debpkg.sh"

HAPROXY_DEB_VERSION="2.6.12-1+deb12u3"
HAPROXY_UPSTREAM_VERSION="${HAPROXY_DEB_VERSION%%-*}"

# _haproxy_check WRAPPER: prints `haproxy -v`'s first line if it names the
# pinned upstream version.
_haproxy_check() {
  # sed reads to the end: `head -1` would leave haproxy to die of SIGPIPE,
  # and with pipefail the first install failed with status 141.
  local v; v="$("$1" -v 2>&1 | sed -n 1p)"
  case "$v" in
    *"version $HAPROXY_UPSTREAM_VERSION-"*|*"version $HAPROXY_UPSTREAM_VERSION "*) echo "$v" ;;
    *) _debpkg_log "the unpacked haproxy reports '$v', expected $HAPROXY_UPSTREAM_VERSION"; return 1 ;;
  esac
}

# shellcheck disable=SC2034 # HAPROXY is for the caller
haproxy_install() {
  HAPROXY_CACHE="${RINGSTREAM_HAPROXY_CACHE:-$HOME/.cache/ringstream-haproxy}"
  debpkg_install haproxy "$HAPROXY_DEB_VERSION" "$HAPROXY_CACHE" usr/sbin/haproxy \
    _haproxy_check "HAPROXY_DEB_VERSION in scripts/lib/haproxy.sh" || return 1
  HAPROXY="$DEBPKG_CMD"
}
