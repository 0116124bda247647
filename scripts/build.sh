#!/usr/bin/env bash
# Configures and builds Kiln into build/ (Ninja, Release); installs nothing (the dependencies come
# from scripts/setup.sh; `cmake --install build` installs Kiln, docs/operations.md).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${KILN_BUILD_DIR:-build}
if [ ! -f "$BUILD/build.ninja" ] && [ ! -f "$BUILD/Makefile" ]; then  # a build keeps its generator
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-Release}
fi
cmake --build "$BUILD" -j "${KILN_JOBS:-$(nproc)}"
