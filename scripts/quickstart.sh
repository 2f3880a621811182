#!/usr/bin/env bash
# README command 1: set up Burrow on a fresh Debian 12 + Node 20 machine (as root) and run the main job.
#   1. host packages (runsc from bookworm-backports, mmdebstrap, PostgreSQL), 2. npm ci + build,
#   3. `burrow setup` (database, admin key, the `base` template built once with progress),
#   4. `burrow server` in the background (left running for the tour; its PID is in $BURROW_DATA_DIR/server.pid),
#   5. the main job, examples/fork-candidate-fixes, against that server.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA_DIR="${BURROW_DATA_DIR:-/var/lib/burrow}"
PORT="${BURROW_PORT:-7420}"
export BURROW_DATA_DIR="$DATA_DIR" BURROW_URL="${BURROW_URL:-http://127.0.0.1:${PORT}}"

say() { printf '\n\033[1m== %s\033[0m\n' "$*" >&2; }

say "1/5 host packages"
bash scripts/install-deps.sh
say "2/5 npm ci and build"
# npm ci again only when package-lock.json changed since the last install.
if ! cmp -s package-lock.json node_modules/.burrow-installed-lock 2>/dev/null; then
  npm ci --no-audit --no-fund
  cp package-lock.json node_modules/.burrow-installed-lock
fi
npm run build
say "3/5 burrow setup (database, admin key, base template)"
node packages/cli/bundle/bin.js setup --data-dir "$DATA_DIR"

say "4/5 burrow server"
started_here=no
if curl -fsS "$BURROW_URL/v1/health" >/dev/null 2>&1; then
  echo "a Burrow server already answers at $BURROW_URL; using it" >&2
else
  started_here=yes
  nohup node packages/cli/bundle/bin.js server --data-dir "$DATA_DIR" --port "$PORT" >>"$DATA_DIR/server.log" 2>&1 &
  echo $! >"$DATA_DIR/server.pid"
  for _ in $(seq 1 100); do curl -fsS "$BURROW_URL/v1/health" >/dev/null 2>&1 && break; sleep 0.2; done
  curl -fsS "$BURROW_URL/v1/health" >/dev/null || { echo "the server did not start; see $DATA_DIR/server.log" >&2; exit 1; }
  echo "server running at $BURROW_URL (pid $(cat "$DATA_DIR/server.pid"), log $DATA_DIR/server.log)" >&2
fi

say "5/5 main job: an agent prepares a workspace, pauses it, forks three fixes and keeps the one that passes"
BURROW_API_KEY="$(cat "$DATA_DIR/admin-key")" npx tsx examples/fork-candidate-fixes/main.ts "$DATA_DIR/example-summary.json"

cat >&2 <<MSG

Burrow is running at $BURROW_URL. Try:
  npx burrow sandbox create            # prints a sandbox id
  npx burrow exec <id> -- python3 -c 'print(6*7)'
MSG
if [ "$started_here" = yes ]; then
  echo "Stop the server with: kill \$(cat $DATA_DIR/server.pid)" >&2
fi
