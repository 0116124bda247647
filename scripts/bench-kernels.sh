#!/usr/bin/env bash
# Tunes the decode-shaped GEMM suite with Kiln and times it side by side with OpenBLAS.
# OpenBLAS picks its best kernels for this CPU: OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are unset
# for the benchmark process only. Usage: scripts/bench-kernels.sh [--suite decode|quick] [--budget N]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
BUILD=${KILN_BUILD_DIR:-build}
mkdir -p "$BUILD/bench-results"
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$BUILD/bench/kiln-bench-kernels" \
  --json "$BUILD/bench-results/kernels.json" --markdown "$BUILD/bench-results/kernels.md" "$@"
