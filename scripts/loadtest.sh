#!/usr/bin/env bash
# Runs the shipped load-test scenarios against a fresh `lmlite serve` on loopback.
#
#   scripts/loadtest.sh [--out DIR] [--config FILE] [SCENARIO ...] [-- extra `lmlite loadtest` flags]
#
#   scripts/loadtest.sh                         # every scenario, reports in out/loadtest/NAME/
#   scripts/loadtest.sh --out docs/loadtest     # refresh the committed reports
#   scripts/loadtest.sh steady-chat -- --duration 10s
#   LMLITE=/tmp/old/lmlite scripts/loadtest.sh --out /tmp/old-reports   # another build
#
# In a temporary directory (removed at the end) it generates the models that
# configs/loadtest.yaml names (seeded, so every run gets the same files), creates one
# API key per tenant of the config with `lmlite keys create` (the server is stopped,
# so the command opens the store itself) and exports it as LMLITE_KEY_<TENANT> (upper
# case, "-" as "_"), the variable the scenarios' api_key_env name. Then, for each
# scenario, it starts `lmlite serve --config configs/loadtest.yaml` on a free loopback
# port, waits for /readyz, runs `lmlite loadtest`, saves each tenant's spend from the
# admin API, and stops the server: every scenario starts on a fresh server (with an
# empty ledger for its tenants, as each scenario has tenants of its own).
#
# --config serves another configuration: one with the same generated models
# (models/lt-fast.gguf, lt-balanced, lt-deep) and its tenants on "  - {id: NAME, ...}"
# lines, e.g. a variant of configs/loadtest.yaml.
#
# DIR/NAME/ gets report.json, report.html, summary.txt (the terminal summary),
# usage.json (GET /admin/usage per tenant after the run), metrics.txt (the server's
# prefix-cache, KV and batch metrics from /metrics after the run) and run.txt (the
# commit, the models, and the machine's load average before and after: the machine
# may be shared).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=out/loadtest
cfg=configs/loadtest.yaml
scenarios=()
extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    --config) cfg=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) scenarios+=("$1"); shift ;;
  esac
done
if [ ${#scenarios[@]} -eq 0 ]; then
  for f in loadtest/scenarios/*.yaml; do scenarios+=("$(basename "$f" .yaml)"); done
fi
case $out in /*) ;; *) out=$root/$out ;; esac
case $cfg in /*) ;; *) cfg=$root/$cfg ;; esac
if [ -n "${LMLITE:-}" ]; then   # LMLITE=path/to/lmlite runs another build (e.g. to compare two)
  bin=$(cd "$(dirname "$LMLITE")" && pwd)/$(basename "$LMLITE")
else
  bin=$root/bin/lmlite
  go build -o "$bin" ./cmd/lmlite
fi

tmp=$(mktemp -d -t lmlite-loadtest.XXXXXX)
pid=
stop_server() {
  if [ -n "$pid" ]; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    pid=
  fi
}
trap 'stop_server; rm -rf "$tmp"' EXIT

mkdir -p "$tmp/models"
models=
gen() {
  "$bin" gen-model --arch "$2" --preset "$3" --type "$4" --seed "$5" --out "$tmp/models/$1.gguf"
  models="$models${models:+, }$1 = $2 $3 $4 seed $5"
}
gen lt-fast llama tiny q8_0 1
gen lt-balanced qwen3 tiny q4_k_m 2
gen lt-deep llama 125m q4_k_m 1

# The tenants are the config's "- {id: NAME, ...}" lines.
tenants=$(sed -n 's/^  - {id: \([a-z0-9-]*\),.*/\1/p' "$cfg")
for t in $tenants; do
  var=LMLITE_KEY_$(echo "$t" | tr 'a-z-' 'A-Z_')
  if ! key=$(cd "$tmp" && "$bin" keys create --config "$cfg" --tenant "$t" 2>"$tmp/keys.log"); then
    cat "$tmp/keys.log" >&2
    exit 1
  fi
  export "$var=$key"
done
LMLITE_ADMIN_KEY=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
export LMLITE_ADMIN_KEY

start_server() {
  (cd "$tmp" && exec "$bin" serve --config "$cfg" --listen 127.0.0.1:0) >"$tmp/serve.log" 2>&1 &
  pid=$!
  target=
  for _ in $(seq 600); do
    if [ -z "$target" ]; then
      target=$(sed -n 's|^OpenAI base URL: \(http://.*\)/v1$|\1|p' "$tmp/serve.log")
    fi
    if [ -n "$target" ] && curl -fs -o /dev/null "$target/readyz"; then
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then break; fi
    sleep 0.1
  done
  echo "lmlite serve did not become ready:" >&2
  cat "$tmp/serve.log" >&2
  exit 1
}

status=0
for name in "${scenarios[@]}"; do
  f=loadtest/scenarios/$name.yaml
  [ -f "$f" ] || { echo "no scenario $f" >&2; exit 2; }
  echo "== $name"
  start_server
  mkdir -p "$out/$name"
  {
    echo "scenario: $name"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')${LMLITE:+; binary $LMLITE}"
    echo "command: scripts/loadtest.sh --config ${cfg#"$root"/} $name${extra[*]+ -- ${extra[*]}}"
    echo "models: $models"
    echo "cpus: $(nproc)"
    echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  } >"$out/$name/run.txt"
  "$bin" loadtest --quiet --scenario "$f" --target "$target" --out "$out/$name" ${extra[@]+"${extra[@]}"} \
    | tee "$out/$name/summary.txt" || status=1
  {
    echo "{"
    sep=
    for t in $(sed -n 's/^  - name: \(.*\)$/\1/p' "$f"); do
      printf '%s  "%s": %s' "$sep" "$t" "$(curl -fs -H "Authorization: Bearer $LMLITE_ADMIN_KEY" "$target/admin/usage?tenant=$t")"
      sep=$',\n'
    done
    printf '\n}\n'
  } >"$out/$name/usage.json"
  curl -fs "$target/metrics" | grep -E '^lmlite_(engine_prefix_cache|prefix_cache|engine_kv|engine_step|tokens_total)' \
    >"$out/$name/metrics.txt" || true
  echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/$name/run.txt"
  stop_server
done
exit $status
