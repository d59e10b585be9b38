#!/usr/bin/env bash
# Runs every shipped scenario against one server and keeps each report in
# OUTDIR/NAME/ (report.json, report.html, summary.txt).
#   loadtest/scenarios/run-all.sh [TARGET] [OUTDIR] [extra loadtest flags...]
# e.g. loadtest/scenarios/run-all.sh http://127.0.0.1:8080 docs/loadtest --duration 20s
set -euo pipefail
cd "$(dirname "$0")/../.."
target=${1:-http://127.0.0.1:8080}
outdir=${2:-out/loadtest}
shift $(( $# < 2 ? $# : 2 ))
bin=${LMLITE:-bin/lmlite}
[ -x "$bin" ] || go build -o "$bin" ./cmd/lmlite
for f in loadtest/scenarios/*.yaml; do
  name=$(basename "$f" .yaml)
  echo "== $name"
  mkdir -p "$outdir/$name"
  "$bin" loadtest --quiet --scenario "$f" --target "$target" --out "$outdir/$name" "$@" | tee "$outdir/$name/summary.txt"
done
