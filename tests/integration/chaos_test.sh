#!/usr/bin/env bash
# Chaos: while a job runs on simulated devices, kill -9 a worker at every eighth or so of its
# budget answered and start it again, and kill -9 the coordinator once and restart it on the same
# data dir and port. The job
# must finish with exactly its budget of tuning trials: none lost (each proposal measured and
# counted), none duplicated (no proposal run as two trials, no report counted twice). Bounded: the
# job gets DEADLINE seconds from submission, whatever happens.
. "$(dirname "$0")/lib.sh"
BUDGET=${KILN_CHAOS_BUDGET:-4000}  # sim trials take milliseconds: the job must outlast the kills
# (and stay under the ~5,200 valid mappings of the shape)
DEADLINE=${KILN_CHAOS_DEADLINE:-80}
KILL_EVERY_PCT=${KILN_CHAOS_KILL_EVERY_PCT:-12}  # a kill at every 12% of the budget answered
NWORKERS=3
start_coordinator 0 --lease-ttl-ms 2000
PORT=${COORD##*:}
WPID=()
start_sim_worker() {  # start_sim_worker INDEX
  "$WORKER_BIN" --coordinator "$COORD" --device sim:systolic-128x128 --name "chaos-$1" \
    --metrics-listen "127.0.0.1:$(free_port)" >>"$WORK/worker-$1.log" 2>&1 &
  WPID[$1]=$!; PIDS+=($!)
}
for i in $(seq 1 $NWORKERS); do start_sim_worker "$i"; done
job=$(submit --op gemm --shape M=64,N=1024,K=1024 --chip sim --budget "$BUDGET") ||
  die "submission failed"
[ -n "$job" ] || die "no job id"
progress() {  # prints "STATE OK FAILED", or nothing while the coordinator is down
  kiln results "$job" --json 2>/dev/null | python3 -c 'import json,sys
d = json.load(sys.stdin); t = d["tasks"][0]["trials"]
print(d["state"], t["ok"], t["failed"])' 2>/dev/null || true
}
# Kills follow the job's progress, not the clock, so that a fast machine sees as many as a slow
# one: a worker at every KILL_EVERY_PCT percent of the budget answered, and the coordinator once,
# at the second of those points (a quarter of the way in by default).
start=$SECONDS worker_kills=0 coordinator_killed=0 victim=1 state="" next_kill=$((BUDGET * KILL_EVERY_PCT / 100))
while [ $((SECONDS - start)) -lt "$DEADLINE" ]; do
  read -r state ok failed <<<"$(progress)" || true
  case "$state" in SUCCEEDED | FAILED | CANCELLED) break ;; esac
  if [ "${ok:-0}" -ge "$next_kill" ] && [ "$next_kill" -lt "$BUDGET" ]; then
    next_kill=$((next_kill + BUDGET * KILL_EVERY_PCT / 100))
    if [ "$coordinator_killed" = 0 ] && [ "$worker_kills" -ge 1 ]; then
      echo "t+$((SECONDS - start))s: kill -9 coordinator at ${ok:-?} ok"
      kill -9 "$COORD_PID" 2>/dev/null || true; wait "$COORD_PID" 2>/dev/null || true
      start_coordinator "$PORT" --lease-ttl-ms 2000
      coordinator_killed=1
    else
      echo "t+$((SECONDS - start))s: kill -9 worker chaos-$victim at ${ok:-?} ok"
      kill -9 "${WPID[$victim]}" 2>/dev/null || true; wait "${WPID[$victim]}" 2>/dev/null || true
      start_sim_worker "$victim"
      worker_kills=$((worker_kills + 1)) victim=$((victim % NWORKERS + 1))
    fi
  fi
  sleep 0.25
done
[ "$state" = SUCCEEDED ] ||
  die "job $job is ${state:-unknown} after ${DEADLINE}s of chaos ($worker_kills worker kills)"
[ "$worker_kills" -ge 2 ] || die "the job ended before the chaos began ($worker_kills worker kills)"
[ "$coordinator_killed" = 1 ] || die "the job ended before the coordinator could be killed"
kiln results "$job" --json >"$WORK/results.json" || die "results failed"
# The store, read after a clean stop: one TUNE trial per proposal, each DONE, and the job's counts
# equal to the trials' own outcomes (a report applied twice would count one trial twice).
kill "$COORD_PID" 2>/dev/null || true; wait "$COORD_PID" 2>/dev/null || true
python3 - "$WORK/results.json" "$WORK/data/kiln.db" "$job" "$BUDGET" <<'PY' || die "miscounted"
import collections, json, sqlite3, sys

def fields(buf):  # protobuf wire format -> {field: [values]} (varints and length-delimited)
    out, i = collections.defaultdict(list), 0
    def varint():
        nonlocal i
        v = s = 0
        while True:
            b = buf[i]; i += 1; v |= (b & 0x7F) << s; s += 7
            if b < 0x80: return v
    while i < len(buf):
        key = varint(); f, t = key >> 3, key & 7
        if t == 0: out[f].append(varint())
        elif t == 1: out[f].append(buf[i:i + 8]); i += 8
        elif t == 5: out[f].append(buf[i:i + 4]); i += 4
        elif t == 2:
            n = varint(); out[f].append(buf[i:i + n]); i += n
        else: raise ValueError(f"wire type {t}")
    return out

one = lambda m, f, d=0: m[f][0] if m.get(f) else d
res, db = json.load(open(sys.argv[1])), sqlite3.connect(sys.argv[2])
job, budget = sys.argv[3], int(sys.argv[4])
t = res["tasks"][0]["trials"]
assert res["state"] == "SUCCEEDED", res["state"]
assert t["ok"] + t["failed"] == budget, f"results count {t} against a budget of {budget}"
TUNE, DONE, OK = 1, 3, 1
rows = db.execute("SELECT id, seq, body FROM trials WHERE job_id=?", (job,)).fetchall()
ids = [r[0] for r in rows]
assert len(ids) == len(set(ids)), "a trial id stored twice"
seqs = collections.Counter(r[1] for r in rows)
assert max(seqs.values()) == 1, f"a proposal sequence number used twice: {seqs.most_common(3)}"
tune = [fields(r[2]) for r in rows if one(fields(r[2]), 5) == TUNE]
assert len(tune) == budget, f"{len(tune)} TUNE trials stored for a budget of {budget}"
not_done = [one(m, 1).decode() for m in tune if one(m, 6) != DONE]
assert not not_done, f"TUNE trials never finished: {not_done[:5]}"
ok = sum(1 for m in tune if one(fields(one(m, 10, b"")), 1) == OK)
assert (ok, budget - ok) == (t["ok"], t["failed"]), f"trials say {ok} ok, the job counts {t}"
jobs = [fields(b) for (b,) in db.execute("SELECT body FROM jobs WHERE id=?", (job,))]
task = fields(one(jobs[0], 9))
assert (one(task, 4), one(task, 5)) == (ok, budget - ok), "stored task counters differ"
attempts = collections.Counter(one(m, 4) for m in tune)
configs = collections.Counter(bytes(one(m, 8, b"")) for m in tune)
# The strategy proposes each configuration once (Exclude after a restart): a configuration on two
# TUNE trials is a proposal run twice.
assert len(configs) == budget, f"{budget - len(configs)} configurations measured twice"
print(f"chaos ok: {budget} TUNE trials, {ok} ok, {budget - ok} failed; attempts {dict(attempts)}; "
      f"{len(configs)} distinct configs; {len(rows)} trials in all")
PY
echo "PASS ($worker_kills worker kills, 1 coordinator kill)"
