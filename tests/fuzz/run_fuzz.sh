#!/usr/bin/env bash
# run_fuzz.sh BINARY SEED_DIR SECONDS [ARTIFACT_DIR]: replays every file under SEED_DIR (seeds and
# saved crashes/ alike), then fuzzes for SECONDS from a temporary copy of them. Exit 0: nothing
# found; 1: a crash, its input copied to ARTIFACT_DIR; 77: the target is not built (skipped).
set -uo pipefail
bin=$1 seeds=$2 secs=${3:-10} artifacts=${4:-}
[ -x "$bin" ] || {
  echo "SKIP: $bin is not built (cmake --build BUILD --target kiln_fuzz)"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-fuzz-XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/out"
n=0
while IFS= read -r -d '' f; do
  n=$((n + 1)); cp "$f" "$work/corpus/$n-$(basename "$f")"
done < <(find "$seeds" -type f ! -name '*.md' ! -name '*.dict' -print0 | sort -z)
# Sanitizer reports abort (libFuzzer saves the input); LeakSanitizer stays on.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
flags=(-rss_limit_mb=1024 -malloc_limit_mb=1024 -timeout=10 -max_len=16384 -print_final_stats=1
       "-artifact_prefix=$work/out/")
dict=$seeds/$(basename "$seeds").dict
[ -f "$dict" ] && flags+=("-dict=$dict")
report() {
  echo "FAIL: $(basename "$bin") found a crash; inputs:"
  for a in "$work"/out/*; do
    [ -f "$a" ] || continue
    echo "--- $(basename "$a") ($(stat -c %s "$a") bytes):" \
      "$(head -c 200 "$a" | od -An -c | head -4 | tr -s ' ')"
    if [ -n "$artifacts" ]; then
      mkdir -p "$artifacts" && cp "$a" "$artifacts/" &&
        echo "    saved to $artifacts/$(basename "$a")"
    fi
  done
  exit 1
}
if [ "$n" -gt 0 ]; then
  echo "replaying $n inputs from $seeds"
  "$bin" "${flags[@]}" "$work"/corpus/* >"$work/replay.log" 2>&1 || {
    tail -40 "$work/replay.log"
    echo "FAIL: a saved input still crashes: $(grep -o 'Running: .*' "$work/replay.log" | tail -1)"
    report; }
fi
echo "fuzzing $(basename "$bin") for ${secs}s"
"$bin" "${flags[@]}" -max_total_time="$secs" "$work/corpus" >"$work/fuzz.log" 2>&1 || {
  tail -60 "$work/fuzz.log"; report; }
tail -8 "$work/fuzz.log"
echo "PASS: no crash in ${secs}s"
