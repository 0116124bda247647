#!/usr/bin/env bash
# A real Prometheus scrapes a coordinator and a worker during a small GEMM job, with the alert
# rules of deploy/prometheus loaded; then every query of the Grafana dashboard must return data,
# every alert rule must evaluate without error, and the dashboard's variables must have values.
# Exits 77 (skipped) when prometheus is not installed.
. "$(dirname "$0")/lib.sh"
command -v prometheus >/dev/null || skip "prometheus is not installed (Debian: apt-get install prometheus)"
DASH=$SRC/deploy/grafana/kiln.json
start_coordinator 0
start_worker
wait_port "${WORKER_METRICS##*:}" 30 || die "worker metrics did not come up"
PPORT=$(free_port)
cat >"$WORK/prometheus.yml" <<Y
global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: ["$SRC/deploy/prometheus/rules/alerts.yml"]
scrape_configs:
  - job_name: kiln-coordinator
    static_configs: [{targets: ["$COORD_METRICS"]}]
  - job_name: kiln-worker
    static_configs: [{targets: ["$WORKER_METRICS"]}]
Y
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
  --web.listen-address="127.0.0.1:$PPORT" >"$WORK/prometheus.log" 2>&1 &
PIDS+=($!)
wait_port "$PPORT" 30 || die "prometheus did not start"
# Prometheus starts scraping a few seconds after it listens (its discovery updates are
# throttled): wait until it has scraped both targets, or a short job can end before the first
# scrape and leave its counters with a single sample, too few for rate().
for _ in $(seq 1 60); do
  n=$(python3 -c 'import json, sys, urllib.request
r = json.load(urllib.request.urlopen(sys.argv[1], timeout=5))["data"]["result"]
print(sum(x["value"][1] == "1" for x in r))' "http://127.0.0.1:$PPORT/api/v1/query?query=up" \
    2>/dev/null || echo 0)
  [ "$n" = 2 ] && break
  sleep 0.5
done
[ "$n" = 2 ] || die "prometheus did not scrape both targets within 30 s"
job=$(submit --op gemm --shape M=8,N=256,K=128 --chip cpu --budget 4) || die "submit failed"
kiln watch "$job" >"$WORK/watch.log" 2>&1 || die "the job failed: $(tail -3 "$WORK/watch.log")"
sleep 4  # a few more scrapes and rule evaluations after the job
python3 - "$DASH" "$PPORT" <<'PY' || die "queries came back empty or failed"
import json, re, sys, urllib.error, urllib.parse, urllib.request
dash, port = json.load(open(sys.argv[1])), sys.argv[2]
def api(path, **params):
    url = f"http://127.0.0.1:{port}/api/v1/{path}?" + urllib.parse.urlencode(params, doseq=True)
    try:
        return json.load(urllib.request.urlopen(url, timeout=10))
    except urllib.error.HTTPError as e:  # a bad query: 400 with an error body
        return {"status": "error", "error": e.read().decode(errors="replace")}
def walk(o, key, out):
    if isinstance(o, dict):
        if isinstance(o.get(key), str): out.append(o[key])
        for v in o.values(): walk(v, key, out)
    elif isinstance(o, list):
        for v in o: walk(v, key, out)
    return out
def concrete(e):  # what Grafana would send with every variable at "All"
    e = re.sub(r"\$\{?(__rate_interval|__interval|__range)\}?", "1m", e)
    e = re.sub(r'=~?\s*"\$\{?\w+\}?"', '=~".*"', e)
    return re.sub(r"\$\{?\w+\}?", ".*", e)
bad = []
exprs = walk(dash, "expr", [])
assert len(exprs) >= 10, f"only {len(exprs)} dashboard queries"
for e in exprs:
    r = api("query", query=concrete(e))
    if r.get("status") != "success" or not r["data"]["result"]: bad.append(f"no data: {e}")
for v in dash["templating"]["list"]:
    q = v.get("query")
    m = re.match(r"label_values\((\w+),\s*(\w+)\)", q.get("query", "") if isinstance(q, dict) else q or "")
    if m and not api(f"label/{m.group(2)}/values", **{"match[]": m.group(1)})["data"]:
        bad.append(f"variable {v['name']} has no values")
rules = [r for g in api("rules")["data"]["groups"] for r in g["rules"]]
assert len(rules) >= 5, f"only {len(rules)} alert rules loaded"
for rule in rules:  # may be empty (nothing is wrong), must not fail
    if api("query", query=rule["query"]).get("status") != "success":
        bad.append(f"alert {rule['name']} does not evaluate: {rule['query']}")
bad += [f"rule {r['name']}: {r.get('lastError')}" for r in rules if r.get("health") not in ("ok", "unknown")]
up = api("query", query="up")["data"]["result"]
bad += [f"target down: {u['metric']}" for u in up if u["value"][1] != "1"]
print(f"{len(exprs)} dashboard queries, {len(rules)} alert rules, {len(up)} targets checked")
for b in bad: print("  " + b)
sys.exit(1 if bad else 0)
PY
echo "PASS"
