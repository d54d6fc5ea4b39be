#!/usr/bin/env bash
# Start a PostgreSQL server on loopback for the multi-worker storage test (issue 9), from Debian's
# packages: installs them if missing, starts the cluster, creates a role and a database, and prints
# the URL to use as GEMVTUNE_TEST_PG_URL. Needs root (apt, pg_ctlcluster).
set -euo pipefail
if ! command -v pg_ctlcluster > /dev/null || [ -z "$(ls /usr/lib/postgresql 2>/dev/null)" ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q postgresql > /dev/null 2>&1 || { apt-get update -q > /dev/null && apt-get install -y -q postgresql > /dev/null; }
fi
ver=$(ls /usr/lib/postgresql | sort -n | tail -1)
pg_lsclusters -h | grep -q "^$ver main" || pg_createcluster "$ver" main > /dev/null 2>&1
pg_ctlcluster "$ver" main start > /dev/null 2>&1 || pg_ctlcluster "$ver" main status > /dev/null
for _ in $(seq 50); do su postgres -c "psql -qAtc 'select 1'" > /dev/null 2>&1 && break; sleep 0.2; done
su postgres -c "psql -qAtc \"select 1 from pg_roles where rolname='gemvtune'\"" | grep -q 1 || \
  su postgres -c "psql -qc \"create role gemvtune login password 'gemvtune'\""
su postgres -c "psql -qAtc \"select 1 from pg_database where datname='gemvtune'\"" | grep -q 1 || \
  su postgres -c "createdb -O gemvtune gemvtune"
echo "postgresql://gemvtune:gemvtune@127.0.0.1:5432/gemvtune"
