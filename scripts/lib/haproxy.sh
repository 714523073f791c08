# shellcheck shell=bash
# Sourced by scripts that need HAProxy (scripts/multinode.sh,
# scripts/check-deploy.sh). haproxy_install: makes $HAPROXY a command that
# runs exactly Debian's haproxy $HAPROXY_DEB_VERSION, without root:
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

HAPROXY_DEB_VERSION="2.6.12-1+deb12u3"
HAPROXY_UPSTREAM_VERSION="${HAPROXY_DEB_VERSION%%-*}"

_haproxy_log() { echo "$(basename "$0"): $*" >&2; }

# _haproxy_apt ARGS...: apt-get with the cache's private package lists when
# they exist (see _haproxy_fetch).
_haproxy_apt() {
  local lists="$HAPROXY_CACHE/apt/lists"
  if compgen -G "$lists/*_Packages*" >/dev/null; then
    apt-get -q -o Dir::State::Lists="$lists" -o Dir::Cache="$HAPROXY_CACHE/apt/cache" \
      -o Debug::NoLocking=1 "$@"
  else
    apt-get -q "$@"
  fi
}

# _haproxy_fetch DIR PKG[=VERSION]...: downloads the .debs into DIR.
_haproxy_fetch() {
  local dir="$1"; shift
  if (cd "$dir" && _haproxy_apt download "$@" >/dev/null 2>"$dir/apt.err"); then return 0; fi
  _haproxy_log "apt-get download $* failed; updating private package lists in $HAPROXY_CACHE/apt"
  mkdir -p "$HAPROXY_CACHE/apt/lists/partial" "$HAPROXY_CACHE/apt/cache/archives/partial"
  apt-get -q -o Dir::State::Lists="$HAPROXY_CACHE/apt/lists" -o Dir::Cache="$HAPROXY_CACHE/apt/cache" \
    -o Debug::NoLocking=1 update >/dev/null 2>>"$dir/apt.err" || true
  if (cd "$dir" && _haproxy_apt download "$@" >/dev/null 2>>"$dir/apt.err"); then return 0; fi
  _haproxy_log "cannot download $*:"; cat "$dir/apt.err" >&2
  _haproxy_log "(if Debian replaced $HAPROXY_DEB_VERSION, the .deb is still on snapshot.debian.org; or change HAPROXY_DEB_VERSION in scripts/lib/haproxy.sh)"
  return 1
}

# _haproxy_missing ROOT: the sonames `ldd` cannot find for the unpacked
# binary and the libraries unpacked beside it.
_haproxy_missing() {
  local root="$1" f
  {
    for f in "$root/usr/sbin/haproxy" $(find "$root" -name '*.so*' -type f 2>/dev/null); do
      LD_LIBRARY_PATH="$(_haproxy_libpath "$root")" ldd "$f" 2>/dev/null | awk '/not found/ {print $1}'
    done
  } | sort -u
}

_haproxy_libpath() {
  local root="$1"
  echo "$root/usr/lib/x86_64-linux-gnu:$root/lib/x86_64-linux-gnu:$root/usr/lib/$(uname -m)-linux-gnu:$root/usr/lib"
}

# _haproxy_installed PKG: true when dpkg has PKG installed on the host.
_haproxy_installed() {
  [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = "installed" ]
}

# shellcheck disable=SC2034 # HAPROXY is for the caller
haproxy_install() {
  HAPROXY_CACHE="${RINGSTREAM_HAPROXY_CACHE:-$HOME/.cache/ringstream-haproxy}"
  if command -v haproxy >/dev/null && [ "$(dpkg-query -W -f='${Version}' haproxy 2>/dev/null)" = "$HAPROXY_DEB_VERSION" ]; then
    HAPROXY="$(command -v haproxy)"
    return 0
  fi
  local wrapper="$HAPROXY_CACHE/bin/haproxy"
  if [ "$(head -1 "$HAPROXY_CACHE/.installed" 2>/dev/null)" = "$HAPROXY_DEB_VERSION" ] && [ -x "$wrapper" ]; then
    HAPROXY="$wrapper"
    return 0
  fi
  if ! command -v apt-get >/dev/null || ! command -v dpkg >/dev/null; then
    _haproxy_log "haproxy $HAPROXY_DEB_VERSION is not installed and there is no apt-get/dpkg to fetch it"; return 1
  fi
  _haproxy_log "unpacking haproxy $HAPROXY_DEB_VERSION (Debian package, no root) into $HAPROXY_CACHE"
  rm -rf "${HAPROXY_CACHE:?}/root" "${HAPROXY_CACHE:?}/bin" "${HAPROXY_CACHE:?}/debs" "${HAPROXY_CACHE:?}/.installed"
  mkdir -p "$HAPROXY_CACHE/root" "$HAPROXY_CACHE/bin" "$HAPROXY_CACHE/debs"
  local root="$HAPROXY_CACHE/root" debs="$HAPROXY_CACHE/debs" deb round missing want p
  _haproxy_fetch "$debs" "haproxy=$HAPROXY_DEB_VERSION" || return 1
  dpkg -x "$debs"/haproxy_*.deb "$root"
  for round in 1 2 3 4 5 6; do
    missing="$(_haproxy_missing "$root")"
    [ -n "$missing" ] || break
    # Library packages the unpacked ones depend on and the host lacks.
    want=""
    for deb in "$debs"/*.deb; do
      for p in $(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed 's/|.*//; s/(.*)//; s/:any//; s/ //g' | grep '^lib' || true); do
        _haproxy_installed "$p" && continue
        ls "$debs/${p}"_*.deb >/dev/null 2>&1 && continue
        want="$want $p"
      done
    done
    if [ -z "$want" ]; then
      _haproxy_log "ldd still misses: ${missing//$'\n'/ } and no package in the Depends provides them"; return 1
    fi
    _haproxy_log "round $round: ldd misses ${missing//$'\n'/ }; fetching$want"
    # shellcheck disable=SC2086
    _haproxy_fetch "$debs" $want || return 1
    for p in $want; do dpkg -x "$debs/${p}"_*.deb "$root"; done
  done
  missing="$(_haproxy_missing "$root")"
  [ -z "$missing" ] || { _haproxy_log "ldd still misses: ${missing//$'\n'/ }"; return 1; }
  cat > "$wrapper" <<SH
#!/bin/sh
# haproxy $HAPROXY_DEB_VERSION unpacked by scripts/lib/haproxy.sh
LD_LIBRARY_PATH="$(_haproxy_libpath "$root")\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$root/usr/sbin/haproxy" "\$@"
SH
  chmod +x "$wrapper"
  # sed reads to the end: `head -1` would leave haproxy to die of SIGPIPE,
  # and with pipefail the first install failed with status 141.
  local v; v="$("$wrapper" -v 2>&1 | sed -n 1p)"
  case "$v" in
    *"version $HAPROXY_UPSTREAM_VERSION-"*|*"version $HAPROXY_UPSTREAM_VERSION "*) ;;
    *) _haproxy_log "the unpacked haproxy reports '$v', expected $HAPROXY_UPSTREAM_VERSION"; return 1 ;;
  esac
  { echo "$HAPROXY_DEB_VERSION"
    # shellcheck disable=SC2016 # dpkg's format, not the shell's
    for deb in "$debs"/*.deb; do dpkg-deb -W --showformat='${Package} ${Version}\n' "$deb"; done
  } > "$HAPROXY_CACHE/.installed"
  rm -rf "$debs"
  _haproxy_log "$v"
  HAPROXY="$wrapper"
}
