#!/usr/bin/env bash
# No silent waits: a job for a chip no live worker has says so (submit, submit --wait, jobs), and
# a worker stopped with SIGTERM deregisters: gone from `kiln workers` at once, not seen "alive"
# until its heartbeats time out (the liveness window here is 4 s; lost workers stay listed).
. "$(dirname "$0")/lib.sh"

start_coordinator 0
start_worker
for _ in $(seq 100); do
  kiln workers --json 2>/dev/null | grep -Eq '"state": ?"alive"' && break
  sleep 0.1
done
workers=$(kiln workers --json)
echo "$workers" | grep -Eq '"state": ?"alive"' || die "the worker did not register: $workers"
wid=$(echo "$workers" | python3 -c 'import json,sys; print(json.load(sys.stdin)["workers"][0]["id"])')
chip=$(echo "$workers" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["workers"][0]["chip_type"])')

# submit --wait for a chip no worker has: said at once, naming the live chip types.
set +e
timeout 5 "$KILN_CLI" --coordinator "$COORD" submit --op gemm --shape M=8,N=64,K=64 \
  --chip opencl-none --budget 2 --wait >"$WORK/wait.out" 2>&1
rc=$?
set -e
[ "$rc" = 124 ] || die "submit --wait for an absent chip ended ($rc): $(cat "$WORK/wait.out")"
grep -q "waiting: no live worker matches chip 'opencl-none'; live: $chip" "$WORK/wait.out" ||
  die "submit --wait did not say why it waits: $(cat "$WORK/wait.out")"
# submit without --wait warns on stderr, the id alone on stdout.
job=$(kiln submit --op gemm --shape M=8,N=64,K=64 --chip opencl-none --budget 2 2>"$WORK/submit.err")
[[ "$job" =~ ^j-[0-9a-f]+$ ]] || die "submit printed '$job'"
grep -q "warning: job $job is waiting: no live worker matches chip 'opencl-none'" \
  "$WORK/submit.err" || die "submit did not warn: $(cat "$WORK/submit.err")"
kiln jobs | grep -q "job $job waiting: no live worker matches chip 'opencl-none'" ||
  die "kiln jobs does not say the job waits: $(kiln jobs)"
kiln jobs --json | grep -Eq '"waiting": ?"no live worker' || die "kiln jobs --json has no waiting"

# SIGTERM: the worker hands back its leases, deregisters and exits; gone from the list at once.
kill -TERM "$WORKER_PID"
start=$(date +%s%N)
gone=0
for _ in $(seq 30); do
  if ! kiln workers --json | grep -q "$wid"; then gone=1; break; fi
  sleep 0.1
done
ms=$(( ($(date +%s%N) - start) / 1000000 ))
[ "$gone" = 1 ] || die "worker $wid still listed 3 s after SIGTERM: $(kiln workers)"
echo "worker gone from kiln workers ${ms} ms after SIGTERM"
for _ in $(seq 50); do kill -0 "$WORKER_PID" 2>/dev/null || break; sleep 0.1; done
kill -0 "$WORKER_PID" 2>/dev/null && die "the worker did not exit after SIGTERM"
# With no worker left, a cpu job says that no worker is live.
cpu=$(kiln submit --op gemm --shape M=8,N=64,K=64 --chip cpu --budget 2 2>/dev/null)
kiln jobs | grep -q "job $cpu waiting: no live worker matches chip 'cpu'; no worker is live" ||
  die "a cpu job with no worker left does not say so: $(kiln jobs)"

# kiln tune --local: Ctrl-C cancels the job and says so; --jobs and --cancel read the local store.
LOCAL=$WORK/local-data
"$KILN_CLI" tune --local --data-dir "$LOCAL" --op gemm --shape M=64,N=256,K=256 --chip cpu \
  --budget 500 >"$WORK/local.out" 2>"$WORK/local.err" &
LOCAL_PID=$!; PIDS+=($LOCAL_PID)
for _ in $(seq 300); do grep -q "submitted job" "$WORK/local.err" && break; sleep 0.1; done
grep -q "submitted job .* (Ctrl-C cancels it)" "$WORK/local.err" ||
  die "tune --local did not start a job: $(cat "$WORK/local.err")"
sleep 1
kill -INT "$LOCAL_PID"
set +e
for _ in $(seq 300); do kill -0 "$LOCAL_PID" 2>/dev/null || break; sleep 0.1; done
wait "$LOCAL_PID"
rc=$?
set -e
[ "$rc" = 130 ] || die "tune --local after Ctrl-C exited $rc: $(cat "$WORK/local.err")"
local_job=$(grep -o "submitted job j-[0-9a-f]*" "$WORK/local.err" | awk '{print $3}')
grep -q "Ctrl-C: cancelling job $local_job" "$WORK/local.err" ||
  die "no cancel notice: $(cat "$WORK/local.err")"
grep -q "job $local_job was cancelled by Ctrl-C" "$WORK/local.err" ||
  die "no cancelled line: $(cat "$WORK/local.err")"
"$KILN_CLI" tune --local --jobs --data-dir "$LOCAL" >"$WORK/local-jobs.out" 2>&1 ||
  die "tune --local --jobs failed: $(cat "$WORK/local-jobs.out")"
grep -q "$local_job  CANCELLED" "$WORK/local-jobs.out" ||
  die "the local store does not list the job CANCELLED: $(cat "$WORK/local-jobs.out")"
"$KILN_CLI" tune --local --cancel "$local_job" --data-dir "$LOCAL" | grep -q "CANCELLED" ||
  die "tune --local --cancel did not answer CANCELLED"
echo "PASS"
