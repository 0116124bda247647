#!/usr/bin/env bash
# Where a tuning trial's time goes: runs one local job (`kiln tune --local`, an empty kernel cache
# so every kernel is compiled) and prints each trial's kind, wall time, compile and measure
# seconds, sample count and racing outcome from the job's own records, then the median tuning
# trial and the job's wall time. Usage:
#   scripts/trial-times.sh [JOB-FLAGS...]     (default: --op gemm --shape M=16,N=14336,K=4096
#                                              --chip cpu --budget 16)
# KILN_BIN (default $KILN_BUILD_DIR/cli/kiln) picks the binary, to compare two builds.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${KILN_BUILD_DIR:-build}
KILN=${KILN_BIN:-$BUILD/cli/kiln}
[ -x "$KILN" ] || bash scripts/build.sh >/dev/null
[ $# -gt 0 ] || set -- --op gemm --shape M=16,N=14336,K=4096 --chip cpu --budget 16
for tool in protoc python3; do
  command -v "$tool" >/dev/null || { echo "trial-times: needs $tool (scripts/setup.sh)" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
start=$(date +%s.%N)
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE KILN_CACHE_DIR="$work/cache" \
  "$KILN" tune --local "$@" --data-dir "$work/data" >"$work/out.txt" 2>"$work/err.txt" || {
  echo "trial-times: the job failed:" >&2
  tail -5 "$work/err.txt" >&2
  exit 1
}
end=$(date +%s.%N)
python3 - "$work/data/kiln.db" "$start" "$end" <<'PY'
import re, sqlite3, statistics, subprocess, sys

db, start, end = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
tune = []
print(f"{'kind':10} {'trial s':>8} {'compile s':>9} {'measure s':>9} {'samples':>7}  racing")
for (body,) in sqlite3.connect(db).execute("SELECT body FROM trials ORDER BY seq"):
    text = subprocess.run(["protoc", "--proto_path=proto", "--decode=kiln.v1.Trial",
                           "kiln/v1/types.proto"], input=body, capture_output=True,
                          check=True).stdout.decode()
    field = lambda name: (re.search(r"\n\s*" + name + r": ([^\n]+)", text) or [None, ""])[1]
    kind, seconds = field("kind"), float(field("trial_seconds") or 0)
    racing = "raced" if field("raced") else "raced_ahead" if field("raced_ahead") else ""
    print(f"{kind:10} {seconds:8.3f} {float(field('compile_seconds') or 0):9.3f} "
          f"{float(field('measure_seconds') or 0):9.3f} {text.count('samples_us:'):7d}  {racing}")
    if kind == "TUNE":
        tune.append(seconds)
if tune:
    print(f"median tuning trial {statistics.median(tune):.3f} s over {len(tune)}; "
          f"job wall {end - start:.1f} s")
PY
