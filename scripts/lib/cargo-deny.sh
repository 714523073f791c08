# shellcheck shell=bash
# Sourced by scripts that check the dependency tree against deny.toml.
#
# cargo_deny_install: makes $CARGO_DENY_CACHE/bin/cargo-deny exactly the
#   version pinned below (`cargo install --locked`, from crates.io), built
#   only when it is missing or another version, so a fresh machine builds it
#   once; sets $CARGO_DENY to the binary.
#
# Environment: RINGSTREAM_CARGO_DENY_CACHE (default
# ~/.cache/ringstream-cargo-deny).

CARGO_DENY_VERSION="0.20.2"

cargo_deny_install() {
  CARGO_DENY_CACHE="${RINGSTREAM_CARGO_DENY_CACHE:-$HOME/.cache/ringstream-cargo-deny}"
  CARGO_DENY="$CARGO_DENY_CACHE/bin/cargo-deny"
  if [ "$("$CARGO_DENY" --version 2>/dev/null)" != "cargo-deny $CARGO_DENY_VERSION" ]; then
    echo "cargo-deny: installing $CARGO_DENY_VERSION into $CARGO_DENY_CACHE (once)" >&2
    cargo install --locked --quiet --force --root "$CARGO_DENY_CACHE" "cargo-deny@$CARGO_DENY_VERSION" >&2
  fi
  "$CARGO_DENY" --version | grep -qx "cargo-deny $CARGO_DENY_VERSION" \
    || { echo "cargo-deny: $CARGO_DENY is not $CARGO_DENY_VERSION" >&2; return 1; }
}
