# shellcheck shell=bash
# Sourced by every script that needs release binaries: one way to build them,
# once per run.
#
# build_release PACKAGE...: `cargo build --release` of the packages of this
# workspace (ringstream, loadgen) that this run has not built yet. What was
# built is recorded in the exported RINGSTREAM_BUILT (" ringstream loadgen"),
# so the scripts a script runs skip the build; scripts/test.sh builds both
# first, so no script under it runs cargo again.
#
# server_binary: sets $SERVER_BIN to the server to run: $RINGSTREAM_BIN
# (or $RINGSTREAM, the older name some scripts documented) when set, else
# target/release/ringstream, built by build_release.

RS_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

build_release() {
  local p missing=()
  for p in "$@"; do
    case " ${RINGSTREAM_BUILT:-} " in
      *" $p "*) ;;
      *) missing+=(-p "$p") ;;
    esac
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  (cd "$RS_ROOT" && cargo build --release --quiet "${missing[@]}")
  RINGSTREAM_BUILT="${RINGSTREAM_BUILT:-} $*"
  export RINGSTREAM_BUILT
}

server_binary() {
  SERVER_BIN="${RINGSTREAM_BIN:-${RINGSTREAM:-}}"
  if [ -z "$SERVER_BIN" ]; then
    build_release ringstream
    SERVER_BIN="$RS_ROOT/target/release/ringstream"
  fi
}
