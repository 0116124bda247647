#!/usr/bin/env bash
# scripts/fuzz.sh TARGET [SECONDS] [LIBFUZZER FLAGS...]: a longer run of one fuzz target
# (fuzz_validate, fuzz_hf_config, fuzz_replay, fuzz_store_record; default 300 s). The corpus grows
# in BUILD/fuzz-corpus/TARGET (seeded from tests/fuzz/TARGET/); a crash's input is written to
# tests/fuzz/TARGET/crashes/, where the ctest entry replays it until it is fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: scripts/fuzz.sh TARGET [SECONDS] [LIBFUZZER FLAGS...]}
secs=${2:-300}
shift $(( $# >= 2 ? 2 : 1 ))
[ -d "tests/fuzz/$target" ] || { echo "unknown target $target (see tests/fuzz/)" >&2; exit 2; }
BUILD=${KILN_BUILD_DIR:-build}
[ -f "$BUILD/CMakeCache.txt" ] || bash scripts/build.sh
cmake --build "$BUILD" --target kiln_fuzz
bin=$BUILD/tests/fuzz/project/$target
[ -x "$bin" ] || {
  echo "$bin was not built: is clang with libclang-rt-dev installed (KILN_FUZZ)?" >&2; exit 1; }
corpus=$BUILD/fuzz-corpus/$target
crashes=tests/fuzz/$target/crashes
mkdir -p "$corpus" "$crashes"
# The seeds, not the saved crashes: a known crash would end every run at its start.
find "tests/fuzz/$target" -maxdepth 1 -type f ! -name '*.md' ! -name '*.dict' \
  -exec cp -n -t "$corpus" {} +
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
dict=(); [ -f "tests/fuzz/$target/$target.dict" ] && dict=(-dict="tests/fuzz/$target/$target.dict")
"$bin" "${dict[@]}" -rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=10 -max_len=16384 \
  -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$crashes/" "$@" "$corpus"
