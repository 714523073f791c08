#!/usr/bin/env bash
# Runs scripts/python-client-test.py (the official Python client, PyPI
# durable-streams, on both surfaces) against a release build on a free port.
# The client and its dependencies are the exact versions of
# scripts/python/requirements.txt, installed into a cached virtual
# environment (re-created only when that file changes).
# Usage: scripts/python-client.sh [--url URL]
#   --url URL  start no server: run the test against URL (e.g. a follower
#              of a cell, scripts/cell-conformance.sh)
# Environment: RINGSTREAM_PY_CACHE (default ~/.cache/ringstream-python),
# PYTHON (default python3; CPython 3.10 or newer).
set -euo pipefail
URL=""
case "${1:-}" in
  --url) [ $# -ge 2 ] || { echo "--url needs a URL" >&2; exit 2; }; URL="$2" ;;
  --url=*) URL="${1#--url=}" ;;
  "") ;;
  *) echo "unknown argument: $1" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
. scripts/lib/server.sh
VENV="${RINGSTREAM_PY_CACHE:-$HOME/.cache/ringstream-python}/venv"
want="$(sha256sum scripts/python/requirements.txt | cut -d' ' -f1)"
if [ "$(cat "$VENV/.installed" 2>/dev/null)" != "$want" ]; then
  echo "python-client: installing scripts/python/requirements.txt into $VENV" >&2
  rm -rf "$VENV"
  "${PYTHON:-python3}" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r scripts/python/requirements.txt >&2
  echo "$want" > "$VENV/.installed"
fi
if [ -n "$URL" ]; then
  exec "$VENV/bin/python" scripts/python-client-test.py "${URL%/}"
fi
work_dir py
server_start "$WORK" 0 "${SERVER_TEST_FLAGS[@]}" --long-poll-timeout-ms 1000
"$VENV/bin/python" scripts/python-client-test.py "$SERVER_URL"
