#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite (every label but gpu; gpu tests run where a GPU is).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
BUILD=${KILN_BUILD_DIR:-build}
export KILN_CACHE_DIR=${KILN_CACHE_DIR:-$PWD/$BUILD/kernel-cache}
LABELS=(-LE gpu)
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then LABELS=(); fi
cd "$BUILD"
ctest --output-on-failure --timeout 900 "${LABELS[@]}" "$@"
