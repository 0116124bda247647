#!/usr/bin/env bash
# Runs a command next to a throwaway PostgreSQL server: initdb into a temp folder, a free loopback
# port, the unix socket in that folder; exports KILN_TEST_POSTGRES=postgresql://postgres@127.0.0.1:PORT
# and KILN_TEST_PSQL, runs "$@", stops the server and deletes the folder. As root the server runs
# as the postgres user. Exits 77 (ctest: skipped) when the server binaries are not installed.
set -euo pipefail
PGBIN=${KILN_PGBIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)}
if [ -z "$PGBIN" ] || [ ! -x "$PGBIN/initdb" ] || [ ! -x "$PGBIN/pg_ctl" ]; then
  echo "SKIP: PostgreSQL server binaries not found (Debian: apt-get install postgresql)"
  exit 77
fi
if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
  echo "SKIP: running as root and there is no postgres user to run the server as"
  exit 77
fi
PGTMP=$(mktemp -d /tmp/kiln-pg-XXXXXX)
chmod 755 "$PGTMP"
as_pg() {
  if [ "$(id -u)" = 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}
[ "$(id -u)" = 0 ] && chown postgres "$PGTMP"
stop_pg() {
  as_pg "$PGBIN/pg_ctl" -D "$PGTMP/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$PGTMP"
}
trap stop_pg EXIT
as_pg "$PGBIN/initdb" -D "$PGTMP/data" -A trust -U postgres --no-sync -E UTF8 --locale=C \
  >"$PGTMP/initdb.log" 2>&1 || { cat "$PGTMP/initdb.log"; exit 1; }
started=""
for _ in 1 2 3; do  # a free port can be taken between asking and binding: try another
  PGPORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
  if as_pg "$PGBIN/pg_ctl" -D "$PGTMP/data" -w -t 30 -l "$PGTMP/server.log" \
       -o "-p $PGPORT -k $PGTMP -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off" \
       start >/dev/null 2>&1; then started=1; break; fi
done
[ -n "$started" ] || { echo "FAIL: PostgreSQL did not start"; tail -20 "$PGTMP/server.log"; exit 1; }
export KILN_TEST_POSTGRES=postgresql://postgres@127.0.0.1:$PGPORT
export KILN_TEST_PSQL=$PGBIN/psql
echo "with_postgres: $("$PGBIN/postgres" --version) on 127.0.0.1:$PGPORT"
"$@"
