#!/usr/bin/env bash
# A small GEMM job runs to SUCCEEDED through real coordinator and worker processes; bad input is
# refused without a trace; both daemons expose metrics and stop cleanly on SIGTERM.
. "$(dirname "$0")/lib.sh"
start_coordinator 0
start_worker
if kiln submit --op gemm --shape M=0,N=64,K=64 --chip cpu >"$WORK/bad.out" 2>&1; then die "M=0 accepted"; fi
grep -q "INVALID_ARGUMENT" "$WORK/bad.out" || die "no INVALID_ARGUMENT for M=0: $(cat "$WORK/bad.out")"
grep -q "M=0" "$WORK/bad.out" || die "error does not name M=0: $(cat "$WORK/bad.out")"
[ "$(kiln jobs | wc -l)" -le 1 ] || die "a refused job is listed"
out=$(kiln submit --op gemm --shape M=5,N=96,K=33 --chip cpu --budget 12 --wait --json 2>"$WORK/progress.log") \
  || die "job did not succeed: $out"
job=$(echo "$out" | tail -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["job_id"])')
kiln results "$job" --json > "$WORK/results.json" || die "results failed"
python3 - "$WORK/results.json" <<'PY' || die "results check failed"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["state"] == "SUCCEEDED", d["state"]
assert d["chip_type"].startswith("cpu-"), d["chip_type"]
t = d["tasks"][0]
assert t["trials"]["ok"] + t["trials"]["failed"] == 12, t["trials"]
assert t["best"]["median_us"] > 0 and t["best"]["gflops"] > 0 and t["best"]["gbytes_per_s"] > 0
assert t["best"]["samples_us"], "raw samples are kept"
# the fastest library route of the moment: OpenBLAS, BLIS or oneDNN (noise may pick either)
assert any(lib in t["baseline"]["name"] for lib in ("blas", "blis", "onednn")), t["baseline"]
assert t["baseline"]["median_us"] > 0, t["baseline"]
print("e2e ok:", t["workload"], t["best"]["median_us"], "us vs", t["baseline"]["median_us"])
PY
kiln results "$job" | grep -q "SUCCEEDED" || die "results table lacks the state"
kiln workers | grep -q "cpu-" || die "workers table lacks the worker"
metrics=$(curl -sf "http://$(sed -n 's/.*metrics on :\([0-9]*\).*/127.0.0.1:\1/p' "$WORK/coordinator.log" | head -1)/metrics" || true)
echo "$metrics" | grep -q 'kiln_trials_total{chip_type="cpu-' || die "coordinator metrics lack kiln_trials_total"
for m in kiln_queue_depth kiln_workers kiln_jobs kiln_trial_duration_seconds_bucket; do
  echo "$metrics" | grep -q "^$m" || die "coordinator metrics lack $m"; done
curl -sf "http://$WORKER_METRICS/metrics" | grep -q kiln_worker_trials_total || die "worker metrics missing"
curl -sf "http://$WORKER_METRICS/metrics" | grep -Eq '^kiln_worker_trial_processes_started_total\{[^}]*\} [1-9]' ||
  die "the worker's long-lived trial process was never started"
kill -TERM "$WORKER_PID"; wait "$WORKER_PID" || die "worker did not exit 0 on SIGTERM"
kill -TERM "$COORD_PID"; wait "$COORD_PID" || die "coordinator did not exit 0 on SIGTERM"
echo "PASS"
