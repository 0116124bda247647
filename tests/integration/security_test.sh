#!/usr/bin/env bash
# TLS, worker client certificates and role tokens through the real binaries: certificates from
# scripts/gen-certs.sh and tokens from `kiln token create`; a plaintext client, a missing token,
# a worker token submitting, a submitter reading another's job and a worker without a client
# certificate are refused; a submitter's own job and a certified worker with a token get through.
. "$(dirname "$0")/lib.sh"
command -v openssl >/dev/null || skip "openssl is not installed (scripts/setup.sh installs it)"
P=$WORK/pki
bash "$SRC/scripts/gen-certs.sh" "$P" >"$WORK/pki.log" 2>&1 || die "gen-certs.sh failed: $(tail -3 "$WORK/pki.log")"
for f in ca.pem ca.key server.pem server.key worker.pem worker.key; do [ -s "$P/$f" ] || die "no $f"; done
[ "$(stat -c %a "$P/server.key")" = 600 ] && [ "$(stat -c %a "$P/worker.key")" = 600 ] || die "keys are not 0600"

tok() { "$KILN_CLI" token create --role "$1" --name "$2" --tokens-file "$WORK/tokens" 2>>"$WORK/token.log" | tail -1; }
tok submit alice >"$WORK/alice.token"; tok submit bob >"$WORK/bob.token"; tok worker lab-1 >"$WORK/worker.token"
for t in alice bob worker; do [ "$(wc -c <"$WORK/$t.token")" -gt 40 ] || die "kiln token create printed no token for $t"; done
[ "$(stat -c %a "$WORK/tokens")" = 600 ] || die "the tokens file is not 0600"
[ "$(grep -c . "$WORK/tokens")" = 3 ] || die "expected 3 lines in the tokens file: $(cat "$WORK/tokens")"
grep -q "$(cat "$WORK/alice.token")" "$WORK/tokens" && die "the tokens file holds a token in clear"
if "$KILN_CLI" token create --role root --name x --tokens-file "$WORK/tokens" >/dev/null 2>&1; then die "role root accepted"; fi
if "$KILN_CLI" token create --role submit --name "a b" --tokens-file "$WORK/tokens" >/dev/null 2>&1; then die "a name with a space accepted"; fi

start_coordinator 0 --tls-cert "$P/server.pem" --tls-key "$P/server.key" --tls-client-ca "$P/ca.pem" \
  --tokens "$WORK/tokens"
SEC=(--tls-ca "$P/ca.pem")
as() { local who=$1; shift; kiln "${SEC[@]}" --token-file "$WORK/$who.token" "$@"; }
refused() {  # refused TEXT COMMAND...: the command fails and says TEXT
  local want=$1; shift
  if "$@" >"$WORK/refused.out" 2>&1; then die "accepted: $*"; fi
  grep -q "$want" "$WORK/refused.out" || die "expected $want from $*: $(cat "$WORK/refused.out")"
}

if kiln jobs >"$WORK/plain.out" 2>&1; then die "a plaintext client was served"; fi
refused UNAUTHENTICATED kiln "${SEC[@]}" jobs
echo "not-a-token" >"$WORK/wrong.token"
refused UNAUTHENTICATED as wrong jobs
refused PERMISSION_DENIED as worker submit --op gemm --shape M=8,N=64,K=64 --chip sim --budget 2
refused "cannot read $WORK/nope.token" kiln "${SEC[@]}" --token-file "$WORK/nope.token" jobs

job=$(as alice submit --op gemm --shape M=8,N=64,K=64 --chip sim --budget 4 --json | tail -1 |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["job_id"])') || die "alice could not submit"
KILN_TLS_CA=$P/ca.pem KILN_TOKEN_FILE=$WORK/alice.token kiln jobs >"$WORK/alice-jobs.txt" || die "alice: kiln jobs failed"
grep -q "$job" "$WORK/alice-jobs.txt" || die "alice's job is not listed for her (KILN_TLS_CA, KILN_TOKEN_FILE)"
as bob jobs >"$WORK/bob-jobs.txt" || die "bob: kiln jobs failed"
grep -q "$job" "$WORK/bob-jobs.txt" && die "bob lists alice's job"
refused PERMISSION_DENIED as bob results "$job"
refused PERMISSION_DENIED as bob cancel "$job"

# A worker with the CA and a worker token but no client certificate does not register.
timeout 6 "$WORKER_BIN" --coordinator "$COORD" --device sim:systolic-128x128 "${SEC[@]}" \
  --token-file "$WORK/worker.token" --metrics-listen "127.0.0.1:$(free_port)" >"$WORK/nocert.log" 2>&1 || true
registered() { as alice workers >"$WORK/workers.txt" 2>&1 && grep -q " w-" "$WORK/workers.txt"; }
registered && die "a worker without a client certificate registered"
"$WORKER_BIN" --coordinator "$COORD" --device sim:systolic-128x128 "${SEC[@]}" --tls-cert "$P/worker.pem" \
  --tls-key "$P/worker.key" --metrics-listen "127.0.0.1:$(free_port)" >"$WORK/notoken.log" 2>&1 &
NOTOKEN_PID=$!; PIDS+=($NOTOKEN_PID)
sleep 2; kill "$NOTOKEN_PID" 2>/dev/null || true
registered && die "a worker without a token registered"
if "$WORKER_BIN" --coordinator "$COORD" --device sim:systolic-128x128 --tls-ca "$WORK/nope.pem" \
  >"$WORK/badca.log" 2>&1; then die "a worker with a missing --tls-ca started"; fi
grep -q "nope.pem" "$WORK/badca.log" || die "the worker's error does not name the missing file"

"$WORKER_BIN" --coordinator "$COORD" --device sim:systolic-128x128 "${SEC[@]}" --tls-cert "$P/worker.pem" \
  --tls-key "$P/worker.key" --token-file "$WORK/worker.token" --metrics-listen "127.0.0.1:$(free_port)" \
  >"$WORK/worker.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do registered && break; sleep 0.2; done
registered || die "the worker with a certificate and a token did not register"
timeout 120 "$KILN_CLI" --coordinator "$COORD" "${SEC[@]}" --token-file "$WORK/alice.token" watch "$job" \
  >"$WORK/watch.out" 2>&1 || die "alice's job did not succeed: $(tail -2 "$WORK/watch.out")"
as alice results "$job" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["state"] == "SUCCEEDED", d["state"]' ||
  die "alice cannot read her results"

metrics=$(curl -sf "http://$COORD_METRICS/metrics") || die "no coordinator metrics"
for r in no_token unknown_token wrong_role not_owner no_client_certificate; do
  grep -Eq "^kiln_rpc_refused_total\{reason=\"$r\"\} [1-9]" <<<"$metrics" || die "kiln_rpc_refused_total{reason=$r} not counted"
done

# Beyond loopback without TLS and tokens: refused before anything is opened.
if timeout 5 "$COORD_BIN" --listen "0.0.0.0:$(free_port)" --data-dir "$WORK/exposed" \
  --metrics-listen "127.0.0.1:$(free_port)" >"$WORK/exposed.log" 2>&1; then die "an exposed coordinator started"; fi
grep -q -- "--insecure" "$WORK/exposed.log" || die "the refusal does not say how: $(cat "$WORK/exposed.log")"
# A malformed tokens file names its line.
printf 'submit alice %s\nadmin\n' "$(printf x | sha256sum | cut -c1-64)" >"$WORK/bad-tokens"
if timeout 5 "$COORD_BIN" --listen "127.0.0.1:0" --data-dir "$WORK/bad" --metrics-listen "" \
  --tokens "$WORK/bad-tokens" >"$WORK/badtokens.log" 2>&1; then die "a malformed tokens file was accepted"; fi
grep -q "line 2" "$WORK/badtokens.log" || die "the tokens error does not name line 2: $(cat "$WORK/badtokens.log")"
kill -0 "$COORD_PID" || die "the coordinator died"
echo "PASS"
