# shellcheck shell=bash
# shellcheck disable=SC2034 # SERVER_* and SERVER_TEST_FLAGS are for the scripts that source this
# Sourced by every shell script that runs a ringstream server: one way to
# start one on a loopback port, wait until it is ready, stop it, and clean
# up when the script ends, however it ends. (Python drivers use
# scripts/lib/server.py, which keeps the same contract.) Sources build.sh.
#
# server_start DIR PORT [FLAG...]: runs $SERVER_BIN (server_binary's choice,
#   built once per run) with --listen 127.0.0.1:PORT (0: a free port; the
#   port of an earlier run to come back on it), --data-dir DIR/data and the
#   FLAGs; stdout to DIR/out, stderr appended to DIR/err. Waits for its
#   "listening on" line, then for /readyz to answer 200 (30 s each), and
#   sets SERVER_PID, SERVER_PORT, SERVER_URL and SERVER_SECS (from exec to
#   the listening line). A server that exits first, or that comes back on
#   another port, ends the script (status 3) with the tail of DIR/err.
# server_stop PID [SIGNAL]: sends SIGNAL (TERM) and waits; SERVER_EXIT is
#   its exit status (0 after a clean shutdown, 137 after KILL). A server
#   still running 60 s after the signal is killed and reported, and
#   SERVER_EXIT is then "hung". Returns 0.
# cell_start DIR [FLAG...]: a cell of three nodes (`--shards 1`, or
#   CELL_SHARDS, each voter's peer ports a run of that many; a secret
#   of mode 600, peer ports free on loopback), each started as server_start
#   does in DIR/nodeN with the FLAGs, then waits (30 s) until it settles:
#   node 1 (the first voter, which a cell steers its lead to) answers
#   /leaderz 200 and the others name it as their leader. Sets CELL_URL[1..3]
#   and CELL_PID[1..3]; the leader is node 1.
# free_port: prints a free TCP port on loopback.
# peer_ports N [RUN]: prints N free ports below the ephemeral range, each
#   with the RUN - 1 ports after it free too and no two runs overlapping,
#   for a cell's peer listeners (cell_start uses them).
# work_dir NAME: sets WORK to a new temporary directory, removed at exit
#   unless KEEP_WORK=1 then (it is printed instead).
# at_exit COMMAND: run COMMAND (eval'd, with EXIT_STATUS set) at exit, the
#   last registered first, before the servers still running are stopped
#   (TERM, KILL after 5 s) and WORK is removed. This file owns the EXIT
#   trap: scripts register with at_exit instead of trapping EXIT.

# shellcheck source=scripts/lib/build.sh
. "$(dirname "${BASH_SOURCE[0]}")/build.sh"

# The settings of a test server: 2 shards, unpinned (several servers and
# their clients share a small machine).
SERVER_TEST_FLAGS=(--shards 2 --no-pin)
_RS_SERVERS=()
_RS_AT_EXIT=()
WORK=""

at_exit() { _RS_AT_EXIT+=("$1"); }

work_dir() {
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/ringstream-$1.XXXXXX")"
}

server_start() {
  local dir=$1 port=$2 t0 got
  shift 2
  [ -n "${SERVER_BIN:-}" ] || server_binary
  mkdir -p "$dir"
  t0=$(date +%s%N)
  "$SERVER_BIN" --listen "127.0.0.1:$port" --data-dir "$dir/data" "$@" >"$dir/out" 2>>"$dir/err" &
  SERVER_PID=$!
  _RS_SERVERS+=("$SERVER_PID")
  _server_wait_line "$dir" "$t0"
  got="$(grep -o '127.0.0.1:[0-9]*' "$dir/out" | head -1 | cut -d: -f2)"
  [ "$port" = 0 ] || [ "$got" = "$port" ] || _server_failed "$dir" "came back on port $got, not $port"
  SERVER_PORT=$got
  SERVER_URL="http://127.0.0.1:$got"
  _server_wait_ready "$dir"
}

# The listening line (polled every 10 ms), or the server's end.
_server_wait_line() {
  local dir=$1 t0=$2 _
  for _ in $(seq 1 3000); do
    if grep -q "listening on" "$dir/out" 2>/dev/null; then
      SERVER_SECS="$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')"
      return 0
    fi
    kill -0 "$SERVER_PID" 2>/dev/null || _server_failed "$dir" "exited before listening"
    sleep 0.01
  done
  _server_failed "$dir" "printed no listening line in 30 s"
}

_server_wait_ready() {
  local dir=$1 _ code=""
  for _ in $(seq 1 300); do
    code="$(curl -s -o /dev/null -m 2 -w '%{http_code}' "$SERVER_URL/readyz" || true)"
    [ "$code" = 200 ] && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || _server_failed "$dir" "exited before it was ready"
    sleep 0.1
  done
  _server_failed "$dir" "answered /readyz with $code for 30 s"
}

_server_failed() {
  echo "$(basename "$0"): the server ($SERVER_BIN, data in $1/data) $2:" >&2
  tail -20 "$1/err" >&2 2>/dev/null || true
  exit 3
}

server_stop() {
  local pid=$1 i deadline=$((SECONDS + 60))
  kill -"${2:-TERM}" "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.05; done
  SERVER_EXIT=0
  if kill -0 "$pid" 2>/dev/null; then
    echo "$(basename "$0"): server $pid still running 60 s after SIG${2:-TERM}: killed" >&2
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    SERVER_EXIT=hung
  else
    wait "$pid" 2>/dev/null || SERVER_EXIT=$?
  fi
  for i in "${!_RS_SERVERS[@]}"; do
    [ "${_RS_SERVERS[$i]}" != "$pid" ] || unset '_RS_SERVERS[i]'
  done
  return 0
}

_rs_stop_all() {
  local p _ alive
  [ ${#_RS_SERVERS[@]} -gt 0 ] || return 0
  for p in "${_RS_SERVERS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for _ in $(seq 1 50); do
    alive=0
    for p in "${_RS_SERVERS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 1 ] || break
    sleep 0.1
  done
  for p in "${_RS_SERVERS[@]}"; do
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  _RS_SERVERS=()
}

_rs_exit() {
  EXIT_STATUS=$?
  trap - EXIT
  local i
  for ((i = ${#_RS_AT_EXIT[@]} - 1; i >= 0; i--)); do eval "${_RS_AT_EXIT[$i]}" || true; done
  _rs_stop_all
  if [ -n "$WORK" ]; then
    if [ "${KEEP_WORK:-0}" = 1 ]; then echo "$(basename "$0"): kept $WORK" >&2; else rm -rf "$WORK"; fi
  fi
  exit "$EXIT_STATUS"
}
trap _rs_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# N distinct free ports for peer listeners, below Linux's ephemeral range
# (32768 up), which the nodes' own `--listen 127.0.0.1:0` draws from: a
# port from that range could go to a node's HTTP listener as well, and the
# two (both SO_REUSEPORT) would split connections.
peer_ports() {
  python3 -c 'import sys; sys.dont_write_bytecode = True; sys.path.insert(0, sys.argv[1]); import cell
print(" ".join(map(str, cell.peer_ports(int(sys.argv[2]), int(sys.argv[3])))))' \
    "$(dirname "${BASH_SOURCE[0]}")" "$1" "${2:-1}"
}

CELL_URL=("" "" "" "")
CELL_PID=("" "" "" "")
cell_start() {
  local dir=$1 voters="" id ports
  shift
  mkdir -p "$dir"
  head -c 32 /dev/urandom | base64 >"$dir/secret"
  chmod 600 "$dir/secret"
  read -r -a ports <<<"$(peer_ports 3 "${CELL_SHARDS:-1}")"
  for id in 1 2 3; do voters="$voters${voters:+,}$id@127.0.0.1:${ports[id - 1]}"; done
  for id in 1 2 3; do
    server_start "$dir/node$id" 0 --shards "${CELL_SHARDS:-1}" --no-pin --node-id "$id" --cell "$voters" \
      --cell-secret-file "$dir/secret" "$@"
    CELL_URL[id]=$SERVER_URL CELL_PID[id]=$SERVER_PID
  done
  for _ in $(seq 1 300); do
    _cell_settled && return 0
    sleep 0.1
  done
  for id in 1 2 3; do echo "node $id /leaderz: $(curl -s -m 2 "${CELL_URL[id]}/leaderz")" >&2; done
  echo "cell_start: node 1 does not lead, known to the others, after 30 s" >&2
  exit 3
}

_cell_settled() {
  [ "$(curl -s -o /dev/null -m 2 -w '%{http_code}' "${CELL_URL[1]}/leaderz" || true)" = 200 ] || return 1
  curl -s -m 2 "${CELL_URL[2]}/leaderz" | grep -q "leader is node 1" || return 1
  curl -s -m 2 "${CELL_URL[3]}/leaderz" | grep -q "leader is node 1"
}
