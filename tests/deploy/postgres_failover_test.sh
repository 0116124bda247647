#!/usr/bin/env bash
# Two coordinators on one PostgreSQL database: the second stands by (health NOT_SERVING; reads
# answered from the database, everything else UNAVAILABLE). Workers and the CLI get both addresses. The leader is killed (-9) mid-job: the
# standby takes over within 10 s, and the job finishes with every trial counted once. Run under
# with_postgres.sh (KILN_TEST_POSTGRES); exits 77 (skipped) without it or without a
# PostgreSQL-enabled build.
. "$(dirname "$0")/lib.sh"
postgres_store kiln_failover
start_coordinator 0 --store "$STORE" --data-dir "$WORK/a"
A=$COORD; A_PID=$COORD_PID
A_METRICS=$COORD_METRICS
start_coordinator 0 --store "$STORE" --data-dir "$WORK/b"
B=$COORD; B_METRICS=$COORD_METRICS
ready() { curl -s -o /dev/null -w "%{http_code}" "http://$1/ready"; }
[ "$(ready "$A_METRICS")" = 200 ] || die "the leader's /ready is not 200"
[ "$(ready "$B_METRICS")" = 503 ] || die "the standby's /ready is not 503"
grep -q "standing by" "$WORK/coordinator.log" || die "the second coordinator did not stand by"
"$KILN_CLI" --coordinator "$B" jobs >"$WORK/standby-jobs.out" 2>&1 \
  || die "the standby did not answer a read: $(tail -2 "$WORK/standby-jobs.out")"
"$KILN_CLI" --coordinator "$B" submit --op gemm --shape M=8,N=64,K=64 --chip sim --budget 2 \
  >"$WORK/standby.out" 2>&1 && die "the standby took a job"
grep -q "standby" "$WORK/standby.out" || die "the standby's refusal does not say so: $(cat "$WORK/standby.out")"
COORD=$A,$B
for i in 1 2; do
  "$WORKER_BIN" --coordinator "$COORD" --device sim:systolic-64x64 \
    --metrics-listen 127.0.0.1:$(free_port) >>"$WORK/worker.log" 2>&1 &
  PIDS+=($!)
done
budget=600
job=$(submit --op gemm --shape M=256,N=512,K=512 --chip sim --budget $budget --strategy random) \
  || die "submit to the pair failed"
wait_answered "$job" 100 "the failover"
# The standby reads what the leader wrote: the job in its list, its results with trials.
"$KILN_CLI" --coordinator "$B" jobs 2>&1 | grep -q "$job" || die "the standby does not list $job"
"$KILN_CLI" --coordinator "$B" results "$job" --json >"$WORK/standby-results.json" 2>&1 \
  || die "the standby did not answer results: $(tail -2 "$WORK/standby-results.json")"
python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["tasks"][0]["trials"]; sys.exit(0 if t["ok"] > 0 else 1)' \
  "$WORK/standby-results.json" || die "the standby's results have no trials"
kill -9 "$A_PID"; wait "$A_PID" 2>/dev/null || true
killed=$(date +%s.%N)
for _ in $(seq 200); do grep -q "leading: took over" "$WORK/coordinator.log" && break; sleep 0.05; done
took=$(python3 -c "import time; print(round(time.time() - $killed, 1))")
grep -q "leading: took over" "$WORK/coordinator.log" || die "the standby did not take over"
python3 -c "import sys; sys.exit(0 if $took <= 10 else 1)" || die "the takeover took $took s (want <= 10)"
[ "$(ready "$B_METRICS")" = 200 ] || die "the new leader's /ready is not 200"
timeout 120 "$KILN_CLI" --coordinator "$COORD" watch "$job" >"$WORK/watch.log" 2>&1 || die "job did not succeed after the failover: $(tail -3 "$WORK/watch.log")"
kiln results "$job" --json >"$WORK/results.json"
python3 - "$WORK/results.json" "$budget" "$took" <<'PY' || die "trials not accounted for once"
import json, sys
d = json.load(open(sys.argv[1])); budget = int(sys.argv[2])
assert d["state"] == "SUCCEEDED", d["state"]
t = d["tasks"][0]["trials"]
assert t["ok"] + t["failed"] == budget, t
print(f"failover on PostgreSQL ok: took over in {sys.argv[3]} s;", t)
PY
echo "PASS"
