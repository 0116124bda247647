#!/usr/bin/env bash
# A coordinator whose data dir is on a small tmpfs runs a job on a simulated device while the disk
# fills and empties, and is restarted once: it never aborts, and the trials counted equal the
# budget exactly (a refused store write changes nothing in memory; the trial is answered again).
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || skip "needs root to mount a tmpfs (mount -t tmpfs)"
MNT=$WORK/mnt
mkdir -p "$MNT"
mount -t tmpfs -o size=64m tmpfs "$MNT" 2>/dev/null || skip "mount -t tmpfs is not permitted here"
unmount() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true; done
  sleep 0.3
  umount -l "$MNT" 2>/dev/null || true
  cleanup
}
trap unmount EXIT
alive() { kill -0 "$COORD_PID" 2>/dev/null || die "the coordinator died ($1)"; }
count() {  # trials answered so far
  kiln results "$job" --json | python3 -c \
    'import json,sys; t=json.load(sys.stdin)["tasks"][0]["trials"]; print(t["ok"]+t["failed"])'
}

start_coordinator 0 --data-dir "$MNT/data"
PORT=${COORD##*:}
start_worker --device sim:systolic-128x128 --name w-sim
budget=5000  # sim trials take milliseconds: enough to outlast the filling, on a loaded host too
job=$(submit --op gemm --shape M=64,N=1024,K=1024 --chip sim --budget $budget)
for _ in $(seq 200); do n=$(count); [ "$n" -ge 3 ] && break; sleep 0.1; done
[ "$n" -ge 3 ] || die "no progress before the disk filled"

# Fill the disk: every store write (and checkpoint save) now fails.
dd if=/dev/zero of="$MNT/fill" bs=64k 2>/dev/null || true
before=$(count)
refusals() { cat "$WORK/coordinator.log" "$WORK/worker.log" | grep -c "disk is full\|No space left" || true; }
for _ in $(seq 40); do [ "$(refusals)" -ge 1 ] && break; sleep 0.2; done
sleep 2
alive "disk full"
[ "$(refusals)" -ge 1 ] || die "the disk filled but no store write was refused: nothing was tested"
echo "refusals logged while the disk was full: $(refusals)"
grep -m3 "disk is full\|No space left" "$WORK/coordinator.log" "$WORK/worker.log" || true

# Space again; then kill -9 the coordinator once and start it on the same data dir.
rm -f "$MNT/fill"
sleep 2
alive "after the disk emptied"
kill -9 "$COORD_PID"; wait "$COORD_PID" 2>/dev/null || true
start_coordinator "$PORT" --data-dir "$MNT/data"
timeout 60 "$KILN_CLI" --coordinator "$COORD" watch "$job" >"$WORK/watch.log" 2>&1 ||
  die "job did not succeed after the restart: $(tail -3 "$WORK/watch.log")"
alive "at the end"
kiln results "$job" --json >"$WORK/results.json"
python3 - "$WORK/results.json" "$budget" <<'PY' || die "trials not counted exactly once"
import json, sys
d = json.load(open(sys.argv[1])); budget = int(sys.argv[2])
assert d["state"] == "SUCCEEDED", d["state"]
t = d["tasks"][0]["trials"]
assert t["ok"] + t["failed"] == budget, (t, budget)
print("disk full ok:", t)
PY
! grep -q "terminate called\|Aborted\|core dumped" "$WORK/coordinator.log" || die "the coordinator aborted"
echo "PASS (answered $before before the disk filled)"
