#!/usr/bin/env bash
# The deployment files are valid: Prometheus config and alert rules (promtool check, and the
# alert unit tests), the Grafana dashboard (JSON, unique panel ids, every metric documented), the
# Kubernetes manifests (kubectl kustomize renders a worker DaemonSet per chip type) and the
# systemd units (systemd-analyze verify). A missing tool skips its part; all missing: 77.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
D=$SRC/deploy
WORK=$(mktemp -d /tmp/kiln-deploy-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
ran=0 skipped=()
fail() { echo "FAIL: $*" >&2; exit 1; }

if command -v promtool >/dev/null; then
  promtool check config "$D/prometheus/prometheus.yml" >"$WORK/p.log" 2>&1 || { cat "$WORK/p.log"; fail "promtool check config"; }
  promtool check rules "$D/prometheus/rules/alerts.yml" >"$WORK/p.log" 2>&1 || { cat "$WORK/p.log"; fail "promtool check rules"; }
  (cd "$D/prometheus/rules" && promtool test rules alerts_test.yml) >"$WORK/p.log" 2>&1 || { cat "$WORK/p.log"; fail "promtool test rules"; }
  echo "prometheus: config, rules and alert unit tests pass"; ran=$((ran + 1))
else skipped+=("promtool (apt-get install prometheus)"); fi

python3 - "$D/grafana/kiln.json" "$SRC/docs/metrics.md" <<'PY' || fail "dashboard"
import json, re, sys
d = json.load(open(sys.argv[1]))
documented = set(re.findall(r"`(kiln_\w+)", open(sys.argv[2]).read()))
panels = d["panels"]
ids = [p["id"] for p in panels]
assert len(ids) == len(set(ids)), "duplicate panel ids"
exprs = [t["expr"] for p in panels for t in p.get("targets", [])]
for e in exprs:  # every metric a query names is in the catalogue (catches typos)
    for m in re.findall(r"\b(kiln_\w+)", e):
        base = re.sub(r"_(bucket|count|sum)$", "", m)
        assert base in documented or m in documented, f"{m} is not in docs/metrics.md ({e})"
print(f"grafana: {len(panels)} panels, {len(exprs)} queries, all metrics documented")
PY
ran=$((ran + 1))

if command -v kubectl >/dev/null; then
  kubectl kustomize "$D/kubernetes" >"$WORK/k8s.yaml" 2>"$WORK/k8s.err" || { cat "$WORK/k8s.err"; fail "kubectl kustomize"; }
  for chip in cpu cuda opencl; do
    grep -q "name: kiln-worker-$chip$" "$WORK/k8s.yaml" || fail "no kiln-worker-$chip DaemonSet"
  done
  [ "$(grep -c '^kind: DaemonSet' "$WORK/k8s.yaml")" = 3 ] || fail "expected 3 worker DaemonSets"
  grep -q "^kind: StatefulSet" "$WORK/k8s.yaml" || fail "no PostgreSQL StatefulSet"
  grep -q "nvidia.com/gpu: 1" "$WORK/k8s.yaml" || fail "the cuda workers ask for no GPU"
  echo "kubernetes: kustomize renders $(grep -c '^kind:' "$WORK/k8s.yaml") objects"; ran=$((ran + 1))
else skipped+=("kubectl (apt-get install kubernetes-client)"); fi

if command -v systemd-analyze >/dev/null; then
  mkdir "$WORK/units"
  for f in "$D"/systemd/*.service; do  # the binaries are not installed here: /bin/true stands in
    sed -e 's|/usr/local/bin/kiln-[a-z]*|/bin/true|' "$f" >"$WORK/units/$(basename "$f")"
  done
  SYSTEMD_LOG_LEVEL=warning systemd-analyze verify --man=no "$WORK"/units/*.service >"$WORK/sd.log" 2>&1 || true
  [ ! -s "$WORK/sd.log" ] || { cat "$WORK/sd.log"; fail "systemd-analyze verify"; }
  echo "systemd: units verify"; ran=$((ran + 1))
else skipped+=("systemd-analyze"); fi

for s in "${skipped[@]:-}"; do [ -n "$s" ] && echo "skipped: $s"; done
[ "$ran" -gt 1 ] || exit 77
echo "PASS"
