#!/usr/bin/env bash
# The Python client (clients/python/kiln_client) against a real coordinator and CPU worker on
# loopback: `python3 -m kiln_client.example` submits a small GEMM job, watches it and prints its
# results as JSON, which must parse, show the job SUCCEEDED and carry the best's median_us. Its
# modules are generated from proto/ into a fresh cache, so a .proto the generator cannot handle
# fails here. The coordinator requires role tokens (plaintext is allowed on loopback), so the
# example's --token-file travels as `authorization: Bearer`. Then the library's own calls: a bad
# spec is refused with the field named, no token is UNAUTHENTICATED, and a coordinator that is not
# there is a KilnError.
. "$(dirname "$0")/../integration/lib.sh"
PY=/usr/bin/python3  # Debian's python3-grpcio and python3-grpc-tools serve Debian's own python3
"$PY" -c 'import grpc, grpc_tools' 2>/dev/null ||
  skip "python3-grpcio or python3-grpc-tools missing (scripts/setup.sh installs them)"
export PYTHONPATH=$SRC/clients/python XDG_CACHE_HOME=$WORK/xdg
cd "$WORK"  # not the source tree: the package finds proto/ from its own location

tok() {
  "$KILN_CLI" token create --role "$1" --name "$2" --tokens-file "$WORK/tokens" \
    2>>"$WORK/token.log" | tail -1
}
tok submit py >"$WORK/submit.token" && tok worker w1 >"$WORK/worker.token" ||
  die "kiln token create failed"
start_coordinator 0 --tokens "$WORK/tokens"
start_worker --token-file "$WORK/worker.token"
timeout 240 "$PY" -m kiln_client.example --coordinator "$COORD" \
  --token-file "$WORK/submit.token" --budget 4 >"$WORK/example.out" 2>"$WORK/example.log" ||
  die "kiln_client.example exited $?"
grep -q "SUCCEEDED" "$WORK/example.log" || die "no progress line reached SUCCEEDED"
"$PY" - "$WORK/example.out" <<'PY' || die "the example's JSON: not a SUCCEEDED job with a median_us"
import json, sys
r = json.load(open(sys.argv[1]))
job = r["job"]
assert job["state"] == "SUCCEEDED", job.get("state")
assert job["spec"]["workload"]["op"] == "GEMM" and job["spec"]["workload"]["dims"]["N"] == 256
best = job["tasks"][0]["best"]
assert best["median_us"] > 0, best
assert r["trials"], "no trials"
PY
ls "$WORK"/xdg/kiln_client/*/kiln/v1/tuning_service_pb2_grpc.py >/dev/null ||
  die "no generated modules in the cache"

"$PY" - "$COORD" "$WORK/submit.token" <<'PY' || die "the library calls misbehaved"
import sys, grpc, kiln_client
coord, token = sys.argv[1], kiln_client.read_token_file(sys.argv[2])
with kiln_client.Client(coord, token=token) as kiln:
    try:
        kiln.submit({"op": "gemm", "shape": "M=8,N=x", "chip": "cpu"})
        raise SystemExit("a bad shape was accepted")
    except ValueError as e:
        assert "shape" in str(e), e
    try:
        kiln.submit({"op": "gemm", "shape": "M=8,N=64,K=64", "chip": "cpu", "budget": 0,
                     "bogus": 1})
        raise SystemExit("an unknown field was accepted")
    except ValueError as e:
        assert "bogus" in str(e), e
    try:  # the coordinator's own validation comes back as INVALID_ARGUMENT
        kiln.submit({"op": "gemm", "shape": "M=8,N=64", "chip": "cpu", "budget": 2})
        raise SystemExit("a GEMM without K was accepted")
    except kiln_client.KilnError as e:
        assert e.code == grpc.StatusCode.INVALID_ARGUMENT, e
    assert any(j["state"] == "SUCCEEDED" for j in kiln.jobs())
for bad in (None, "not-a-token"):
    with kiln_client.Client(coord, token=bad) as kiln:
        try:
            kiln.jobs()
            raise SystemExit(f"token {bad!r} accepted")
        except kiln_client.KilnError as e:
            assert e.code == grpc.StatusCode.UNAUTHENTICATED, e
try:
    kiln_client.Client(coord, token="two words")
    raise SystemExit("a token with a space was accepted")
except ValueError:
    pass
with kiln_client.Client("127.0.0.1:1", timeout=5) as kiln:
    try:
        kiln.job("nope")
        raise SystemExit("an absent coordinator answered")
    except kiln_client.KilnError as e:
        assert e.code == grpc.StatusCode.UNAVAILABLE and "cannot reach" in str(e), e
# Several addresses (a leader and its standbys): a dead first one is passed over.
with kiln_client.Client("127.0.0.1:1," + coord, token=token, timeout=5) as kiln:
    assert any(j["state"] == "SUCCEEDED" for j in kiln.jobs())
PY
# TLS: the same coordinator restarted with a server certificate (the job kept in its data dir) is
# read with tls_ca and the token; a plaintext client is not served.
bash "$SRC/scripts/gen-certs.sh" "$WORK/pki" >"$WORK/pki.log" 2>&1 || die "gen-certs.sh failed"
job=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["job"]["id"])' \
  "$WORK/example.out")
kill "$COORD_PID"; wait "$COORD_PID" 2>/dev/null || true
start_coordinator 0 --tls-cert "$WORK/pki/server.pem" --tls-key "$WORK/pki/server.key" \
  --tokens "$WORK/tokens"
tls_calls() { "$PY" - "$COORD" "$WORK/submit.token" "$WORK/pki/ca.pem" "$job"; }
tls_calls <<'PY' || die "the TLS calls misbehaved"
import sys, grpc, kiln_client
coord, token_file, ca, job = sys.argv[1:]
token = kiln_client.read_token_file(token_file)
with kiln_client.Client(coord, tls_ca=ca, token=token) as kiln:
    assert kiln.wait(job)["state"] == "SUCCEEDED"
    assert kiln.results(job)["job"]["tasks"][0]["best"]["median_us"] > 0
with kiln_client.Client(coord, token=token, timeout=5) as kiln:
    try:
        kiln.job(job)
        raise SystemExit("a plaintext client was served by a TLS coordinator")
    except kiln_client.KilnError as e:
        assert e.code == grpc.StatusCode.UNAVAILABLE, e
PY
echo "PASS: python client"
