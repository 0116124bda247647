#!/usr/bin/env bash
# The coordinator's load curve: kiln-bench-load (simulated workers against a real
# kiln-coordinator over loopback) for a growing fleet, one markdown table row per fleet size.
# usage: scripts/bench-load.sh [extra kiln-bench-load flags...]
# env: KILN_BUILD_DIR (build), WORKERS ("1 4 16 64 256 1000"), TRIALS (2000), STRATEGY (random),
#      FAKE_US (0), TIMEOUT (per run, seconds: 300), SKIP_BUILD=1,
#      STORE=postgresql://USER@HOST:PORT (a server where USER may create databases; each run gets
#      a fresh database, dropped after it, so no run answers trials from an earlier run's records;
#      PSQL names psql). Default: SQLite in a temp dir per run. A throwaway local server:
#      tests/deploy/with_postgres.sh bash -c 'STORE=$KILN_TEST_POSTGRES scripts/bench-load.sh'
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${KILN_BUILD_DIR:-build}
WORKERS=${WORKERS:-1 4 16 64 256 1000}
TRIALS=${TRIALS:-2000}
STRATEGY=${STRATEGY:-random}
FAKE_US=${FAKE_US:-0}
TIMEOUT=${TIMEOUT:-300}
STORE=${STORE:-}
PSQL=${PSQL:-psql}
[ -x "${KILN_TEST_PSQL:-}" ] && PSQL=$KILN_TEST_PSQL
if [ -n "$STORE" ] && ! "$PSQL" "$STORE/postgres" -qAtc 'select 1' >/dev/null 2>&1; then
  echo "bench-load: PostgreSQL at ${STORE%%@*}@... does not answer; skipped" >&2
  exit 77
fi
if [ -z "${SKIP_BUILD:-}" ]; then
  [ -f "$BUILD/build.ninja" ] || [ -f "$BUILD/Makefile" ] ||
    cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release
  cmake --build "$BUILD" -j "${KILN_JOBS:-$(nproc)}" --target kiln-bench-load kiln-coordinator
fi
bench="$BUILD/bench/kiln-bench-load"

store_name=sqlite
[ -z "$STORE" ] || store_name=postgresql
echo "kiln-bench-load: $TRIALS trials, strategy $STRATEGY, store $store_name, fake measurement ${FAKE_US} us $*"
echo "$(date -u '+%F %H:%M UTC'), $(nproc) CPUs: $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
echo
echo "| workers | trials/s | round trips/s | lease p50 ms | lease p99 ms | lease p99 after the first ms | report p50 ms | report p99 ms | coordinator CPU us/trial | clients CPU us/trial | store ops/trial | store writes/trial | RSS MB | seconds |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for n in $WORKERS; do
  # The job's own deadline (--timeout) ends a run that stalls; the outer one, one that hangs.
  store=()
  if [ -n "$STORE" ]; then
    db=kiln_bench_load_${n}_$$
    "$PSQL" "$STORE/postgres" -qc "CREATE DATABASE $db" >/dev/null
    store=(--store "$STORE/$db")
  fi
  ok=1
  json=$(timeout $((TIMEOUT + 60)) "$bench" --workers "$n" --trials "$TRIALS" \
    --strategy "$STRATEGY" --fake-us "$FAKE_US" --timeout "$TIMEOUT" --json "${store[@]}" "$@" \
    2>/tmp/bench-load.$$.err) || ok=""
  [ -z "$STORE" ] || "$PSQL" "$STORE/postgres" -qc "DROP DATABASE IF EXISTS $db" >/dev/null || true
  if [ -z "$ok" ]; then
    echo "| $n | failed: $(head -c 200 /tmp/bench-load.$$.err | tr '\n|' '  ') ${json:0:200} |"
    continue
  fi
  jq -r --arg n "$n" '"| \($n) | \(.trials_per_s) | \(.round_trips_per_s) | \(.lease_p50_ms) | \(.lease_p99_ms) | \(.lease_p99_after_first_ms) | \(.report_p50_ms) | \(.report_p99_ms) | \(.cpu_us_per_trial) | \(.client_cpu_us_per_trial) | \(.store_ops_per_trial) | \(.store_writes_per_trial) | \(.rss_mb) | \(.seconds) |"' <<<"$json"
done
rm -f /tmp/bench-load.$$.err
