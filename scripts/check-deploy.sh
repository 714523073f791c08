#!/usr/bin/env bash
# Validates docs/deploy/prometheus-alerts.yml with `promtool check rules`.
# promtool comes from Debian's `prometheus` package, unpacked (not
# installed) into a cache; without it (no apt), the file is at least parsed
# as YAML. tests/deploy_files.rs checks the metric names in it.
# Then docs/deploy/haproxy.cfg: `haproxy -c` (HAProxy 2.6.12, Debian's
# package, unpacked by scripts/lib/haproxy.sh) with its defaults and as
# scripts/multinode.sh renders it, and the rules the file must keep: no
# health check on the hash ring (a down node's buckets must not move to
# another node), `retries 0`, `no option redispatch`, a fixed `id` for every
# ring server. scripts/multinode.sh runs it for real. And
# docs/deploy/haproxy-cell.cfg (a cell behind TLS and HTTP/2): `haproxy -c`
# with a throwaway certificate, and its rules (TLS with ALPN h2,http/1.1,
# writes to the /leaderz backend, reads to the /readyz one, timeouts above
# 60 s, no compression); scripts/cell-h2.sh runs it for real.
# Environment: RINGSTREAM_PROMTOOL_CACHE (default ~/.cache/ringstream-promtool),
# RINGSTREAM_HAPROXY_CACHE (see scripts/lib/haproxy.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
rules=docs/deploy/prometheus-alerts.yml
cache="${RINGSTREAM_PROMTOOL_CACHE:-$HOME/.cache/ringstream-promtool}"
promtool="$(command -v promtool || true)"
if [ -z "$promtool" ] && [ ! -x "$cache/usr/bin/promtool" ] && command -v apt-get >/dev/null; then
  echo "check-deploy: unpacking promtool from Debian's prometheus package into $cache" >&2
  tmp="$(mktemp -d)"
  if (cd "$tmp" && (apt-get download prometheus >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && apt-get download prometheus >/dev/null 2>&1; })); then
    mkdir -p "$cache" && dpkg-deb -x "$tmp"/prometheus_*.deb "$cache"
  fi
  rm -rf "$tmp"
fi
[ -n "$promtool" ] || { [ -x "$cache/usr/bin/promtool" ] && promtool="$cache/usr/bin/promtool"; }
if [ -n "$promtool" ]; then
  "$promtool" check rules "$rules"
  echo "check-deploy: promtool check rules: 1 passed, 0 failed"
else
  python3 -c "import sys, yaml; d = yaml.safe_load(open(sys.argv[1])); assert d['groups'][0]['rules']" "$rules"
  echo "check-deploy: no promtool; $rules parses as YAML: 1 passed, 0 failed"
fi

# --- docs/deploy/haproxy.cfg -------------------------------------------------------
cfg=docs/deploy/haproxy.cfg
. scripts/lib/haproxy.sh
if ! command -v apt-get >/dev/null && ! command -v haproxy >/dev/null; then
  echo "check-deploy: no apt-get and no haproxy: $cfg NOT checked (scripts/multinode.sh needs haproxy $HAPROXY_DEB_VERSION)" >&2
  exit 0
fi
haproxy_install
passed=0
"$HAPROXY" -c -q -f "$cfg" || { echo "check-deploy: haproxy -c rejects $cfg with its defaults" >&2; exit 1; }
passed=$((passed + 1))
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
RINGSTREAM_PROXY_BIND=127.0.0.1:1 RINGSTREAM_PROXY_STATS=127.0.0.1:2 RINGSTREAM_PROXY_RUN="$tmp" \
  RINGSTREAM_PROXY_MAXCONN=100 RINGSTREAM_NODE1=127.0.0.1:3 RINGSTREAM_NODE2=127.0.0.1:4 RINGSTREAM_NODE3=127.0.0.1:5 \
  "$HAPROXY" -c -q -f "$cfg" || { echo "check-deploy: haproxy -c rejects $cfg rendered for loopback" >&2; exit 1; }
passed=$((passed + 1))
# The sections' lines, comments dropped: "SECTION :: LINE".
sections() { awk '/^[a-z]/ { sec = $1 " " $2 } { sub(/#.*/, "") } NF { print sec " :: " $0 }' "$cfg"; }
ring() { sections | awk -F' :: ' '$1 == "backend ring" { print $2 }'; }
ring_servers() { ring | grep '^ *server '; }
rule() { # rule DESCRIPTION COMMAND...: counts a rule that holds, fails on one that does not
  if "${@:2}"; then passed=$((passed + 1)); else echo "check-deploy: $cfg: $1" >&2; exit 1; fi
}
# No `grep -q` after a pipe: it stops reading at the first match, the writer
# before it can die of SIGPIPE, and with pipefail the rule's result would
# depend on the timing. grep >/dev/null reads everything.
ring_has() { ring | grep -- "$1" >/dev/null; }
ring_unchecked() { ! ring_servers | grep -E ' (check|track)( |$)' >/dev/null; }
ring_ids() { [ "$(ring_servers | wc -l)" -gt 0 ] && ! ring_servers | grep -Ev ' id [0-9]+( |$)' >/dev/null; }
default_is() { sections | grep -E "^defaults .* :: +$1 *\$" >/dev/null; }
nodes_check_readyz() {
  local checked with_readyz
  checked="$(sections | grep -Ec '^listen node[0-9]+ :: +server .* check ')"
  with_readyz="$(sections | grep -Ec '^listen node[0-9]+ :: +option httpchk GET /readyz *$')"
  [ "$checked" -gt 0 ] && [ "$checked" = "$with_readyz" ]
}
rule "the ring balances by the bucket variable" ring_has 'balance hash var(txn.bucket)'
rule "the ring needs hash-type consistent" ring_has 'hash-type consistent'
rule "no server of the ring may have a health check (its buckets would move)" ring_unchecked
rule "every ring server needs a fixed id" ring_ids
rule "defaults must say retries 0" default_is 'retries 0'
rule "defaults must say no option redispatch" default_is 'no option redispatch'
rule "every node proxy checks /readyz" nodes_check_readyz
echo "check-deploy: $cfg (haproxy $("$HAPROXY" -v | head -1 | awk '{print $3}') -c, rules): $passed passed, 0 failed"

# --- docs/deploy/haproxy-cell.cfg ----------------------------------------------------
# `haproxy -c` needs the certificate file to exist: a throwaway self-signed
# one. Then its rules: TLS with ALPN h2,http/1.1 on the bind, writes to a
# backend checking /leaderz (falling back to the any-node backend checking
# /readyz), timeouts no live reader hits (SSE lasts 60 s).
cfg=docs/deploy/haproxy-cell.cfg
passed=0
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=check-deploy \
  -keyout "$tmp/key.pem" -out "$tmp/cert.pem" >/dev/null 2>&1 \
  || { echo "check-deploy: openssl could not make a certificate to check $cfg" >&2; exit 1; }
cat "$tmp/cert.pem" "$tmp/key.pem" >"$tmp/proxy.pem"
RINGSTREAM_PROXY_CERT="$tmp/proxy.pem" "$HAPROXY" -c -q -f "$cfg" \
  || { echo "check-deploy: haproxy -c rejects $cfg with its defaults (and a certificate)" >&2; exit 1; }
passed=$((passed + 1))
RINGSTREAM_PROXY_BIND=127.0.0.1:1 RINGSTREAM_PROXY_STATS=127.0.0.1:2 RINGSTREAM_PROXY_CERT="$tmp/proxy.pem" \
  RINGSTREAM_PROXY_MAXCONN=100 RINGSTREAM_NODE1=127.0.0.1:3 RINGSTREAM_NODE2=127.0.0.1:4 RINGSTREAM_NODE3=127.0.0.1:5 \
  "$HAPROXY" -c -q -f "$cfg" || { echo "check-deploy: haproxy -c rejects $cfg rendered for loopback" >&2; exit 1; }
passed=$((passed + 1))
in_section() { sections | awk -F' :: ' -v s="$1" '$1 == s { print $2 }' | grep -E -- "$2" >/dev/null; }
# timeout_at_least NAME SECONDS: defaults' `timeout NAME` is at least SECONDS
timeout_at_least() {
  local v; v="$(sections | awk -F' :: ' '$1 ~ /^defaults/ { print $2 }' | awk -v n="$1" '$1 == "timeout" && $2 == n { print $3 }')"
  case "$v" in *s) v="${v%s}" ;; *) return 1 ;; esac
  [ "$v" -ge "$2" ] 2>/dev/null
}
rule "the frontend binds TLS with ALPN h2,http/1.1" in_section "frontend ringstream_cell" '^ *bind .* ssl crt .* alpn h2,http/1\.1( |$)'
rule "writes go to cell_leader while it has a server up" in_section "frontend ringstream_cell" '^ *use_backend cell_leader if write \{ nbsrv\(cell_leader\) gt 0 \}'
rule "the rest goes to cell_any" in_section "frontend ringstream_cell" '^ *default_backend cell_any *$'
rule "cell_leader checks /leaderz" in_section "backend cell_leader" '^ *option httpchk GET /leaderz *$'
rule "cell_any checks /readyz" in_section "backend cell_any" '^ *option httpchk GET /readyz *$'
rule "no server speaks h2 to the nodes (they speak HTTP/1.1)" bash -c '! grep -E "^[^#]*server .* proto h2" "$1" >/dev/null' _ "$cfg"
rule "no compression (it would hold SSE events)" bash -c '! grep -E "^[^#]*compression " "$1" >/dev/null' _ "$cfg"
for t in client server tunnel; do
  rule "timeout $t must outlast an SSE response (60 s) and a long-poll" timeout_at_least "$t" 61
done
echo "check-deploy: $cfg (haproxy $("$HAPROXY" -v | head -1 | awk '{print $3}') -c, rules): $passed passed, 0 failed"
