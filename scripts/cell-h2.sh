#!/usr/bin/env bash
# A replicated cell behind HAProxy with TLS and HTTP/2, for real: three
# ringstream release servers (`--shards 1`, `--node-id`, `--cell`, a
# `--cell-secret-file` of mode 600, each its own data directory, with
# `--trust-proxy`) behind HAProxy 2.6.12 (Debian's package, unpacked without
# root by scripts/lib/haproxy.sh) running docs/deploy/haproxy-cell.cfg as
# committed, rendered only through its variables (ports, node addresses,
# the certificate: a self-signed one made here with openssl). Checks, each
# failing the script loudly:
#
#   1. the proxy: `haproxy -vv` has OpenSSL and the h2 mux; on the stats
#      page the leader (found by each node's /leaderz) is the only server UP
#      in cell_leader, every node UP in cell_any; the proxy's own /healthz,
#      /readyz and /leaderz answers;
#   2. curl --http2 over TLS: the negotiated protocol is HTTP/2; a bucket and
#      a JSON stream created (the Location is https://, so the nodes saw
#      X-Forwarded-Proto), 20 appends, the stream read back exactly; every
#      write reached the leader directly: between before and after, the
#      leader's cell_leader server on the stats page counts all of them and
#      the followers' none, the followers' /metrics count no /ds
#      request and no request forwarded to the leader, the leader's none
#      from a follower (and one append sent straight to a follower moves
#      its forwarded counter: the check can see forwarding);
#   3. headless Chromium (Debian's chromium, pinned, scripts/lib/chromium.sh)
#      opens scripts/browser/sse-readers.html, stored in a stream and served
#      through the same origin: 10 EventSource readers (`live=sse`, offset
#      -1) on one stream at once, then 20 appends by fetch POSTs; the page
#      appends its verdict to a result stream, which the script reads: the
#      page and the appends went over h2, all 10 readers opened and each saw
#      every append, in order; the readers were spread over all three nodes
#      (at least 3 requests to each through cell_any), so followers' live
#      readers are woken by the appends they apply;
#   4. the same page with Chromium restricted to HTTP/1.1 (--disable-http2,
#      same proxy): the page loads over http/1.1 and at most 6 readers open
#      (the browser's connection limit per origin): without HTTP/2 check 3
#      would fail, so it shows multiplexing, not luck;
#   5. failover: the leader killed (SIGKILL), appends through the proxy
#      retried every 100 ms get only 502/503 with Retry-After (or, for one
#      sent on the proxy's connection to the dying node, its HTTP/2 stream
#      reset) until one is acknowledged (within 100 tries); the new leader (by /leaderz) ends up
#      alone UP in cell_leader, the dead node DOWN in both backends, and it
#      takes the next 5 appends directly (its cell_leader sessions).
#
# When Chromium cannot be unpacked (no apt, the pinned .deb gone), it is
# installed with apt-get at the pinned version if this runs as root; if not,
# checks 3 and 4 are SKIPPED with a loud message (the rest still runs).
#
# Usage: scripts/cell-h2.sh [--keep]
#   --keep   keep the work directory (logs, data, the browser's output)
# Environment:
#   RINGSTREAM_BIN             use this server binary instead of building one
#   RINGSTREAM_HAPROXY_CACHE   where haproxy is unpacked (default ~/.cache/ringstream-haproxy)
#   RINGSTREAM_CHROMIUM_CACHE  where chromium is unpacked (default ~/.cache/ringstream-chromium)
#   CELL_H2_HAPROXY_CFG        test this HAProxy configuration instead of
#                              docs/deploy/haproxy-cell.cfg (an edited copy)
# Prints "cell-h2: N checks passed" at the end; exits non-zero on the first
# failed check, with the logs of the proxy and the nodes.
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
. scripts/lib/chromium.sh
. scripts/lib/server.sh

passed=0
failed=0
say() { echo "cell-h2: $*"; }
ok() { passed=$((passed + 1)); }
elapsed() { echo "$(( $(date +%s) - t_start )) s"; }

haproxy_install
vv="$("$HAPROXY" -vv 2>&1)"
grep -q '^Built with OpenSSL version' <<<"$vv" || { echo "cell-h2: FAIL: $HAPROXY -vv shows no OpenSSL" >&2; exit 1; }
grep -Eq '^ +h2 : mode=HTTP +side=FE' <<<"$vv" || { echo "cell-h2: FAIL: $HAPROXY -vv shows no h2 mux for frontends" >&2; exit 1; }
ok

# Chromium: unpacked without root; else installed with apt at the pinned
# version when root; else the browser checks are skipped, loudly.
browser=1
if ! chromium_install; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "unpacking chromium failed; installing chromium=$CHROMIUM_DEB_VERSION with apt-get (root)"
    apt-get install -y -q --no-install-recommends "chromium=$CHROMIUM_DEB_VERSION" "chromium-common=$CHROMIUM_DEB_VERSION" >&2 \
      || { apt-get update -q >&2 && apt-get install -y -q --no-install-recommends "chromium=$CHROMIUM_DEB_VERSION" "chromium-common=$CHROMIUM_DEB_VERSION" >&2; } \
      || { echo "cell-h2: FAIL: cannot install chromium=$CHROMIUM_DEB_VERSION (move CHROMIUM_DEB_VERSION in scripts/lib/chromium.sh)" >&2; exit 1; }
    CHROMIUM=/usr/lib/chromium/chromium
    _chromium_check "$CHROMIUM" >/dev/null || exit 1
  else
    browser=0
    {
      echo "cell-h2: ##################################################################"
      echo "cell-h2: SKIPPED: the browser checks (3 and 4): chromium $CHROMIUM_DEB_VERSION"
      echo "cell-h2: could not be unpacked, and this is not root to apt-get install it."
      echo "cell-h2: ##################################################################"
    } >&2
  fi
fi
[ "$browser" = 0 ] || say "$("$CHROMIUM" --version 2>/dev/null | sed -n 1p) ($CHROMIUM)"

server_binary
work_dir cell-h2
work=$WORK
KEEP_WORK=$KEEP
hap_pid=""
chrome_pgid=""

show_logs() {
  local i
  for i in 1 2 3; do
    echo "--- node $i stderr, last lines:" >&2
    tail -15 "$work/node$i/err" >&2 2>/dev/null || true
  done
  echo "--- haproxy, last lines:" >&2
  tail -30 "$work/haproxy.log" >&2 2>/dev/null || true
}
# At exit (scripts/lib/server.sh), before the nodes are stopped.
cleanup() {
  if [ "$EXIT_STATUS" != 0 ] && [ "$failed" = 0 ]; then show_logs; fi
  [ -z "$chrome_pgid" ] || { kill -TERM -- "-$chrome_pgid" 2>/dev/null || true; }
  [ -z "$hap_pid" ] || { kill "$hap_pid" 2>/dev/null || true; wait "$hap_pid" 2>/dev/null || true; }
}
at_exit cleanup
fail() { failed=1; echo "cell-h2: FAIL: $*" >&2; show_logs; exit 1; }

# --- the cell ---------------------------------------------------------------------
cell_start "$work" --trust-proxy
node_url=("${CELL_URL[@]}") node_pid=("${CELL_PID[@]}")
leader=1 followers=(2 3)
say "cell of 3 nodes (${node_url[1]}, ${node_url[2]}, ${node_url[3]}): node $leader leads ($(elapsed))"

# --- the proxy ------------------------------------------------------------------------
mkdir -p "$work/tls"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
  -subj "/CN=127.0.0.1" -addext "subjectAltName=IP:127.0.0.1" \
  -keyout "$work/tls/key.pem" -out "$work/tls/cert.pem" 2>"$work/tls/openssl.err" \
  || { cat "$work/tls/openssl.err" >&2; fail "openssl could not make a certificate"; }
cat "$work/tls/cert.pem" "$work/tls/key.pem" >"$work/tls/proxy.pem"
chmod 600 "$work/tls/proxy.pem" "$work/tls/key.pem"
cfg="${CELL_H2_HAPROXY_CFG:-$root/docs/deploy/haproxy-cell.cfg}"
export RINGSTREAM_PROXY_CERT="$work/tls/proxy.pem" RINGSTREAM_PROXY_MAXCONN=2000
export RINGSTREAM_NODE1="${node_url[1]#http://}" RINGSTREAM_NODE2="${node_url[2]#http://}" RINGSTREAM_NODE3="${node_url[3]#http://}"
"$HAPROXY" -c -q -f "$cfg" || fail "haproxy -c rejects $cfg"
for _ in 1 2 3; do
  proxy_port=$(free_port) stats_port=$(free_port)
  RINGSTREAM_PROXY_BIND="127.0.0.1:$proxy_port" RINGSTREAM_PROXY_STATS="127.0.0.1:$stats_port" \
    "$HAPROXY" -f "$cfg" -db >>"$work/haproxy.log" 2>&1 &
  hap_pid=$!
  for _ in $(seq 1 100); do
    curl -s -o /dev/null -m 1 "http://127.0.0.1:$stats_port/stats" && break
    kill -0 "$hap_pid" 2>/dev/null || break
    sleep 0.05
  done
  kill -0 "$hap_pid" 2>/dev/null && break
  wait "$hap_pid" 2>/dev/null || true
  hap_pid=""
done
[ -n "$hap_pid" ] || fail "haproxy did not start on $cfg"
P="https://127.0.0.1:$proxy_port"
say "haproxy $("$HAPROXY" -v | sed -n 1p | awk '{print $3}') on $P (stats on $stats_port), $cfg"

# hap_stat PROXY SERVER FIELD: a field of the stats CSV (status: 18, stot: 8).
hap_stat() {
  curl -s -m 2 "http://127.0.0.1:$stats_port/stats;csv" | awk -F, -v px="$1" -v sv="$2" -v f="$3" '$1 == px && $2 == sv {print $f}'
}
# At start HAProxy counts every server UP until its checks fail: wait for
# the leader alone in cell_leader, every node in cell_any.
states() {
  local id s=""
  for id in 1 2 3; do s="$s n$id:$(hap_stat cell_leader "n$id" 18)/$(hap_stat cell_any "n$id" 18)"; done
  echo "$s"
}
# wait_states LEADER DEAD SECONDS: LEADER alone UP in cell_leader, every
# node but DEAD (0: none) UP in cell_any, DEAD down in both.
want_states() {
  local want="" id
  for id in 1 2 3; do
    if [ "$id" = "$2" ]; then want="$want n$id:DOWN/DOWN"
    elif [ "$id" = "$1" ]; then want="$want n$id:UP/UP"
    else want="$want n$id:DOWN/UP"; fi
  done
  echo "$want"
}
wait_states() {
  local want got="" _
  want="$(want_states "$1" "$2")"
  for _ in $(seq 1 $(( $3 * 10 ))); do
    got="$(states)"
    [ "$got" = "$want" ] && { ok; return 0; }
    sleep 0.1
  done
  fail "stats page (cell_leader/cell_any): '$got' after $3 s, expected '$want'"
}
wait_states "$leader" 0 10
say "stats page: cell_leader has only node $leader UP, cell_any all three ($(elapsed))"

# --- HTTP helpers (curl over TLS, HTTP/2 asked for) ----------------------------------------
# req METHOD URL [curl args...]: the status code; the body in $work/body, the
# response head in $work/head, the HTTP version curl used in $work/version.
req() {
  local m=$1 u=$2 out; shift 2
  : >"$work/body"
  out="$(curl -s -k --http2 -m 10 -D "$work/head.raw" -o "$work/body" -w '%{http_code} %{http_version}' -X "$m" "$@" "$u")" \
    || out="curl-error-$? -"
  tr -d '\r' <"$work/head.raw" >"$work/head" 2>/dev/null || true
  echo "${out#* }" >"$work/version"
  echo "${out%% *}"
}
# expect STATUS WHAT METHOD URL [curl args...]: also HTTP/2 for proxy URLs.
expect() {
  local want=$1 what=$2 got; shift 2
  got="$(req "$@")"
  [ "$got" = "$want" ] || fail "$what: $1 $2 answered $got, expected $want (body: $(head -c 300 "$work/body" 2>/dev/null | tr '\n' ' '))"
  case "$2" in
    https://*) [ "$(cat "$work/version")" = 2 ] || fail "$what: $1 $2 went over HTTP/$(cat "$work/version"), expected HTTP/2" ;;
  esac
  ok
}
body_is() { [ "$(cat "$work/body")" = "$1" ] || fail "$2: body '$(head -c 300 "$work/body" | tr '\n' ' ')', expected '$1'"; ok; }
# metric I NAME [LABEL-FILTER]: NAME on node I, summed over its series.
metric() {
  curl -s -m 5 "${node_url[$1]}/metrics" | awk -v n="$2" -v f="${3:-}" '
    $1 ~ "^"n"({|$)" && (f == "" || index($1, f)) { s += $2 } END { printf "%d\n", s }'
}
json=(-H 'Content-Type: application/json')

# --- 1. the proxy's own answers ----------------------------------------------------------
expect 200 "the proxy's /healthz" GET "$P/healthz"; body_is "ok: 3 of 3 nodes ready" "/healthz"
expect 200 "the proxy's /readyz" GET "$P/readyz"; body_is "ready: 3 of 3 nodes ready" "/readyz"
expect 200 "the proxy's /leaderz" GET "$P/leaderz"; body_is "a leader is up" "/leaderz"
expect 404 "/metrics through the proxy" GET "$P/metrics"

# --- 2. curl over HTTP/2: writes go to the leader --------------------------------------------
counters() { # counters I: /ds requests (streams and buckets), forwarded to the leader, from followers
  echo "$(metric "$1" ringstream_http_requests_total 'route="ds_') $(metric "$1" ringstream_cell_forwarded_requests_total 'direction="to_leader"') $(metric "$1" ringstream_cell_forwarded_requests_total 'direction="from_follower"')"
}
declare -a before=("" "" "" "") after=("" "" "" "") hap_before=("" "" "" "")
for id in 1 2 3; do before[id]="$(counters "$id")"; hap_before[id]="$(hap_stat cell_leader "n$id" 8)"; done
bucket="h2-$$"
writes=0
expect 201 "create bucket $bucket" PUT "$P/ds/$bucket"; writes=$((writes + 1))
expect 201 "create stream $bucket/log" PUT "$P/ds/$bucket/log" "${json[@]}"; writes=$((writes + 1))
loc="$(sed -n 's/^location: *//Ip' "$work/head")"
case "$loc" in
  "https://127.0.0.1:$proxy_port/ds/$bucket/log") ok ;;
  *) fail "the create's Location is '$loc', expected https://127.0.0.1:$proxy_port/ds/$bucket/log (X-Forwarded-Proto and --trust-proxy)" ;;
esac
for k in $(seq 0 19); do
  expect 200 "append $k to $bucket/log" POST "$P/ds/$bucket/log" "${json[@]}" --data-binary "{\"k\":$k}"
  writes=$((writes + 1))
done
expected="[$(seq -s, 0 19 | sed 's/\([0-9]*\)/{"k":\1}/g')]"
for id in 1 2 3; do after[id]="$(counters "$id")"; done
# The reads come after the counters: a follower asks the leader for a read
# at its tail, which the forwarded counter would count.
expect 200 "read $bucket/log back" GET "$P/ds/$bucket/log?offset=-1"; body_is "$expected" "$bucket/log read back"
say "HTTP/2 (curl -w %{http_version} = 2): $writes writes (2 creates, 20 appends) and reads through the proxy; the Location is https"
for id in 1 2 3; do
  read -r s0 t0 f0 <<<"${before[$id]}"; read -r s1 t1 f1 <<<"${after[$id]}"
  hap=$(( $(hap_stat cell_leader "n$id" 8) - hap_before[id] ))
  if [ "$id" = "$leader" ]; then
    [ $(( s1 - s0 )) = "$writes" ] || fail "the leader (node $id) answered $(( s1 - s0 )) /ds requests, expected all $writes writes"
    [ "$hap" = "$writes" ] || fail "the stats page counts $hap requests to cell_leader/n$id (the leader), expected $writes"
    [ "$f1" = "$f0" ] || fail "the leader (node $id) got $(( f1 - f0 )) forwarded requests from followers during the writes"
  else
    [ "$s1" = "$s0" ] || fail "follower node $id answered $(( s1 - s0 )) /ds requests during the writes, expected none"
    [ "$hap" = 0 ] || fail "the stats page counts $hap requests to cell_leader/n$id (a follower)"
    [ "$t1" = "$t0" ] || fail "follower node $id forwarded $(( t1 - t0 )) requests to the leader during the writes"
  fi
  ok
done
say "writes reached the leader directly: node $leader answered all $writes (its /ds request counts, and cell_leader/n$leader on the stats page), the followers none; no request forwarded to or by the leader meanwhile"
# The check can see forwarding: one append straight to a follower.
f=${followers[0]}
read -r _ t0 _ <<<"$(counters "$f")"
code="$(curl -s -o /dev/null -m 10 -w '%{http_code}' -X POST "${json[@]}" --data-binary '{"k":"direct"}' "${node_url[$f]}/ds/$bucket/log")"
[ "$code" = 200 ] || fail "an append sent straight to follower node $f answered $code"
read -r _ t1 _ <<<"$(counters "$f")"
[ "$t1" -gt "$t0" ] || fail "an append sent straight to follower node $f did not move its ringstream_cell_forwarded_requests_total{direction=\"to_leader\"}"
ok
say "control: an append sent straight to follower node $f is forwarded (to_leader $t0 -> $t1)"

# --- 3 and 4. headless Chromium: 10 SSE readers on one origin ------------------------------
# run_page NAME WAIT_MS [CHROMIUM FLAGS...]: the page against a new stream
# NAME, its verdict (one JSON message) in $work/verdict-NAME.json.
run_page() {
  local name=$1 wait_ms=$2 got="" t0 _; shift 2
  expect 201 "create $bucket/sse-$name" PUT "$P/ds/$bucket/sse-$name" "${json[@]}"
  expect 201 "create $bucket/result-$name" PUT "$P/ds/$bucket/result-$name" "${json[@]}"
  local url="$P/ds/$bucket/page?offset=-1#stream=/ds/$bucket/sse-$name&result=/ds/$bucket/result-$name&readers=10&n=20&wait=$wait_ms"
  mkdir -p "$work/chrome-$name"
  t0=$(date +%s.%N)
  # --no-sandbox: the page is this test's own, and the sandbox needs root
  # or user namespaces. Its own process group, ended as a whole.
  XDG_CONFIG_HOME="$work/chrome-$name" XDG_CACHE_HOME="$work/chrome-$name" \
    setsid "$CHROMIUM" --headless=new --no-sandbox --disable-gpu --ignore-certificate-errors \
    --user-data-dir="$work/chrome-$name/profile" --no-first-run --disable-extensions \
    --disable-background-networking --disable-component-update "$@" "$url" \
    >"$work/chrome-$name.log" 2>&1 &
  chrome_pgid=$!
  for _ in $(seq 1 300); do
    got="$(curl -s -k --http2 -m 5 "$P/ds/$bucket/result-$name?offset=-1" || true)"
    [ -n "$got" ] && [ "$got" != "[]" ] && break
    kill -0 "$chrome_pgid" 2>/dev/null || break
    sleep 0.1
  done
  kill -TERM -- "-$chrome_pgid" 2>/dev/null || true
  wait "$chrome_pgid" 2>/dev/null || true
  chrome_pgid=""
  if [ -z "$got" ] || [ "$got" = "[]" ]; then
    echo "--- chromium output, last lines:" >&2; grep -v 'dbus' "$work/chrome-$name.log" | tail -20 >&2
    fail "the page ($name) appended no verdict within 30 s"
  fi
  python3 -c 'import json, sys; print(json.dumps(json.loads(sys.argv[1])[0]))' "$got" >"$work/verdict-$name.json" \
    || fail "the page's verdict ($name) is not a JSON message: $got"
  PAGE_SECS="$(echo "$(date +%s.%N) - $t0" | bc)"
}
# verdict NAME EXPR: a Python expression over the verdict v holds.
verdict() {
  python3 - "$work/verdict-$1.json" "$2" <<'PY' || fail "the page ($1): $2 does not hold; verdict: $(head -c 1500 "$work/verdict-$1.json")"
import json, sys
v = json.load(open(sys.argv[1]))
sys.exit(0 if eval(sys.argv[2], {"v": v}) else 1)
PY
  ok
}
if [ "$browser" = 1 ]; then
  expect 201 "store the test page" PUT "$P/ds/$bucket/page" -H 'Content-Type: text/html' --data-binary @scripts/browser/sse-readers.html
  declare -a any_before=("" "" "" "")
  for id in 1 2 3; do any_before[id]="$(hap_stat cell_any "n$id" 8)"; done
  run_page h2 5000
  verdict h2 'v["page"] == "h2"'
  verdict h2 'v["appendProtocols"] == ["h2"]'
  verdict h2 'v["opened"] == v["readers"] == 10'
  verdict h2 'v["errors"] == 0'
  verdict h2 'v["appended"] == v["n"] == 20 and set(v["appendStatus"]) == {200}'
  verdict h2 'all(s == list(range(v["n"])) for s in v["seen"])'
  verdict h2 'v["ok"] is True'
  expect 200 "read $bucket/sse-h2 back" GET "$P/ds/$bucket/sse-h2?offset=-1"
  body_is "[$(seq -s, 0 19 | sed 's/\([0-9]*\)/{"n":\1}/g')]" "$bucket/sse-h2 read back"
  # leastconn spread the readers (and the page's GETs) over the three
  # nodes: followers served live readers too.
  spread=""
  for id in 1 2 3; do
    n=$(( $(hap_stat cell_any "n$id" 8) - any_before[id] ))
    [ "$n" -ge 3 ] || fail "cell_any/n$id got $n requests during the page's run, expected at least 3 of its 10 readers"
    spread="$spread${spread:+/}$n"
    ok
  done
  say "Chromium over h2: page and appends over h2, 10 of 10 SSE readers open at once (requests to nodes 1/2/3 through cell_any: $spread), each saw all 20 appends in order ($(printf '%.1f' "$PAGE_SECS") s)"

  run_page h1 3000 --disable-http2
  verdict h1 'v["page"] == "http/1.1"'
  verdict h1 'v["opened"] <= 6 < v["readers"]'
  say "control, Chromium limited to HTTP/1.1: the page over http/1.1, only $(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["opened"])' "$work/verdict-h1.json") of 10 SSE readers opened within 3 s (6 connections per origin) ($(printf '%.1f' "$PAGE_SECS") s)"
fi

# --- 5. failover: writes follow the new leader ---------------------------------------------
# The leader killed: writes get the proxy's 503 (the refused connection is
# not retried) until its check fails, then go to cell_any, where a
# follower answers 503 until a new leader is known and then forwards them;
# once the new leader's /leaderz check passes they go to it directly.
t0=$(date +%s.%N)
server_stop "${node_pid[$leader]}" KILL
node_pid[leader]=""
codes=""
for i in $(seq 1 100); do
  code="$(req POST "$P/ds/$bucket/log" "${json[@]}" --data-binary "{\"after\":$i}")"
  codes="$codes$code "
  [ "$code" = 200 ] && break
  case "$code" in
    502|503) grep -qi '^retry-after:' "$work/head" || fail "a $code during the failover without Retry-After: $(head -c 200 "$work/body")" ;;
    # Sent on HAProxy's kept-alive connection to the node as it died: no
    # answer came, and HAProxy resets the HTTP/2 stream (CANCEL) as it
    # would close an HTTP/1.1 client's connection, so that the client
    # retries: curl's "HTTP/2 stream was not closed cleanly".
    curl-error-92) ;;
    *) fail "an append during the failover answered $code: $(head -c 200 "$work/body")" ;;
  esac
  sleep 0.1
done
[ "$code" = 200 ] || fail "no append acknowledged within 100 tries after the leader was killed: $codes"
ok
first_ack="$(printf '%.1f' "$(echo "$(date +%s.%N) - $t0" | bc)")"
old_leader=$leader leader=""
# The survivor leading now (by /leaderz); the first one elected may hand
# its lead to the first voter up moments later (steering), so the stats page
# is compared with whichever leads at each look.
survivor_leading() {
  local id found=""
  for id in "${followers[@]}"; do
    [ "$(curl -s -o /dev/null -m 2 -w '%{http_code}' "${node_url[$id]}/leaderz" || true)" = 200 ] && found=$id
  done
  echo "$found"
}
for _ in $(seq 1 100); do
  leader="$(survivor_leading)"
  [ -n "$leader" ] && break
  sleep 0.1
done
[ -n "$leader" ] || fail "no survivor answers /leaderz 200 10 s after the leader was killed"
for _ in $(seq 1 150); do
  now="$(survivor_leading)"
  [ -n "$now" ] && leader=$now
  [ "$(states)" = "$(want_states "$leader" "$old_leader")" ] && break
  sleep 0.1
done
wait_states "$leader" "$old_leader" 1
settled="$(printf '%.1f' "$(echo "$(date +%s.%N) - $t0" | bc)")"
s0="$(hap_stat cell_leader "n$leader" 8)"
for k in 1 2 3 4 5; do
  expect 200 "append $k after the failover" POST "$P/ds/$bucket/log" "${json[@]}" --data-binary "{\"again\":$k}"
done
s1="$(hap_stat cell_leader "n$leader" 8)"
[ $(( s1 - s0 )) = 5 ] || fail "5 appends after the failover: cell_leader/n$leader (the new leader) counts $(( s1 - s0 ))"
ok
say "failover: node $old_leader (leader) killed; appends answered ${codes% } (first acknowledged after $first_ack s); node $leader leads, alone UP in cell_leader after $settled s, and takes the next 5 appends directly"

if [ "$browser" = 1 ]; then
  say "$passed checks passed, 0 failed ($(elapsed))"
else
  say "$passed checks passed, 0 failed ($(elapsed)); the browser checks were SKIPPED (see above)"
fi
