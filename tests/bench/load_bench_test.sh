#!/usr/bin/env bash
# kiln-bench-load against a real kiln-coordinator: 4 simulated workers run a 200-trial job beside
# 8 idle workers of another chip type; the JSON parses, the job counts exactly 200 trials, the
# idle workers got none, and the rates and latencies are figures.
set -euo pipefail
bench=${1:?usage: load_bench_test.sh KILN_BENCH_LOAD KILN_COORDINATOR}
coordinator=${2:?usage: load_bench_test.sh KILN_BENCH_LOAD KILN_COORDINATOR}
out=$(timeout 100 "$bench" --workers 4 --idle-workers 8 --trials 200 --coordinator "$coordinator" --json)
echo "$out"
python3 - "$out" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
def check(ok, what):
    if not ok:
        sys.exit("load_bench_test: " + what + ": " + sys.argv[1])
check(r["job_state"] == "SUCCEEDED", "the job did not succeed")
check(r["job_trials_done"] == 200, "the job's trial count is not exactly 200")
check(r["trials_reported"] >= 200, "fewer trials reported than the budget")
check(r["trials_per_s"] > 0, "trials_per_s is not positive")
check(r["rpc_errors"] == 0, "RPC errors")
check(r["results_not_accepted"] == 0, "results the coordinator did not accept")
for k in ("lease_p50_ms", "lease_p99_ms", "report_p99_ms", "cpu_us_per_trial", "rss_mb"):
    check(isinstance(r[k], (int, float)) and r[k] > 0, k + " is not a positive figure")
check(r["lease_p50_ms"] <= r["lease_p99_ms"], "lease p50 above p99")
check(0 < r["first_lease_p50_ms"] <= r["first_lease_max_ms"], "first leases' latency")
check(r["idle_workers"] == 8 and r["idle_trials"] == 0, "idle workers of another chip type got trials")
PY
echo "load_bench_test: ok"
