#!/usr/bin/env bash
# Validates docs/deploy/prometheus-alerts.yml with `promtool check rules`.
# promtool comes from Debian's `prometheus` package, unpacked (not
# installed) into a cache; without it (no apt), the file is at least parsed
# as YAML. tests/deploy_files.rs checks the metric names in it.
# Environment: RINGSTREAM_PROMTOOL_CACHE (default ~/.cache/ringstream-promtool).
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
