#!/usr/bin/env bash
# Sets up and builds Kiln, then runs a real local tuning job: kiln-coordinator (embedded SQLite
# store) and one CPU kiln-worker on loopback, a GEMM job with live progress and the result table,
# and a clean shutdown of both. Override with DEMO_SHAPE, DEMO_BUDGET.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
BUILD=${KILN_BUILD_DIR:-build}
SHAPE=${DEMO_SHAPE:-M=8,N=4096,K=4096}
BUDGET=${DEMO_BUDGET:-64}
RUN=$(mktemp -d /tmp/kiln-demo-XXXXXX)
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
stop() {
  [ -n "${WORKER_PID:-}" ] && kill -TERM "$WORKER_PID" 2>/dev/null && wait "$WORKER_PID" 2>/dev/null || true
  [ -n "${COORD_PID:-}" ] && kill -TERM "$COORD_PID" 2>/dev/null && wait "$COORD_PID" 2>/dev/null || true
}
trap stop EXIT
echo "== starting kiln-coordinator (store: ./kiln-data/kiln.db, logs: $RUN)"
"$BUILD/server/kiln-coordinator" --listen 127.0.0.1:0 --port-file "$RUN/port" --data-dir ./kiln-data \
  --metrics-listen "127.0.0.1:$(free_port)" >"$RUN/coordinator.log" 2>&1 &
COORD_PID=$!
for _ in $(seq 100); do [ -s "$RUN/port" ] && break; sleep 0.1; done
[ -s "$RUN/port" ] || { cat "$RUN/coordinator.log"; exit 1; }
export KILN_COORDINATOR=127.0.0.1:$(cat "$RUN/port")
echo "== starting kiln-worker --device cpu (coordinator $KILN_COORDINATOR)"
"$BUILD/workers/kiln-worker" --device cpu --metrics-listen "127.0.0.1:$(free_port)" \
  >"$RUN/worker.log" 2>&1 &
WORKER_PID=$!
echo "== kiln submit --op gemm --shape $SHAPE --chip cpu --budget $BUDGET --wait"
"$BUILD/cli/kiln" submit --op gemm --shape "$SHAPE" --chip cpu --budget "$BUDGET" --wait
"$BUILD/cli/kiln" workers
echo "== shutting down"
