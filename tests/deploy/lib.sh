# Helpers for the operations tests: the integration tests' helpers (daemons on free loopback
# ports, cleaned up on exit).
# shellcheck source=../integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../integration/lib.sh"

# postgres_store NAME: skips without a PostgreSQL build or server (with_postgres.sh), creates the
# database NAME and sets STORE to its URL.
postgres_store() {
  [ -z "${KILN_NO_POSTGRES:-}" ] || skip "this build has no PostgreSQL store (KILN_WITH_POSTGRES is OFF)"
  [ -n "${KILN_TEST_POSTGRES:-}" ] || skip "KILN_TEST_POSTGRES not set (run through with_postgres.sh)"
  "$KILN_TEST_PSQL" -X -q -d "$KILN_TEST_POSTGRES/postgres" -c "CREATE DATABASE $1" ||
    die "createdb failed"
  STORE=$KILN_TEST_POSTGRES/$1
}
