#!/usr/bin/env bash
# PostgreSQL server binaries for the results-database tests (unit/history/test_postgres.py starts its own
# server with initdb + pg_ctl on a 127.0.0.1 port as the 'postgres' user). Idempotent; no service is started.
set -euo pipefail
if ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 && id postgres >/dev/null 2>&1; then
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends postgresql >/dev/null
# Debian's package starts a cluster service on install where a service manager runs; the tests use their own
ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null
