#!/usr/bin/env bash
# Makes sure a PostgreSQL server answers on 127.0.0.1:5432 for the tests
# (internal/pgtest, which creates and drops its own throwaway databases):
#
#   * a server already answering is left alone;
#   * a cluster that exists but is down (/etc/postgresql/<version>/main) is
#     started with pg_ctlcluster;
#   * with no cluster at all, Debian's postgresql package is installed with
#     apt-get, and loopback TCP connections of its fresh cluster are set to
#     trust (a throwaway CI machine: nothing else is on that server).
#
# Tests reach the server as SHAPER_PG_DSN, by default
# postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable. Idempotent;
# quick when the server is up.
set -euo pipefail

HOST=127.0.0.1
PORT=5432
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"

answering() {
  if command -v pg_isready >/dev/null 2>&1; then
    pg_isready -q -h "$HOST" -p "$PORT"
  else
    (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null
  fi
}

clusters() { ls -d /etc/postgresql/*/main 2>/dev/null || true; }

if answering; then
  exit 0
fi

installed=0
if [ -z "$(clusters)" ]; then
  echo "postgres.sh: no PostgreSQL cluster; installing Debian's postgresql with apt-get" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null
  installed=1
fi

for dir in $(clusters); do
  version=$(basename "$(dirname "$dir")")
  if [ "$installed" -eq 1 ]; then
    # A fresh cluster asks loopback TCP clients for a password; the tests
    # connect as postgres without one.
    hba=$dir/pg_hba.conf
    $SUDO sed -i -E 's/^(host\s+all\s+all\s+(127\.0\.0\.1\/32|::1\/128)\s+)\S+/\1trust/' "$hba"
  fi
  echo "postgres.sh: starting PostgreSQL $version (main)" >&2
  $SUDO pg_ctlcluster --skip-systemctl-redirect "$version" main start 2>/dev/null ||
    $SUDO pg_ctlcluster --skip-systemctl-redirect "$version" main reload 2>/dev/null || true
done

for _ in $(seq 1 60); do
  if answering; then
    exit 0
  fi
  sleep 0.5
done
echo "postgres.sh: PostgreSQL does not answer on $HOST:$PORT after 30s; see /var/log/postgresql/" >&2
exit 1
