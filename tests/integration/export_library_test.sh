#!/usr/bin/env bash
# `kiln export` of real jobs as a library: a GEMM tuned with prepacked weights (PREPACK=1) and a
# whole small model's decode step (epilogue GEMMs, attention decode, rmsnorm, rope, swiglu, ...),
# each export built with its own CMakeLists.txt into one library and one program, whose
# self-test (every kernel against a reference) passes; a program of this test calls the GEMM as
# kiln_kernels.h documents it and checks the product itself.
. "$(dirname "$0")/lib.sh"
command -v cmake >/dev/null || skip "no cmake"

start_coordinator 0
start_worker
job_of() {  # job_of SUBMIT-FLAGS...: submits, waits, prints the job id
  local out
  out=$(kiln submit "$@" --wait --json 2>>"$WORK/progress.log") || die "job $* failed: $out"
  echo "$out" | python3 -c 'import json,sys
for line in sys.stdin:
  line = line.strip()
  if line.startswith("{"): d = json.loads(line); print(d.get("job_id") or d["id"]); break'
}
build_export() {  # build_export JOB DIR: exports, builds, runs the self-test
  kiln export "$1" --out "$2" >"$WORK/export-$1.log" 2>&1 || die "export: $(cat "$WORK/export-$1.log")"
  for f in kiln_kernels.h CMakeLists.txt README.md manifest.json; do
    [ -f "$2/$f" ] || die "the export of $1 has no $f"; done
  (cmake -S "$2" -B "$2/build" && cmake --build "$2/build" -j2) >"$WORK/build-$1.log" 2>&1 ||
    die "the export of $1 does not build: $(tail -20 "$WORK/build-$1.log")"
  "$2/build/kiln_kernels_selftest" >"$WORK/selftest-$1.log" 2>&1 ||
    die "the self-test of $1 fails: $(cat "$WORK/selftest-$1.log")"
  grep -q "^0 of [0-9]* kernels failed" "$WORK/selftest-$1.log" ||
    die "the self-test of $1 says: $(cat "$WORK/selftest-$1.log")"
}

# A GEMM whose best takes prepacked weights.
gemm=$(job_of --op gemm --shape M=8,N=512,K=256 --chip cpu --budget 3 --pin PREPACK=1)
build_export "$gemm" "$WORK/gemm"
python3 - "$WORK/gemm/manifest.json" <<'PY' || die "the GEMM's manifest lacks its calling convention"
import json, sys
k = json.load(open(sys.argv[1]))["kernels"][0]
c = k["calling"]
assert c["function"] == "kiln_gemm_m8_n512_k256", c["function"]
assert c["prepack"]["required"] is True, c["prepack"]
assert [o["name"] for o in c["operands"]] == ["A", "B", "C"], c["operands"]
PY
cat >"$WORK/app.c" <<'C'
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "kiln_kernels.h"
int main(void) {
  const int M = 8, N = 512, K = 256;
  float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N), *C = malloc(sizeof(float) * M * N);
  for (int i = 0; i < M * K; ++i) A[i] = (float)((i * 37) % 101) / 50.0f - 1;
  for (int i = 0; i < K * N; ++i) B[i] = (float)((i * 53) % 97) / 48.0f - 1;
  float* P = malloc(sizeof(float) * kiln_gemm_m8_n512_k256_prepack_floats(N, K));
  kiln_gemm_m8_n512_k256_prepack(N, K, B, P);
  kiln_gemm_m8_n512_k256(M, N, K, A, P, C);
  int bad = 0;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double ref = 0, mag = 0;
      for (int k = 0; k < K; ++k) ref += (double)A[i * K + k] * B[k * N + j], mag += fabs((double)A[i * K + k] * B[k * N + j]);
      bad += !(fabs(C[i * N + j] - ref) <= 1e-4 * mag);
    }
  printf("%d wrong\n", bad);
  return bad != 0;
}
C
# The way the README says to link without CMake: the archive, the pool pulled in, pthreads.
cc -O2 -I"$WORK/gemm" -o "$WORK/app" "$WORK/app.c" -Wl,--undefined=kiln_rt_parallel_for_v1 \
  "$WORK/gemm/build/libkiln_kernels.a" -lstdc++ -lpthread -lm >"$WORK/app.log" 2>&1 ||
  die "a C program does not link the library: $(cat "$WORK/app.log")"
"$WORK/app" >"$WORK/app.out" 2>&1 || die "the GEMM's product is wrong: $(cat "$WORK/app.out")"
# ...and as a shared library.
(cmake -S "$WORK/gemm" -B "$WORK/gemm-shared" -DKILN_KERNELS_SHARED=ON &&
  cmake --build "$WORK/gemm-shared" -j2) >"$WORK/build-shared.log" 2>&1 ||
  die "the shared library does not build: $(tail -20 "$WORK/build-shared.log")"
[ -f "$WORK/gemm-shared/libkiln_kernels.so" ] || die "no libkiln_kernels.so"
"$WORK/gemm-shared/kiln_kernels_selftest" >"$WORK/selftest-shared.log" 2>&1 ||
  die "the shared library's self-test fails: $(cat "$WORK/selftest-shared.log")"
grep -q "kiln_gemm_m8_n512_k256" "$WORK/export-$gemm.log" ||
  die "kiln export does not name the function: $(cat "$WORK/export-$gemm.log")"

# A whole small model's decode step: every operator's kernel in one library.
cat >"$WORK/config.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128,
 "intermediate_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
 "num_hidden_layers": 2, "vocab_size": 512, "rms_norm_eps": 1e-05, "rope_theta": 10000.0}
JSON
model=$(job_of --hf-config "$WORK/config.json" --phase decode --batch 1 --context 64 --chip cpu \
  --budget 12)
build_export "$model" "$WORK/model"
python3 - "$WORK/model/manifest.json" "$WORK/selftest-$model.log" <<'PY' || die "the model's export misses operators"
import json, sys
kernels = json.load(open(sys.argv[1]))["kernels"]
ops = {k["workload"].split()[0] for k in kernels}
assert {"gemm", "attention_decode", "rmsnorm"} <= ops, ops
log = open(sys.argv[2]).read()
for k in kernels:
  assert "ok   " + k["calling"]["function"] + "\n" in log, (k["calling"]["function"], log)
print("export library ok:", len(kernels), "model kernels:", sorted(ops))
PY
