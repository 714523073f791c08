#!/usr/bin/env bash
# CI smoke run of the libFuzzer targets in fuzz/ (cargo-fuzz): replays the
# committed seeds and former crash inputs, then fuzzes each target for a few
# seconds; any crash, failed assertion or hang fails the run. Long campaigns:
# see docs/testing.md.
#
#   scripts/fuzz-smoke.sh                  # every target, FUZZ_SECONDS (20) each
#   FUZZ_SECONDS=600 scripts/fuzz-smoke.sh http_parse
#
# Works on the stable toolchain: `-s none` (no sanitizer) needs no -Z flag.
# The code under test is safe Rust, so the sanitizer would add little; with
# RUSTC_BOOTSTRAP=1 and without `-s none` the targets also build with ASan.
set -euo pipefail
cd "$(dirname "$0")/.."
CARGO_FUZZ_VERSION=0.13.2
seconds="${FUZZ_SECONDS:-20}"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(http_parse record_decode log_recovery)

if [ "$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]; then
  cargo install --locked --quiet cargo-fuzz --version "$CARGO_FUZZ_VERSION"
fi

cd fuzz
cargo fuzz build -s none
for t in "${targets[@]}"; do
  # The first directory collects what the run finds (git-ignored); seeds and
  # former crash inputs are read-only inputs replayed first.
  dirs=("corpus/$t" "seeds/$t")
  [ -d "regressions/$t" ] && dirs+=("regressions/$t")
  mkdir -p "corpus/$t"
  log="$(mktemp "${TMPDIR:-/tmp}/fuzz-$t.XXXXXX")"
  if ! cargo fuzz run -s none "$t" "${dirs[@]}" -- -max_total_time="$seconds" -timeout=10 \
    -print_final_stats=1 >"$log" 2>&1; then
    grep -A1 "panicked at" "$log" || true
    tail -n 15 "$log"
    echo "fuzz-smoke: $t failed; the input is in fuzz/artifacts/$t/ (see docs/testing.md)" >&2
    exit 1
  fi
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")"
  rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")"
  echo "fuzz-smoke: $t ok: $runs executions in ${seconds}s ($rate/s)"
  rm -f "$log"
done
