#!/usr/bin/env bash
# Starts the local PostgreSQL 15 cluster and makes a role and database for Burrow's tests. Idempotent.
# Prints the connection URL on stdout.
set -euo pipefail
exec 3>&1 1>&2   # only the URL goes to stdout
# The postmaster is a daemon: it must not inherit our stdout/stderr or fd 3, or whoever reads them (a `$(...)`
# capturing the URL, CI's log) waits for it forever. Its own log is /var/log/postgresql/.
log=/tmp/burrow-pg-start.log
if ! pg_ctlcluster 15 main start </dev/null >"$log" 2>&1 3>&-; then
  pg_ctlcluster 15 main status </dev/null >/dev/null 2>&1 3>&- || { cat "$log"; exit 1; }
fi
for _ in $(seq 1 30); do su postgres -c 'pg_isready -q' && break; sleep 0.5; done
su postgres -c "psql -qtAc \"SELECT 1 FROM pg_roles WHERE rolname='burrow'\"" | grep -q 1 ||
  su postgres -c "psql -qc \"CREATE ROLE burrow LOGIN PASSWORD 'burrow' CREATEDB\""
su postgres -c "psql -qtAc \"SELECT 1 FROM pg_database WHERE datname='burrow_test'\"" | grep -q 1 ||
  su postgres -c "psql -qc \"CREATE DATABASE burrow_test OWNER burrow\""
echo "postgres://burrow:burrow@127.0.0.1:5432/burrow_test" >&3
