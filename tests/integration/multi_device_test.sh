#!/usr/bin/env bash
# Workers of several chip types (cpu, opencl, sim) on one coordinator: each job's trials go only
# to a worker whose chip-type label matches its --chip prefix, and cpu, sim and opencl jobs all
# run to SUCCEEDED at the same time. The opencl part is skipped where no OpenCL device exists.
# A replay worker's file name has upper-case letters: its derived chip type is still a valid --chip.
. "$(dirname "$0")/lib.sh"
start_coordinator 0
start_worker --device cpu --name w-cpu
start_worker --device sim:systolic-128x128 --name w-sim
python3 - "$WORK/gemm_RTX_Test.json" <<'PY'
import json, sys
cache = {f"{a},{b}": {"block": a, "tile": b, "time": 1.0 + a * 0.1 + (b - 2) ** 2 * 0.05}
         for a in (1, 2, 4) for b in (1, 2, 3)}
json.dump({"device_name": "Recorded GPU", "kernel_name": "gemm", "problem_size": [64, 64],
           "tune_params_keys": ["block", "tile"], "tune_params": {"block": [1, 2, 4], "tile": [1, 2, 3]},
           "objective": "time", "cache": cache}, open(sys.argv[1], "w"))
PY
start_worker --device "replay:$WORK/gemm_RTX_Test.json" --name w-replay
have_opencl=1
# A generous trial timeout: CLBlast (the baseline) builds its kernels on first use, which takes
# PoCL tens of seconds on a busy machine (the worker also warms them in the background).
start_worker --device opencl --name w-opencl --trial-timeout 120; CL_PID=$WORKER_PID
want=4
for _ in $(seq 150); do  # fingerprints take a second or two (peak probes)
  kiln workers --json >"$WORK/workers.json" 2>/dev/null || true
  n=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1])).get("workers", [])))' \
        "$WORK/workers.json" 2>/dev/null || echo 0)
  if ! kill -0 "$CL_PID" 2>/dev/null && [ "$have_opencl" = 1 ]; then
    grep -q "OpenCL" "$WORK/worker.log" || die "the opencl worker exited: $(tail -3 "$WORK/worker.log")"
    echo "no OpenCL device here: the opencl part is skipped"; have_opencl=0; want=3
  fi
  [ "$n" -ge "$want" ] && break; sleep 0.2
done
kiln workers >"$WORK/workers.txt"
grep -q "cpu-" "$WORK/workers.txt" || die "no cpu worker listed: $(cat "$WORK/workers.txt")"
grep -q "sim-systolic-128x128" "$WORK/workers.txt" || die "no sim worker listed: $(cat "$WORK/workers.txt")"
grep -q "replay-gemm_rtx_test" "$WORK/workers.txt" || die "no replay worker listed: $(cat "$WORK/workers.txt")"
[ "$have_opencl" = 0 ] || grep -q "opencl-" "$WORK/workers.txt" || die "no opencl worker listed"

submit() { kiln submit "$@" --json | tail -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["job_id"])'; }
jobs=("cpu:$(submit --op gemm --shape M=4,N=64,K=64 --chip cpu --budget 6)")
jobs+=("sim:$(submit --op gemm --shape M=64,N=1024,K=1024 --chip sim --budget 24)")
jobs+=("replay:$(submit --op gemm --shape M=64,N=64,K=64 --chip replay-gemm_rtx_test --budget 6)")
if [ "$have_opencl" = 1 ]; then
  jobs+=("opencl:$(submit --op gemm --shape M=16,N=256,K=128 --chip opencl --budget 8)")
  jobs+=("opencl:$(submit --op softmax --shape T=4,N=1000 --chip opencl --budget 4)")
fi
for entry in "${jobs[@]}"; do
  prefix=${entry%%:*}; job=${entry#*:}
  for _ in $(seq 600); do
    kiln results "$job" --json >"$WORK/r-$job.json" 2>/dev/null || true
    python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["state"] in ("SUCCEEDED","FAILED","CANCELLED"))' \
      "$WORK/r-$job.json" 2>/dev/null && sleep 0.5 || break
  done
  python3 - "$WORK/r-$job.json" "$prefix" <<'PY' || die "job $job ($prefix) check failed"
import json, sys
d, prefix = json.load(open(sys.argv[1])), sys.argv[2]
assert d["state"] == "SUCCEEDED", (d["state"], d.get("message"))
assert d["chip_type"].startswith(prefix + "-"), d["chip_type"]
t = d["tasks"][0]
assert t["trials"]["ok"] > 0 and t["best"]["median_us"] > 0, t
assert t["baseline"]["median_us"] > 0, t["baseline"]
if prefix == "sim":
    assert t["baseline"]["name"] == "sim-default-mapping", t["baseline"]
    assert t["best"].get("message", "simulated").startswith("simulated"), t["best"]
if prefix == "opencl" and t["workload"].startswith("gemm"):
    assert t["baseline"]["name"] in ("clblast-sgemm", "opencl-gemm-default-config"), t["baseline"]
print(f"{prefix:7s} {d['chip_type']:24s} {t['workload']:34s} best {t['best']['median_us']:.1f} us"
      f" vs {t['baseline']['name']} {t['baseline']['median_us']:.1f} us")
PY
done
# Each trial went to a worker of the job's kind: the workers log every trial they run
# ("kiln-worker NAME: TRIAL-ID STATUS ..."); every worker ran some.
printf '%s\n' "${jobs[@]}" >"$WORK/jobs.txt"
python3 - "$WORK/jobs.txt" "$WORK/worker.log" <<'PY' || die "trials went to the wrong workers"
import re, sys
kind_of = dict(reversed(line.strip().split(":", 1)) for line in open(sys.argv[1]) if line.strip())
ran = {}
for line in open(sys.argv[2]):
    m = re.match(r"kiln-worker (w-\w+): (j-[0-9a-f]+)-\d+ ", line)
    if m:
        ran.setdefault(m.group(1), set()).add(m.group(2))
for worker, jobs in sorted(ran.items()):
    for job in jobs:
        assert worker == "w-" + kind_of[job], (job, kind_of[job], "ran on", worker)
expected = {"w-" + k for k in kind_of.values()}
assert set(ran) == expected, (sorted(ran), sorted(expected))
print("every trial ran on a worker of its job's chip type:",
      {w: len(j) for w, j in sorted(ran.items())}, "jobs per worker")
PY
echo "PASS"
