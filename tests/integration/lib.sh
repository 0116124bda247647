# Helpers for the integration and operations tests: real daemons on free loopback ports, cleaned up on exit.
set -euo pipefail
BIN=${KILN_BIN:?set KILN_BIN to the build folder}
SRC=${KILN_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
COORD_BIN=$BIN/server/kiln-coordinator
WORKER_BIN=$BIN/workers/kiln-worker
KILN_CLI=$BIN/cli/kiln
WORK=$(mktemp -d /tmp/kiln-it-XXXXXX)
export KILN_CACHE_DIR=$WORK/cache
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  sleep 0.5
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
die() { echo "FAIL: $*" >&2; for f in "$WORK"/*.log; do echo "--- $f"; tail -20 "$f"; done >&2; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
wait_port() {  # wait_port PORT SECONDS
  local i; for i in $(seq 1 $(( $2 * 10 ))); do
    (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.1; done
  return 1
}

# start_coordinator PORT [flags...]: PORT 0 = any (the bound port lands in COORD); sets
# COORD_PID and COORD_METRICS (HOST:PORT).
start_coordinator() {
  local port=$1; shift
  rm -f "$WORK/port"
  COORD_METRICS=127.0.0.1:$(free_port)
  "$COORD_BIN" --listen "127.0.0.1:$port" --data-dir "$WORK/data" --port-file "$WORK/port" \
    --metrics-listen "$COORD_METRICS" --lease-ttl-ms 4000 --heartbeat-ms 500 "$@" \
    >>"$WORK/coordinator.log" 2>&1 &
  COORD_PID=$!; PIDS+=($COORD_PID)
  for _ in $(seq 300); do [ -s "$WORK/port" ] && break; sleep 0.1; done  # a restart reloads its jobs
  [ -s "$WORK/port" ] || die "coordinator wrote no port file"
  COORD=127.0.0.1:$(cat "$WORK/port")
}

# start_worker [flags...]: a CPU worker; sets WORKER_METRICS (HOST:PORT).
start_worker() {
  WORKER_METRICS=127.0.0.1:$(free_port)
  "$WORKER_BIN" --coordinator "$COORD" --device cpu --metrics-listen "$WORKER_METRICS" "$@" \
    >>"$WORK/worker.log" 2>&1 &
  WORKER_PID=$!; PIDS+=($WORKER_PID)
}

kiln() { "$KILN_CLI" --coordinator "$COORD" "$@"; }
# wait_answered JOB N WHAT: until N trials of JOB's first task are answered (ok or failed), else
# dies saying the job made no progress before WHAT.
wait_answered() {
  local n=0
  for _ in $(seq 300); do
    n=$(kiln results "$1" --json | python3 -c 'import json,sys; t=json.load(sys.stdin)["tasks"][0]["trials"]; print(t["ok"]+t["failed"])')
    [ "$n" -ge "$2" ] && return 0; sleep 0.2
  done
  die "job made no progress before $3 ($n trials answered)"
}
submit() {  # submit JOB-FLAGS... -> job id
  kiln submit "$@" --json | tail -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["job_id"])'
}
