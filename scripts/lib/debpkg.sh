# shellcheck shell=bash
# Sourced by scripts/lib/haproxy.sh and scripts/lib/nftables.sh: one way to
# run exactly one version of a Debian package's binary without root.
#
# debpkg_install PKG VERSION CACHE BIN CHECK PIN [EXTRA...]: sets $DEBPKG_CMD
# to a command that runs exactly Debian's PKG VERSION (BIN: the binary's path
# in the package, e.g. usr/sbin/haproxy); each EXTRA (NAME=VERSION, exact) is
# a package unpacked beside it whatever its name (chromium needs its
# chromium-common, data files, not a library):
#
#   - a system BIN (by its base name on PATH) whose package dpkg has at
#     exactly VERSION is used as it is;
#   - otherwise the package is fetched with `apt-get download` (no root
#     needed) and unpacked with `dpkg -x` into CACHE/root, together with the
#     library packages the host lacks: `ldd` on the unpacked binary names the
#     missing libraries, and the not-installed `lib*` packages among the
#     Depends of what was unpacked so far are fetched and unpacked in turn
#     until `ldd` finds everything. A `lib*` dependency pinned to an exact
#     version (`libnftables1 (= 1.0.6-2+deb12u2)`) is fetched at that version
#     unless the host has exactly it, even when `ldd` finds another one.
#     $DEBPKG_CMD is then CACHE/bin/BASENAME, a small wrapper that sets
#     LD_LIBRARY_PATH and execs the unpacked binary.
#
# CHECK is a function called with the wrapper: it prints the binary's version
# line, or logs what is wrong and fails (the install then fails and is done
# again next time). The unpacked tree is reused while the version recorded in
# CACHE/.installed is VERSION. PIN names where the version is set, for the
# message when the download fails. When the host's package lists are missing
# or lack the version, a private `apt-get update` into CACHE/apt (no root) is
# tried once.

_debpkg_log() { echo "$(basename "$0"): $*" >&2; }

# _debpkg_apt CACHE ARGS...: apt-get with the cache's private package lists
# when they exist (see _debpkg_fetch).
_debpkg_apt() {
  local cache="$1"; shift
  local lists="$cache/apt/lists"
  if compgen -G "$lists/*_Packages*" >/dev/null; then
    apt-get -q -o Dir::State::Lists="$lists" -o Dir::Cache="$cache/apt/cache" \
      -o Debug::NoLocking=1 "$@"
  else
    apt-get -q "$@"
  fi
}

# _debpkg_fetch CACHE VERSION PIN DIR PKG[=VERSION]...: downloads the .debs
# into DIR.
_debpkg_fetch() {
  local cache="$1" version="$2" pin="$3" dir="$4"; shift 4
  if (cd "$dir" && _debpkg_apt "$cache" download "$@" >/dev/null 2>"$dir/apt.err"); then return 0; fi
  _debpkg_log "apt-get download $* failed; updating private package lists in $cache/apt"
  mkdir -p "$cache/apt/lists/partial" "$cache/apt/cache/archives/partial"
  apt-get -q -o Dir::State::Lists="$cache/apt/lists" -o Dir::Cache="$cache/apt/cache" \
    -o Debug::NoLocking=1 update >/dev/null 2>>"$dir/apt.err" || true
  if (cd "$dir" && _debpkg_apt "$cache" download "$@" >/dev/null 2>>"$dir/apt.err"); then return 0; fi
  _debpkg_log "cannot download $*:"; cat "$dir/apt.err" >&2
  _debpkg_log "(if Debian replaced $version, the .deb is still on snapshot.debian.org; or change $pin)"
  return 1
}

# _debpkg_missing ROOT BIN: the sonames `ldd` cannot find for the unpacked
# binary and the libraries unpacked beside it.
_debpkg_missing() {
  local root="$1" bin="$2" f
  {
    for f in "$root/$bin" $(find "$root" -name '*.so*' -type f 2>/dev/null); do
      LD_LIBRARY_PATH="$(_debpkg_libpath "$root")" ldd "$f" 2>/dev/null | awk '/not found/ {print $1}'
    done
  } | sort -u
}

# _debpkg_libpath ROOT: where the unpacked libraries are, for
# LD_LIBRARY_PATH: the usual directories, and the subdirectories of
# usr/lib/ARCH that hold libraries themselves (libpulse0's private
# pulseaudio/libpulsecommon-16.1.so, which libpulse.so.0 finds through a
# RUNPATH that points at the host's /usr/lib).
_debpkg_libpath() {
  local root="$1" arch; arch="$(uname -m)-linux-gnu"
  local sub; sub="$(find "$root/usr/lib/$arch" -mindepth 2 -maxdepth 2 -name 'lib*.so*' -printf '%h\n' 2>/dev/null | sort -u | tr '\n' ':')"
  echo "$root/usr/lib/x86_64-linux-gnu:$root/lib/x86_64-linux-gnu:$root/usr/lib/$arch:$root/usr/lib${sub:+:${sub%:}}"
}

# _debpkg_host_version PKG: the version dpkg has installed on the host, or
# nothing.
_debpkg_host_version() {
  [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = "installed" ] || return 0
  dpkg-query -W -f='${Version}' "$1" 2>/dev/null
}

# _debpkg_wanted DEBS MISSING: the `lib*` packages (NAME, or NAME=VERSION for
# an exact pin) that the Depends of the .debs in DEBS name, that are not
# fetched yet and that the host lacks. Without MISSING sonames only the exact
# pins the host does not have at that version.
_debpkg_wanted() {
  local debs="$1" missing="$2" deb p name have
  for deb in "$debs"/*.deb; do
    for p in $(dpkg-deb -f "$deb" Depends | tr ',' '\n' \
      | sed 's/|.*//; s/:any//; s/ *( *= *\([^)]*\))/=\1/; s/(.*)//; s/ //g' | grep '^lib' || true); do
      name="${p%%=*}"
      ls "$debs/${name}"_*.deb >/dev/null 2>&1 && continue
      have="$(_debpkg_host_version "$name")"
      if [ "$p" != "$name" ]; then
        [ "$have" != "${p#*=}" ] || continue
      else
        { [ -n "$missing" ] && [ -z "$have" ]; } || continue
      fi
      echo "$p"
    done
  done | awk '!seen[$0]++' | tr '\n' ' '
}

# shellcheck disable=SC2034 # DEBPKG_CMD is for the caller
debpkg_install() {
  local pkg="$1" version="$2" cache="$3" bin="$4" check="$5" pin="$6"
  shift 6
  local extra=("$@")
  local name; name="$(basename "$bin")"
  if command -v "$name" >/dev/null && [ "$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null)" = "$version" ]; then
    DEBPKG_CMD="$(command -v "$name")"
    return 0
  fi
  local wrapper="$cache/bin/$name"
  if [ "$(head -1 "$cache/.installed" 2>/dev/null)" = "$version" ] && [ -x "$wrapper" ]; then
    DEBPKG_CMD="$wrapper"
    return 0
  fi
  if ! command -v apt-get >/dev/null || ! command -v dpkg >/dev/null; then
    _debpkg_log "$pkg $version is not installed and there is no apt-get/dpkg to fetch it"; return 1
  fi
  _debpkg_log "unpacking $pkg $version (Debian package, no root) into $cache"
  rm -rf "${cache:?}/root" "${cache:?}/bin" "${cache:?}/debs" "${cache:?}/.installed"
  mkdir -p "$cache/root" "$cache/bin" "$cache/debs"
  local root="$cache/root" debs="$cache/debs" deb round missing want p
  _debpkg_fetch "$cache" "$version" "$pin" "$debs" "$pkg=$version" "${extra[@]}" || return 1
  dpkg -x "$debs/${pkg}"_*.deb "$root"
  for p in "${extra[@]}"; do dpkg -x "$debs/${p%%=*}"_*.deb "$root"; done
  for round in 1 2 3 4 5 6 7 8 9 10; do
    missing="$(_debpkg_missing "$root" "$bin")"
    want="$(_debpkg_wanted "$debs" "$missing")"
    if [ -z "${want// /}" ]; then
      [ -n "$missing" ] || break
      _debpkg_log "ldd still misses: ${missing//$'\n'/ } and no package in the Depends provides them"; return 1
    fi
    if [ -n "$missing" ]; then
      _debpkg_log "round $round: ldd misses ${missing//$'\n'/ }; fetching ${want% }"
    else
      _debpkg_log "round $round: fetching the exact versions the Depends name: ${want% }"
    fi
    # shellcheck disable=SC2086
    _debpkg_fetch "$cache" "$version" "$pin" "$debs" $want || return 1
    for p in $want; do dpkg -x "$debs/${p%%=*}"_*.deb "$root"; done
  done
  missing="$(_debpkg_missing "$root" "$bin")"
  [ -z "$missing" ] || { _debpkg_log "ldd still misses: ${missing//$'\n'/ }"; return 1; }
  cat > "$wrapper" <<SH
#!/bin/sh
# $pkg $version unpacked by scripts/lib/debpkg.sh
LD_LIBRARY_PATH="$(_debpkg_libpath "$root")\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$root/$bin" "\$@"
SH
  chmod +x "$wrapper"
  local v; v="$("$check" "$wrapper")" || return 1
  { echo "$version"
    # shellcheck disable=SC2016 # dpkg's format, not the shell's
    for deb in "$debs"/*.deb; do dpkg-deb -W --showformat='${Package} ${Version}\n' "$deb"; done
  } > "$cache/.installed"
  rm -rf "$debs"
  _debpkg_log "$v"
  DEBPKG_CMD="$wrapper"
}
