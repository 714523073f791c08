# shellcheck shell=bash
# Sourced by scripts that drive a real browser (scripts/cell-h2.sh).
# chromium_install: makes $CHROMIUM a command that runs exactly Debian
# bookworm's chromium $CHROMIUM_DEB_VERSION, without root, the way
# scripts/lib/debpkg.sh unpacks a package: a system chromium of exactly that
# version is used as it is; otherwise `chromium` and `chromium-common` (its
# resources: .pak files, locales; Depends pins it to the same version) are
# fetched with `apt-get download` and unpacked with `dpkg -x` into the cache,
# with the library packages the host lacks (the `lib*` Depends, round after
# round until `ldd` finds every library of the binary and of what was
# unpacked beside it), and $CHROMIUM is a wrapper that sets LD_LIBRARY_PATH
# and execs usr/lib/chromium/chromium (not Debian's usr/bin/chromium shell
# script, which only adds flags from /etc/chromium.d). `chromium --version`
# must report the pinned upstream version, or the install fails.
#
# Debian replaces chromium in bookworm-security every few weeks and the old
# .deb leaves the mirrors: when the download fails, move the pin to the
# version `apt-cache policy chromium` offers (or fetch the old one from
# snapshot.debian.org). About 110 MB of .debs, 400 MB unpacked.
#
# Environment: RINGSTREAM_CHROMIUM_CACHE (default ~/.cache/ringstream-chromium).

# shellcheck source=scripts/lib/debpkg.sh
. "$(dirname "${BASH_SOURCE[0]}")/debpkg.sh"

CHROMIUM_DEB_VERSION="148.0.7778.167-1~deb12u1"
CHROMIUM_UPSTREAM_VERSION="${CHROMIUM_DEB_VERSION%%-*}"

# _chromium_check WRAPPER: prints `chromium --version` ("Chromium
# 148.0.7778.167 built on Debian ...") if it names the pinned version.
_chromium_check() {
  local v; v="$("$1" --version 2>&1 | sed -n 1p)"
  case "$v" in
    "Chromium $CHROMIUM_UPSTREAM_VERSION "*) echo "$v" ;;
    *) _debpkg_log "the unpacked chromium reports '$v', expected Chromium $CHROMIUM_UPSTREAM_VERSION"; return 1 ;;
  esac
}

# shellcheck disable=SC2034 # CHROMIUM is for the caller
chromium_install() {
  CHROMIUM_CACHE="${RINGSTREAM_CHROMIUM_CACHE:-$HOME/.cache/ringstream-chromium}"
  debpkg_install chromium "$CHROMIUM_DEB_VERSION" "$CHROMIUM_CACHE" usr/lib/chromium/chromium \
    _chromium_check "CHROMIUM_DEB_VERSION in scripts/lib/chromium.sh" \
    "chromium-common=$CHROMIUM_DEB_VERSION" || return 1
  CHROMIUM="$DEBPKG_CMD"
}
