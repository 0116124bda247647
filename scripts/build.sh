#!/usr/bin/env bash
# Installs dependencies (scripts/setup.sh), then configures and builds Kiln into build/ (Ninja, Release).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD=${KILN_BUILD_DIR:-build}
if [ ! -f "$BUILD/build.ninja" ] && [ ! -f "$BUILD/Makefile" ]; then  # a build keeps its generator
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-Release}
fi
cmake --build "$BUILD" -j "${KILN_JOBS:-$(nproc)}"
