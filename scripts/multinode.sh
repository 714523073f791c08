#!/usr/bin/env bash
# Many nodes behind a consistent-hashing proxy, for real: three ringstream
# release servers (each its own data directory and loopback port, 2 shards,
# unpinned, 500 ms long-poll timeout) behind HAProxy 2.6.12 (Debian's
# package, unpacked without root by scripts/lib/haproxy.sh) running
# docs/deploy/haproxy.cfg, rendered for those ports through the environment
# variables the file reads. Checks, each failing the script loudly:
#
#   1. routing: the proxy's own /healthz, /readyz, /metrics answers; 30
#      buckets with a stream each (/ds) and 10 /v1 streams in buckets of
#      their own, created through the proxy, spread over all three nodes:
#      each bucket and each stream exists on exactly one node (a direct GET
#      to each node: 200 on one, 404 on the other two), on the node of its
#      bucket, byte for byte; every node's /metrics agrees (buckets created,
#      streams held);
#   2. the official conformance suite through the proxy
#      (scripts/conformance.sh --url);
#   3. the official TypeScript client through the proxy
#      (scripts/ts-client-demo.sh --url, without a token);
#   4. failures: node 2 killed with SIGKILL, node 3 stopped with SIGTERM,
#      one after the other: a long-poll in flight on the killed node gets
#      HAProxy's 502; requests for their buckets get HAProxy's 503 (at once,
#      or 502 on a connection the crash closed; and after the health check
#      marks the node DOWN, with Retry-After); a long-poll in flight on the
#      node stopped with SIGTERM gets the node's own 204 (drain); a write
#      for them creates nothing anywhere, the other nodes' buckets are read
#      and written as before; restarted on the same data directory and port,
#      the node is UP again and every stream reads back byte for byte;
#   5. adding a fourth node as docs/operations.md says: a preview proxy with
#      the four-node configuration shows the buckets that move (only to the
#      new node, about 1/4), their streams are copied to it, the proxy
#      switched, everything reads back, the old copies are deleted.
#
# Usage: scripts/multinode.sh [--keep]
#   --keep   keep the work directory (logs, data, the nodes' output)
# Environment:
#   RINGSTREAM_BIN            use this server binary instead of building one
#   RINGSTREAM_HAPROXY_CACHE  where haproxy is unpacked (default ~/.cache/ringstream-haproxy)
#   RINGSTREAM_NODE_CACHE     where the pinned npm packages live (scripts/lib/node-deps.sh)
#   MULTINODE_SKIP_SUITES=1   skip checks 2 and 3 (the conformance suite and the TS client)
#   MULTINODE_HAPROXY_CFG     test this HAProxy configuration instead of
#                             docs/deploy/haproxy.cfg (an edited copy of it)
# Prints "multinode: N checks passed" at the end; exits non-zero on the
# first failed check, with the logs of the proxy and the nodes.
set -euo pipefail

KEEP=0
for a in "$@"; do
  case "$a" in
    --keep) KEEP=1 ;;
    -h|--help) sed -n '2,/^set /{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $a" >&2; exit 2 ;;
  esac
done

cd "$(dirname "$0")/.."
root="$PWD"
t_start=$(date +%s)
. scripts/lib/haproxy.sh
. scripts/lib/server.sh
haproxy_install
server_binary

work_dir multinode
work=$WORK
KEEP_WORK=$KEEP
mkdir -p "$work/run" "$work/expect"
declare -a node_pid=("" "" "" "" "") node_port=("" "" "" "" "")
hap_pids=()
passed=0
failed=0

show_logs() {
  local i
  for i in 1 2 3 4; do
    [ -n "${node_port[$i]}" ] || continue
    echo "--- node $i (port ${node_port[$i]}) stderr, last lines:" >&2
    tail -15 "$work/n$i/err" >&2 2>/dev/null || true
  done
  echo "--- haproxy, last lines:" >&2
  tail -30 "$work/haproxy.log" >&2 2>/dev/null || true
}
# At exit (scripts/lib/server.sh), before the work directory goes.
cleanup() {
  local i
  if [ "$EXIT_STATUS" != 0 ] && [ "$failed" = 0 ]; then show_logs; fi
  for i in 1 2 3 4; do
    [ -z "${node_pid[$i]}" ] || server_stop "${node_pid[$i]}" KILL
  done
  for i in "${hap_pids[@]}"; do kill "$i" 2>/dev/null || true; wait "$i" 2>/dev/null || true; done
}
at_exit cleanup

fail() { failed=1; echo "multinode: FAIL: $*" >&2; show_logs; exit 1; }
ok() { passed=$((passed + 1)); }
say() { echo "multinode: $*"; }

# --- the nodes -----------------------------------------------------------------
# start_node I: starts node I on its port (a free one the first time), data
# in $work/nI/data, and waits until it is ready (scripts/lib/server.sh).
start_node() {
  local i=$1
  server_start "$work/n$i" "${node_port[$i]:-0}" "${SERVER_TEST_FLAGS[@]}" --long-poll-timeout-ms 500
  node_pid[i]=$SERVER_PID node_port[i]=$SERVER_PORT
}
node_url() { echo "http://127.0.0.1:${node_port[$1]}"; }

for i in 1 2 3; do start_node "$i"; done
say "nodes on ports ${node_port[1]}, ${node_port[2]}, ${node_port[3]}"

# --- the proxy -------------------------------------------------------------------
cfg="${MULTINODE_HAPROXY_CFG:-$root/docs/deploy/haproxy.cfg}"
export RINGSTREAM_PROXY_RUN="$work/run" RINGSTREAM_PROXY_MAXCONN=2000
export RINGSTREAM_NODE1="127.0.0.1:${node_port[1]}" RINGSTREAM_NODE2="127.0.0.1:${node_port[2]}" RINGSTREAM_NODE3="127.0.0.1:${node_port[3]}"
# start_proxy CFG [PORT STATS_PORT]: starts haproxy on CFG, on the given
# ports or free ones (tried up to 3 times), and waits for its stats page.
# Sets $PROXY_PID, $PROXY_PORT, $STATS_PORT.
start_proxy() {
  local c=$1
  "$HAPROXY" -c -q -f "$c" || fail "haproxy -c rejects $c"
  for _ in 1 2 3; do
    PROXY_PORT=${2:-$(free_port)}; STATS_PORT=${3:-$(free_port)}
    RINGSTREAM_PROXY_BIND="127.0.0.1:$PROXY_PORT" RINGSTREAM_PROXY_STATS="127.0.0.1:$STATS_PORT" \
      "$HAPROXY" -f "$c" -db >>"$work/haproxy.log" 2>&1 &
    PROXY_PID=$!
    hap_pids+=("$PROXY_PID")
    for _ in $(seq 1 100); do
      curl -s -o /dev/null -m 1 "http://127.0.0.1:$STATS_PORT/stats" && break
      kill -0 "$PROXY_PID" 2>/dev/null || break
      sleep 0.05
    done
    kill -0 "$PROXY_PID" 2>/dev/null && return 0
    wait "$PROXY_PID" 2>/dev/null || true
  done
  fail "haproxy did not start on $c"
}
stop_proxy() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }
start_proxy "$cfg"
hap_pid=$PROXY_PID proxy_port=$PROXY_PORT stats_port=$STATS_PORT
P="http://127.0.0.1:$proxy_port"
say "haproxy $("$HAPROXY" -v | head -1 | awk '{print $3}') on port $proxy_port (stats on $stats_port)"

# node_state I [STATS_PORT]: the state the stats page gives nodeI/rsI (UP,
# DOWN, "UP 1/2", ...).
node_state() {
  curl -s -m 2 "http://127.0.0.1:${2:-$stats_port}/stats;csv" | awk -F, -v px="node$1" -v sv="rs$1" '$1 == px && $2 == sv {print $18}'
}
# wait_state I STATE SECONDS [STATS_PORT]
wait_state() {
  local i=$1 want=$2 n=$(( $3 * 10 )) s=""
  for _ in $(seq 1 "$n"); do
    s="$(node_state "$i" "${4:-}")"
    [ "$s" = "$want" ] && return 0
    sleep 0.1
  done
  fail "node $i is '$s' on the proxy's stats page after $3 s, expected $want"
}
for i in 1 2 3; do wait_state "$i" UP 20; done
ok; say "all three nodes UP on the stats page"

# --- HTTP helpers ----------------------------------------------------------------
# req METHOD URL [curl args...]: the status code; the body in $work/body,
# the response head in $work/head.
req() {
  local m=$1 u=$2; shift 2
  curl -s -m 10 -D "$work/head.raw" -o "$work/body" -w '%{http_code}' -X "$m" "$@" "$u" || echo "curl-error-$?"
  tr -d '\r' <"$work/head.raw" >"$work/head" 2>/dev/null || true
}
# expect STATUS WHAT METHOD URL [curl args...]
expect() {
  local want=$1 what=$2 got; shift 2
  got="$(req "$@")"
  [ "$got" = "$want" ] || fail "$what: $1 $2 answered $got, expected $want (body: $(head -c 300 "$work/body" 2>/dev/null | tr '\n' ' '))"
  ok
}
body_is() { grep -qF -- "$1" "$work/body" || fail "$2: body '$(head -c 200 "$work/body" | tr '\n' ' ')' lacks '$1'"; ok; }
# metric I NAME [LABEL-FILTER]: the sum over shards of NAME on node I.
metric() {
  curl -s -m 5 "$(node_url "$1")/metrics" | awk -v n="$2" -v f="${3:-}" '
    $1 ~ "^"n"({|$)" && (f == "" || index($1, f)) { s += $2 } END { printf "%d\n", s }'
}

# --- 1. routing ------------------------------------------------------------------
expect 200 "the proxy's /healthz" GET "$P/healthz"; body_is "ok: 3 of 3 nodes up" "/healthz"
expect 200 "the proxy's /readyz" GET "$P/readyz"; body_is "ready: 3 of 3 nodes up" "/readyz"
expect 404 "/metrics through the proxy" GET "$P/metrics"; body_is "scrape each node directly" "/metrics"
# Not bucket-scoped: any node answers, and answers the same.
expect 404 "an unknown path" GET "$P/nothing-here"
expect 400 "an empty /ds bucket" PUT "$P/ds/"

octet=(-H 'Content-Type: application/octet-stream')
# put_data FILE BYTES: random bytes.
put_data() { head -c "$2" /dev/urandom >"$1"; }
buckets=()
for n in $(seq -w 0 29); do buckets+=("mnb-$n"); done
for b in "${buckets[@]}"; do
  expect 201 "create bucket $b" PUT "$P/ds/$b"
  expect 201 "create stream $b/s" PUT "$P/ds/$b/s" "${octet[@]}"
  put_data "$work/a" $(( 100 + RANDOM % 4000 )); put_data "$work/b" $(( 1 + RANDOM % 2000 ))
  expect 200 "append to $b/s" POST "$P/ds/$b/s" "${octet[@]}" --data-binary @"$work/a"
  expect 200 "append to $b/s" POST "$P/ds/$b/s" "${octet[@]}" --data-binary @"$work/b"
  cat "$work/a" "$work/b" >"$work/expect/ds-$b"
done
v1s=()
for n in $(seq -w 0 9); do v1s+=("mnv-$n"); done
for b in "${v1s[@]}"; do
  put_data "$work/a" $(( 1 + RANDOM % 3000 ))
  expect 201 "create /v1/stream/$b/log" PUT "$P/v1/stream/$b/log" "${octet[@]}"
  expect 204 "append to /v1/stream/$b/log" POST "$P/v1/stream/$b/log" "${octet[@]}" --data-binary @"$work/a"
  cp "$work/a" "$work/expect/v1-$b"
done
# A one-segment /v1 path is a stream of the bucket _default.
single="mn-single-$$"
put_data "$work/expect/v1-single" 777
expect 201 "create /v1/stream/$single" PUT "$P/v1/stream/$single" "${octet[@]}" --data-binary @"$work/expect/v1-single"
expect 200 "read /v1/stream/$single" GET "$P/v1/stream/$single?offset=-1"
cmp -s "$work/body" "$work/expect/v1-single" || fail "/v1/stream/$single read back differs"; ok

# owner_of PATH [FILE]: sets $OWNER to the one node answering 200 to a
# direct GET of PATH (404 on the others), byte for byte equal to FILE when
# given.
owner_of() {
  local path=$1 file=${2:-} i code owner="" others=""
  for i in 1 2 3; do
    code="$(req GET "$(node_url "$i")$path")"
    case "$code" in
      200) [ -z "$owner" ] || fail "$path exists on node $owner and on node $i"
           owner=$i
           if [ -n "$file" ]; then cmp -s "$work/body" "$file" || fail "$path on node $i differs from what was written"; fi ;;
      404) others="$others$i" ;;
      *) fail "direct GET $path on node $i answered $code" ;;
    esac
  done
  [ -n "$owner" ] || fail "$path exists on no node"
  ok
  OWNER=$owner
}
declare -A owner old_owner
declare -a nbuckets=(0 0 0 0) nstreams=(0 0 0 0)
for b in "${buckets[@]}"; do
  owner_of "/ds/$b"; o=$OWNER
  owner_of "/ds/$b/s?offset=-1" "$work/expect/ds-$b"; s=$OWNER
  [ "$o" = "$s" ] || fail "bucket $b is on node $o but its stream on node $s"
  owner[$b]=$o
  nbuckets[o]=$(( nbuckets[o] + 1 )); nstreams[o]=$(( nstreams[o] + 1 ))
done
for b in "${v1s[@]}"; do
  owner_of "/v1/stream/$b/log?offset=-1" "$work/expect/v1-$b"; o=$OWNER
  owner[$b]=$o; nstreams[o]=$(( nstreams[o] + 1 ))
done
owner_of "/v1/stream/$single?offset=-1" "$work/expect/v1-single"; o=$OWNER
owner[_default]=$o; nstreams[o]=$(( nstreams[o] + 1 ))
for i in 1 2 3; do
  [ "${nbuckets[$i]}" -gt 0 ] || fail "node $i got none of the 30 buckets"
  ok
  got="$(metric "$i" ringstream_http_requests_total 'route="ds_bucket",status="201"')"
  [ "$got" = "${nbuckets[$i]}" ] || fail "node $i's /metrics counts $got bucket creates, the direct GETs found ${nbuckets[$i]} buckets"
  ok
  got="$(metric "$i" ringstream_streams)"
  [ "$got" = "${nstreams[$i]}" ] || fail "node $i's /metrics says $got streams, the direct GETs found ${nstreams[$i]}"
  ok
done
say "routing: /ds buckets per node ${nbuckets[1]}/${nbuckets[2]}/${nbuckets[3]}, streams per node ${nstreams[1]}/${nstreams[2]}/${nstreams[3]} (each on exactly one node, byte-exact; /metrics agrees); _default is on node ${owner[_default]}"

# --- 2 and 3. the official suites through the proxy ---------------------------------
if [ "${MULTINODE_SKIP_SUITES:-0}" != 1 ]; then
  before=(0 "$(metric 1 ringstream_streams)" "$(metric 2 ringstream_streams)" "$(metric 3 ringstream_streams)")
  scripts/conformance.sh --url "$P" || fail "the conformance suite through the proxy"
  ok
  after=(0 "$(metric 1 ringstream_streams)" "$(metric 2 ringstream_streams)" "$(metric 3 ringstream_streams)")
  say "conformance streams created per node: $(( after[1] - before[1] ))/$(( after[2] - before[2] ))/$(( after[3] - before[3] )) (its paths are one segment: bucket _default, node ${owner[_default]})"
  for i in 1 2 3; do
    if [ "$i" = "${owner[_default]}" ]; then
      [ $(( after[i] - before[i] )) -gt 100 ] || fail "the conformance suite created only $(( after[i] - before[i] )) streams on node $i, the node of _default"
    else
      [ "${after[$i]}" = "${before[$i]}" ] || fail "the conformance suite (one-segment paths, bucket _default on node ${owner[_default]}) created streams on node $i"
    fi
    ok
  done
  scripts/ts-client-demo.sh --url "$P" || fail "the TypeScript client through the proxy"
  ok
fi

# --- 4. a node fails -------------------------------------------------------------------
# The bodies of the proxy's own 503 and 502 (http-error in the configuration).
proxy_503="ringstream proxy: the node that holds this bucket is unavailable"
proxy_502="ringstream proxy: the node that holds this bucket failed before answering"
# read_all DOWN: every stream through the proxy; those of node DOWN (0:
# none) must get 503 from HAProxy, the others 200 and exactly what was
# written. Sets $READ to a summary.
read_all() {
  local down=$1 b code n503=0 n200=0
  for b in "${buckets[@]}" "${v1s[@]}"; do
    local path file
    case "$b" in mnb-*) path="/ds/$b/s?offset=-1"; file="$work/expect/ds-$b" ;; *) path="/v1/stream/$b/log?offset=-1"; file="$work/expect/v1-$b" ;; esac
    code="$(req GET "$P$path")"
    if [ "${owner[$b]}" = "$down" ]; then
      [ "$code" = 503 ] || fail "node $down is down, yet GET $path through the proxy answered $code, expected HAProxy's 503"
      grep -qxF "$proxy_503" "$work/body" || fail "the 503 for $path is not HAProxy's: $(head -c 200 "$work/body")"
      grep -qix "Retry-After: 2" "$work/head" || fail "the proxy's 503 for $path has no Retry-After: 2"
      n503=$((n503 + 1))
    else
      [ "$code" = 200 ] || fail "GET $path (node ${owner[$b]}) through the proxy answered $code with node $down down"
      cmp -s "$work/body" "$file" || fail "GET $path (node ${owner[$b]}) through the proxy differs from what was written"
      n200=$((n200 + 1))
    fi
    ok
  done
  READ="$n200 read back byte-exact, $n503 answered 503"
}
# a bucket of node I, and one of another node
bucket_on() { local b; for b in "${buckets[@]}"; do if [ "${owner[$b]}" = "$1" ]; then echo "$b"; return; fi; done; }
bucket_not_on() { local b; for b in "${buckets[@]}"; do if [ "${owner[$b]}" != "$1" ]; then echo "$b"; return; fi; done; }

# start_longpoll I BUCKET: a long-poll at the tail of BUCKET/s through the
# proxy, in the background ($LP; status in $work/lp.code), once node I
# counts it among its live readers (the 500 ms timeout leaves time to act).
start_longpoll() {
  local i=$1 b=$2 live=0 _try
  for _try in 1 2 3 4 5; do
    curl -s -m 10 -o "$work/lp.body" -w '%{http_code}' "$P/ds/$b/s?offset=now&live=long-poll" >"$work/lp.code" &
    LP=$!
    for _ in $(seq 1 40); do
      live="$(metric "$i" ringstream_live_readers 'kind="long_poll"')"
      [ "$live" -ge 1 ] && return 0
      sleep 0.01
    done
    wait "$LP" || true   # it ended (204) before it was seen: again
  done
  fail "no long-poll seen on node $i in 5 tries"
}
outage() {
  local victim=$1 how=$2 vb other t0 code quick
  vb="$(bucket_on "$victim")"; other="$(bucket_not_on "$victim")"
  t0=$(date +%s.%N)
  if [ "$how" = kill ]; then
    # A long-poll through the proxy, waiting on the node when it dies: the
    # request was sent and no answer will come, so HAProxy answers 502
    # (not another node).
    start_longpoll "$victim" "$vb"
    server_stop "${node_pid[$victim]}" KILL
    wait "$LP" || true
    [ "$(cat "$work/lp.code")" = 502 ] || fail "a long-poll in flight on node $victim when it was killed answered $(cat "$work/lp.code"), expected HAProxy's 502"
    grep -qxF "$proxy_502" "$work/lp.body" || fail "the 502 of the long-poll is not HAProxy's: $(head -c 200 "$work/lp.body")"
    ok
    # Still UP on the stats page (the next check is up to 2 s away), and no
    # retry, no redispatch: a request that opens a new connection to the
    # node is refused and gets HAProxy's 503; one sent over an idle
    # connection the proxy still held to it (the crash closed it an instant
    # before) gets HAProxy's 502. Never another node's answer.
    quick=""
    for _ in 1 2 3; do
      code="$(req GET "$P/ds/$vb/s?offset=-1")"
      case "$code" in
        503) grep -qxF "$proxy_503" "$work/body" || fail "a 503 just after SIGKILL that is not HAProxy's: $(head -c 200 "$work/body")" ;;
        502) grep -qxF "$proxy_502" "$work/body" || fail "a 502 just after SIGKILL that is not HAProxy's: $(head -c 200 "$work/body")" ;;
        *) fail "GET /ds/$vb/s just after node $victim's SIGKILL answered $code, expected HAProxy's 503 (or 502)" ;;
      esac
      ok; quick="$quick$code "
    done
    quick="$quick(the stats page said '$(node_state "$victim")')"
  else
    # A graceful stop answers the long-polls waiting on it (204, as at
    # their timeout) before it exits: through the proxy as well.
    start_longpoll "$victim" "$vb"
    server_stop "${node_pid[$victim]}" TERM
    code=$SERVER_EXIT
    [ "$code" = 0 ] || fail "node $victim exited $code after SIGTERM"
    ok
    wait "$LP" || true
    [ "$(cat "$work/lp.code")" = 204 ] || fail "a long-poll in flight on node $victim during its SIGTERM answered $(cat "$work/lp.code"), expected the node's 204"
    ok
  fi
  node_pid[victim]=""
  wait_state "$victim" DOWN 15
  ok
  if [ "$how" = kill ]; then say "node $victim killed: a long-poll in flight on it got the proxy's 502; the requests just after answered $quick"
  else say "node $victim stopped: a long-poll in flight on it got the node's 204 (drain), exit status 0"; fi
  say "node $victim stopped ($how): DOWN on the stats page after $(printf '%.1f' "$(echo "$(date +%s.%N) - $t0" | bc)") s"
  expect 200 "the proxy's /readyz with one node down" GET "$P/readyz"; body_is "ready: 2 of 3 nodes up" "/readyz"
  read_all "$victim"; say "node $victim down: $READ"
  # Writes for the down node's buckets are refused, and reach nobody else.
  expect 503 "create a stream in $vb (node $victim down)" PUT "$P/ds/$vb/new-$how" "${octet[@]}"
  expect 503 "append to $vb/s (node $victim down)" POST "$P/ds/$vb/s" "${octet[@]}" --data-binary x
  expect 503 "HEAD $vb/s (node $victim down)" HEAD "$P/ds/$vb/s" -I
  local i
  for i in 1 2 3; do
    [ "$i" = "$victim" ] && continue
    expect 404 "node $i must not have $vb/new-$how" GET "$(node_url "$i")/ds/$vb/new-$how?offset=-1"
  done
  # The other nodes take writes meanwhile.
  put_data "$work/a" 1234
  expect 200 "append to $other/s (node ${owner[$other]}) while node $victim is down" POST "$P/ds/$other/s" "${octet[@]}" --data-binary @"$work/a"
  cat "$work/a" >>"$work/expect/ds-$other"
  # Back on the same data directory and port.
  t0=$(date +%s.%N)
  start_node "$victim"
  wait_state "$victim" UP 15
  ok
  say "node $victim restarted: UP on the stats page after $(printf '%.1f' "$(echo "$(date +%s.%N) - $t0" | bc)") s"
  read_all 0; say "node $victim back: $READ"
  expect 404 "$vb/new-$how, refused during the outage, on its own node" GET "$P/ds/$vb/new-$how?offset=-1"
  expect 200 "GET /v1/stream/$single after node $victim's restart" GET "$P/v1/stream/$single?offset=-1"
  cmp -s "$work/body" "$work/expect/v1-single" || fail "/v1/stream/$single differs after node $victim's restart"; ok
}
outage 2 kill
outage 3 term

# --- 5. adding a node ------------------------------------------------------------------
# The procedure of docs/operations.md ("Adding a node"), for real: node 4
# starts empty; a second proxy with the four-node configuration (a preview,
# not yet serving clients) shows which buckets move: those it sends to node
# 4 (404 there, nothing copied yet). Consistent hashing moves only buckets
# to the new node, about 1/4 of them. Their streams are copied to node 4
# (read from the old node, created with the same content type and bytes),
# the proxy is switched to the four-node configuration, everything reads
# back through it, and the old copies are deleted.
start_node 4
export RINGSTREAM_NODE4="127.0.0.1:${node_port[4]}"
cfg4="$work/haproxy-4-nodes.cfg"
# The template with a fourth node: a ring server with the next id, a
# health-checked per-node proxy, an anynode entry.
python3 - "$cfg" "$cfg4" <<'PY'
import re, sys
src, dst = sys.argv[1], sys.argv[2]
t = open(src).read()
ring = re.search(r'^    server rs3 "unix@[^\n]*\n', t, re.M)
t = t[:ring.end()] + ring.group(0).replace("node3", "node4").replace("rs3", "rs4").replace("id 3", "id 4") + t[ring.end():]
node = re.search(r'^listen node3\n(?:    [^\n]*\n)+', t, re.M)
t = t[:node.end()] + "\n" + node.group(0).replace("node3", "node4").replace("rs3", "rs4").replace("NODE3", "NODE4") + t[node.end():]
anyn = re.search(r'^    server rs3 [^\n]*track node3/rs3\n', t, re.M)
t = t[:anyn.end()] + anyn.group(0).replace("node3", "node4").replace("rs3", "rs4").replace("NODE3", "NODE4") + t[anyn.end():]
t = t.replace(" of 3 nodes up", " of 4 nodes up")
open(dst, "w").write(t)
PY
mkdir -p "$work/run4"
RINGSTREAM_PROXY_RUN="$work/run4" start_proxy "$cfg4"
preview_pid=$PROXY_PID preview="http://127.0.0.1:$PROXY_PORT" preview_stats=$STATS_PORT
for i in 1 2 3 4; do wait_state "$i" UP 20 "$preview_stats"; done
ok
# tracked streams: KEY PATH EXPECTED-FILE
tracked() {
  local b
  for b in "${buckets[@]}"; do echo "$b /ds/$b/s ds-$b"; done
  for b in "${v1s[@]}"; do echo "$b /v1/stream/$b/log v1-$b"; done
  echo "_default /v1/stream/$single v1-single"
}
moved=() stayed=0
while read -r key path file; do
  code="$(req GET "$preview$path?offset=-1")"
  case "$code" in
    200) cmp -s "$work/body" "$work/expect/$file" || fail "the preview proxy reads $path differently"; stayed=$((stayed + 1)) ;;
    404) moved+=("$key $path $file") ;;
    *) fail "the preview proxy answered $code for $path" ;;
  esac
  ok
done < <(tracked)
got="$(metric 4 ringstream_http_requests_total 'status="404"')"
[ "$got" = "${#moved[@]}" ] || fail "node 4 answered $got 404s, but ${#moved[@]} buckets moved: some moved between old nodes"
ok
{ [ "${#moved[@]}" -ge 1 ] && [ "${#moved[@]}" -le 20 ]; } || fail "${#moved[@]} of 41 buckets move to the fourth node, expected about 1/4"
ok
stop_proxy "$preview_pid"
say "adding node 4: ${#moved[@]} of $(( ${#moved[@]} + stayed )) buckets move to it, all to node 4 (none between old nodes)"
# Copy: writes to these buckets would have to stop now (none here).
for m in "${moved[@]}"; do
  read -r key path file <<<"$m"
  from="$(node_url "${owner[$key]}")" to="$(node_url 4)"
  curl -s -m 10 -D "$work/head" -o "$work/copy" "$from$path?offset=-1" >/dev/null
  ctype="$(awk -F': *' 'tolower($1) == "content-type" { sub(/\r$/, "", $2); print $2 }' "$work/head")"
  tail_off="$(awk -F': *' 'tolower($1) == "stream-next-offset" { sub(/\r$/, "", $2); print $2 }' "$work/head")"
  grep -qi '^stream-up-to-date: true' "$work/head" || fail "$path did not read whole in one response (copy in pieces)"
  case "$path" in /ds/*) expect 201 "create bucket $key on node 4" PUT "$to/ds/$key" ;; esac
  curl -s -m 10 -D "$work/head" -o /dev/null -X PUT -H "Content-Type: $ctype" --data-binary @"$work/copy" "$to$path" >/dev/null
  grep -q '^HTTP/1.1 201' "$work/head" || fail "creating the copy of $path on node 4: $(head -1 "$work/head")"
  grep -qi "^stream-next-offset: $tail_off" "$work/head" || fail "the copy of $path ends at another offset than $tail_off"
  ok
done
# Switch the proxy to four nodes (a restart here; a reload in production).
stop_proxy "$hap_pid"
start_proxy "$cfg4" "$proxy_port" "$stats_port"
hap_pid=$PROXY_PID
for i in 1 2 3 4; do wait_state "$i" UP 20; done
ok
for m in "${moved[@]}"; do read -r key _ <<<"$m"; old_owner[$key]=${owner[$key]}; owner[$key]=4; done
read_all 0
expect 200 "GET /v1/stream/$single with four nodes" GET "$P/v1/stream/$single?offset=-1"
cmp -s "$work/body" "$work/expect/v1-single" || fail "/v1/stream/$single differs with four nodes"; ok
# Delete the old copies, then everything still reads through the proxy.
for m in "${moved[@]}"; do
  read -r key path _ <<<"$m"
  from="$(node_url "${old_owner[$key]}")"
  expect 204 "delete the old copy of $path" DELETE "$from$path"
  case "$path" in /ds/*) expect 204 "delete the old bucket $key" DELETE "$from/ds/$key" ;; esac
  expect 404 "the old copy of $path is gone" GET "$from$path?offset=-1"
done
read_all 0
say "four nodes: $READ through the proxy after copying and deleting the old copies"

say "$passed checks passed, 0 failed ($(( $(date +%s) - t_start )) s)"
