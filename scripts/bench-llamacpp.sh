#!/usr/bin/env bash
# Kiln's decode (or prefill) step beside llama.cpp's on this host, alternated round by round so both
# see the same moments of a shared machine: tunes the model once (kiln tune --local), keeps the
# composed step it measured, then R rounds of [Kiln's step and the LibTorch step, replayed in a trial
# child; llama.cpp on a GGUF file of the same shape and weight format (int8 -> q8_0, int4 -> q4_0),
# same threads, same context (prefill: the prompt length)]. Prints each round and the medians; the
# ratio is paired per round.
#
# usage: scripts/bench-llamacpp.sh [--model tinyllama-1.1b] [--dtype fp32|bf16|int8|int4]
#                                  [--phase decode|prefill] [--context 1024] [--budget 80] [--rounds 3]
# llama.cpp comes from LLAMACPP_RUN (default: ../shared/tools/llamacpp/run.sh beside the checkout:
# run.sh FORMAT PROMPT_TOKENS DECODE_TOKENS THREADS PRESET, one JSON line out).
set -euo pipefail
cd "$(dirname "$0")/.."
model=tinyllama-1.1b dtype=fp32 phase=decode context=1024 budget=80 rounds=3
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --dtype) dtype=$2; shift 2 ;;
    --phase) phase=$2; shift 2 ;;
    --context) context=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) echo "bench-llamacpp.sh: unknown argument '$1' (see the comment at the top)" >&2; exit 2 ;;
  esac
done
case "$dtype" in fp32) gguf=f32 ;; bf16) gguf=bf16 ;; int8) gguf=q8_0 ;; int4) gguf=q4_0 ;;
  *) echo "bench-llamacpp.sh: --dtype must be fp32, bf16, int8 or int4" >&2; exit 2 ;; esac
case "$phase" in decode) field=decode_tokens_per_s decode=32 ;;
  prefill) field=prefill_tokens_per_s decode=4 ;;
  *) echo "bench-llamacpp.sh: --phase must be decode or prefill" >&2; exit 2 ;; esac
run=${LLAMACPP_RUN:-$(cd .. && pwd)/shared/tools/llamacpp/run.sh}
[ -x "$run" ] || [ -f "$run" ] || { echo "bench-llamacpp.sh: no llama.cpp runner at $run (set LLAMACPP_RUN)" >&2; exit 2; }
BUILD=${KILN_BUILD_DIR:-build}
for b in "$BUILD/cli/kiln" "$BUILD/workers/kiln-worker"; do
  [ -x "$b" ] || { echo "bench-llamacpp.sh: $b is missing: run scripts/build.sh first" >&2; exit 2; }
done
threads=$(nproc)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$work/steps"
echo "tuning $model $phase b1 ctx$context $dtype (budget $budget) ..." >&2
KILN_STEP_DUMP="$work/steps" "$BUILD/cli/kiln" tune --local --model "$model" --phase "$phase" \
  --batch 1 --context "$context" --dtype "$dtype" --chip cpu --budget "$budget" \
  --data-dir "$work/data" --json >"$work/results.json"
step=$(ls "$work"/steps/step-*.pb | tail -1)
echo "host: $(lscpu | sed -n 's/^Model name: *//p'), $threads threads; $(date -u +%FT%TZ)"
printf '%-6s %-12s %-12s %-14s %-10s %s\n' round kiln_tok/s libtorch_tok/s llamacpp_tok/s kiln/llama read_GB/s
for r in $(seq "$rounds"); do
  KILN_STEP_PROFILE=1 "$BUILD/workers/kiln-worker" --kiln-trial-child <"$step" >/dev/null \
    2>"$work/step.err" || { echo "the step replay failed: $(tail -2 "$work/step.err")" >&2; exit 1; }
  line=$(grep "step summary" "$work/step.err" | tail -1)
  llama=$(bash "$run" "$gguf" "$context" "$decode" "$threads" "$model" 2>"$work/llama.err" | tail -1)
  python3 - "$r" "$line" "$llama" "$field" <<'PY' | tee -a "$work/rounds"
import json, re, sys
r, line, llama = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
k = float(re.search(r"kiln ([0-9.]+) tok/s", line).group(1))
t = float(re.search(r"baseline \S+ ([0-9.]+) tok/s", line).group(1))
g = float(re.search(r"read ([0-9.]+) GB/s", line).group(1))
l = llama[sys.argv[4]]
print(f"{r:<6} {k:<12.2f} {t:<12.2f} {l:<14.2f} {k / l:<10.2f} {g:.1f}")
PY
done
python3 - "$work/rounds" <<'PY'
import statistics, sys
rows = [list(map(float, l.split()[1:])) for l in open(sys.argv[1]) if l.strip()]
med = [statistics.median(c) for c in zip(*rows)]
print(f"median kiln {med[0]:.2f} tok/s, LibTorch {med[1]:.2f}, llama.cpp {med[2]:.2f}; "
      f"Kiln / llama.cpp {med[3]:.2f}x (paired per round)")
PY
