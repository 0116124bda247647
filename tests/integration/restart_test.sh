#!/usr/bin/env bash
# kill -9 the coordinator mid-job, start it again on the same store and port: the job finishes and
# every trial is accounted for exactly once.
. "$(dirname "$0")/lib.sh"
start_coordinator 0
PORT=${COORD##*:}
start_worker
budget=16
job=$(kiln submit --op gemm --shape M=3,N=80,K=40 --chip cpu --budget $budget --json | tail -1 |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["job_id"])')
wait_answered "$job" 4 "the crash"
kill -9 "$COORD_PID"; wait "$COORD_PID" 2>/dev/null || true
sleep 1
start_coordinator "$PORT"
kiln watch "$job" >"$WORK/watch.log" 2>&1 || die "job did not succeed after the restart: $(tail -3 "$WORK/watch.log")"
kiln results "$job" --json > "$WORK/results.json"
python3 - "$WORK/results.json" "$budget" <<'PY' || die "trials not accounted for once"
import json, sys
d = json.load(open(sys.argv[1])); budget = int(sys.argv[2])
assert d["state"] == "SUCCEEDED", d["state"]
t = d["tasks"][0]["trials"]
assert t["ok"] + t["failed"] == budget, t
print("restart ok:", t)
PY
grep -q "registered" "$WORK/worker.log" || die "worker never registered"
echo "PASS"
