#!/usr/bin/env bash
# Runs E2B's own JS SDK test suite (its unit project, unmodified) against a fresh Burrow server built from this
# repository, to measure compatibility (docs/e2b-compatibility.md). E2B's sources stay outside the repository:
#   E2B_SUITE=<dir holding e2b-dev/E2B's packages/js-sdk, with its npm install done> bash scripts/run-e2b-suite.sh [test file filters]
# Prints vitest's summary; the JSON report goes to $OUT (default <suite>/burrow-report.json). Needs root and a
# built repository (npm run build). Ports: BURROW_PORT_ (41920), API_PORT (41982), ENVD_PORT (41983).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SUITE=${E2B_SUITE:?set E2B_SUITE to the js-sdk directory of an e2b-dev/E2B checkout}
OUT=${OUT:-$SUITE/burrow-report.json}
API_PORT=${API_PORT:-41982}
ENVD_PORT=${ENVD_PORT:-41983}
BURROW_PORT_=${BURROW_PORT_:-41920}
CLI="$ROOT/packages/cli/bundle/bin.js"
DATA=$(mktemp -d /tmp/burrow-e2bsuite-XXXXXX)
CONFIG="$SUITE/vitest.burrow.config.mts"
# The suite's unit project, one file at a time (its sandboxes share this host's cores).
cat > "$CONFIG" <<'VITEST'
import { defineConfig } from 'vitest/config'
export default defineConfig({
  test: {
    include: ['tests/**/*.test.ts'],
    exclude: ['tests/runtimes/**', 'tests/template/**', 'tests/connectionConfig.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    environment: 'node',
    fileParallelism: false,
    setupFiles: ['tests/globalFetchFallback.setup.ts'],
  },
})
VITEST
node "$CLI" setup --e2b --data-dir "$DATA" >/dev/null
# No warm pool, and E2B's timeouts end a sandbox on time (no expiry warning first), as E2B's tests expect.
BURROW_WARM_POOL=none BURROW_EXPIRY_WARNING_MS=0 BURROW_LOG_LEVEL=${BURROW_LOG_LEVEL:-warn} \
  BURROW_PORT=$BURROW_PORT_ BURROW_E2B_API_PORT=$API_PORT BURROW_E2B_ENVD_PORT=$ENVD_PORT \
  node "$CLI" server --data-dir "$DATA" 2>"$DATA/server.log" &
SERVER=$!
trap 'kill $SERVER; wait $SERVER 2>/dev/null; rm -rf "$DATA" "$CONFIG"' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$BURROW_PORT_/v1/health" >/dev/null && break; sleep 0.3; done
KEY=$(BURROW_DATA_DIR=$DATA BURROW_URL=http://127.0.0.1:$BURROW_PORT_ node "$CLI" keys create suite --role admin --e2b)
cd "$SUITE"
E2B_API_KEY=$KEY E2B_API_URL=http://127.0.0.1:$API_PORT E2B_SANDBOX_URL=http://127.0.0.1:$ENVD_PORT \
  npx vitest run --config "$CONFIG" --reporter=default --reporter=json --outputFile="$OUT" "$@"
