# shellcheck shell=bash
# Sourced by scripts that need the pinned npm packages of scripts/node/
# (package.json + package-lock.json: the official conformance suite and the
# official TypeScript client, exact versions, one client version for both).
# node_deps: installs Node.js if missing, then makes $NODE_CACHE hold exactly
# what the lockfile says (`npm ci`, redone only when the lockfile changed),
# and sets $NODE_CACHE. Environment: RINGSTREAM_NODE_CACHE (default
# ~/.cache/ringstream-node).
node_deps() {
  local src; src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../node" && pwd)"
  NODE_CACHE="${RINGSTREAM_NODE_CACHE:-$HOME/.cache/ringstream-node}"
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "$(basename "$0"): installing Node.js (apt-get)..." >&2
    apt-get update -qq >&2 && apt-get install -y -qq nodejs npm >&2
  fi
  local want; want="$(cat "$src/package.json" "$src/package-lock.json" | sha256sum | cut -d' ' -f1)"
  if [ "$(cat "$NODE_CACHE/.installed" 2>/dev/null)" != "$want" ] || [ ! -d "$NODE_CACHE/node_modules" ]; then
    echo "$(basename "$0"): installing the pinned npm packages (scripts/node) into $NODE_CACHE" >&2
    mkdir -p "$NODE_CACHE"
    cp "$src/package.json" "$src/package-lock.json" "$NODE_CACHE/"
    (cd "$NODE_CACHE" && npm ci --no-audit --no-fund --loglevel=error >&2)
    echo "$want" > "$NODE_CACHE/.installed"
  fi
}
