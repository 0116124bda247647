#!/usr/bin/env bash
# `cmake --install` gives a relocatable installation: installed into one prefix and then moved,
# the binaries hold no path of the build tree, the worker runs its tuning trials in the installed
# libexec/kiln/kiln-trial, and a job runs to the end through the installed daemons and client.
. "$(dirname "$0")/lib.sh"
command -v cmake >/dev/null || skip "cmake is not installed"
BUILD_DIR=$(cd "$BIN" && pwd -P)
unset KILN_TRIAL_EXECUTABLE  # the lookup from the executable is what is tested
for component in coordinator worker client; do
  cmake --install "$BIN" --prefix "$WORK/staged" --component "$component" >"$WORK/install.log" 2>&1 ||
    { cat "$WORK/install.log" >&2; die "cmake --install --component $component failed"; }
done
mv "$WORK/staged" "$WORK/moved"  # relocated: nothing may depend on where it was installed
P=$WORK/moved
for f in bin/kiln-coordinator bin/kiln-worker bin/kiln libexec/kiln/kiln-trial; do
  [ -x "$P/$f" ] || die "$f was not installed"
done
if found=$(grep -l -a -F "$BUILD_DIR" "$P"/bin/* "$P"/libexec/kiln/*); then
  die "installed binaries name the build tree $BUILD_DIR: $found"
fi

COORD_BIN=$P/bin/kiln-coordinator WORKER_BIN=$P/bin/kiln-worker KILN_CLI=$P/bin/kiln
start_coordinator 0
start_worker
kiln submit --op gemm --shape M=4,N=64,K=32 --chip cpu --budget 4 --wait >"$WORK/submit.log" 2>&1 ||
  die "the job failed: $(tail -5 "$WORK/submit.log")"
grep -q "tuning trials run in $P/libexec/kiln/kiln-trial$" "$WORK/worker.log" ||
  die "the worker did not pick the installed kiln-trial: $(grep -m1 'trials run in' "$WORK/worker.log")"
kill -TERM "$WORKER_PID"; wait "$WORKER_PID" || die "worker did not exit 0 on SIGTERM"
kill -TERM "$COORD_PID"; wait "$COORD_PID" || die "coordinator did not exit 0 on SIGTERM"
echo "PASS"
