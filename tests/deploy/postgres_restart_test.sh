#!/usr/bin/env bash
# A coordinator on PostgreSQL is killed (-9) mid-job and started again on the same database and
# port: the job resumes and finishes with every trial accounted for once. Run under
# with_postgres.sh (KILN_TEST_POSTGRES); exits 77 (skipped) without it or without a
# PostgreSQL-enabled build.
. "$(dirname "$0")/lib.sh"
postgres_store kiln_restart
start_coordinator 0 --store "$STORE"
PORT=${COORD##*:}
start_worker
budget=6
job=$(submit --op gemm --shape M=3,N=80,K=40 --chip cpu --budget $budget) || die "submit failed"
wait_answered "$job" 2 "the crash"
kill -9 "$COORD_PID"; wait "$COORD_PID" 2>/dev/null || true
start_coordinator "$PORT" --store "$STORE"
kiln watch "$job" >"$WORK/watch.log" 2>&1 || die "job did not succeed after the restart: $(tail -3 "$WORK/watch.log")"
kiln results "$job" --json >"$WORK/results.json"
python3 - "$WORK/results.json" "$budget" <<'PY' || die "trials not accounted for once"
import json, sys
d = json.load(open(sys.argv[1])); budget = int(sys.argv[2])
assert d["state"] == "SUCCEEDED", d["state"]
t = d["tasks"][0]["trials"]
assert t["ok"] + t["failed"] == budget, t
print("restart on PostgreSQL ok:", t)
PY
n=$("$KILN_TEST_PSQL" -X -qtA -d "$STORE" -c "SELECT count(*) FROM trials WHERE job_id = '$job'")
[ "$n" -ge "$budget" ] || die "the database holds $n trials of $job, expected at least $budget"
echo "PASS"
