#!/usr/bin/env bash
# CPU-time triage of the types against llama.cpp, for a loaded machine: the CPU time
# (user + sys, /usr/bin/time) of whole one-thread runs, model load included, of
# `lmlite bench` and ../shared/peers/llamacpp/bench.sh on the same file, alternated,
# --rounds times; prints one markdown row per model with each round's seconds, the
# ratios (lmlite ÷ llama.cpp, lower is better), `lmlite bench`'s slow_path, and the
# median tokens/s ratios (lmlite ÷ llama.cpp, higher is better: wall clock, so only
# a hint of which phase trails under load).
# usage: scripts/typetriage.sh [--rounds 2] [--prompt 128] [--gen 32] [--peer P] M.gguf ...
# --peer P runs P (same arguments as bench.sh) in place of llama.cpp's bench.sh, e.g. a
# wrapper that loads its AVX2 variant; LMLITE_GODEBUG=cpu.avx512f=off sets GODEBUG for
# lmlite's runs only (its AVX2 level on an AVX-512 machine).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
peer=${LLAMACPP_BENCH:-$here/../shared/peers/llamacpp/bench.sh}
lmlite=${LMLITE:-$here/bin/lmlite}
rounds=2 prompt=128 gen=32 models=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2;; --prompt) prompt=$2; shift 2;; --gen) gen=$2; shift 2;;
    --peer) peer=$2; shift 2;;
    -*) echo "typetriage.sh: unknown argument $1" >&2; exit 2;;
    *) models+=("$1"); shift;;
  esac
done
[ -x "$lmlite" ] || { echo "typetriage.sh: build first (make build)" >&2; exit 2; }
args=(--threads 1 --prompt "$prompt" --gen "$gen" --reps 1)
cpu() { # prints user+sys of the command; its stdout is appended to $out
  local t; t=$(mktemp)
  /usr/bin/time -f '%U %S' -o "$t" "$@" >>"$out" 2>/dev/null
  awk '{printf "%.2f", $1 + $2}' "$t"; rm -f "$t"
}
med() { sort -n | awk '{v[NR]=$1} END{if (NR%2) print v[(NR+1)/2]; else printf "%.2f", (v[NR/2]+v[NR/2+1])/2}'; }
out=$(mktemp)
echo "| model | lmlite s (CPU) | llama.cpp s (CPU) | ratios | median | slow_path | pp, tg ÷ llama.cpp (wall) | load |"
echo "|---|---|---|---|---|---|---|---|"
for m in "${models[@]}"; do
  a=() b=() r=() l0=$(cut -d' ' -f1 /proc/loadavg)
  : >"$out"
  cat "$m" >/dev/null # in the page cache for both programs (else lmlite, first, reads it cold)
  for i in $(seq "$rounds"); do
    x=$(cpu env ${LMLITE_GODEBUG:+GODEBUG="$LMLITE_GODEBUG"} "$lmlite" bench --model "$m" "${args[@]}" --json)
    y=$(cpu "$peer" --model "$m" "${args[@]}")
    a+=("$x") b+=("$y") r+=("$(awk -v x="$x" -v y="$y" 'BEGIN{printf "%.2f", x/y}')")
  done
  rest=$(python3 - "$out" <<'PY'
import json, sys, statistics
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
ours, peer = lines[0::2], lines[1::2]
slow = {}
for o in ours:
    slow.update(o.get("slow_path") or {})
pp = statistics.median(o["pp_tok_s"] / p["pp_tok_s"] for o, p in zip(ours, peer))
tg = statistics.median(o["tg_tok_s"] / p["tg_tok_s"] for o, p in zip(ours, peer))
print(f'{", ".join(f"{k} {v}" for k, v in sorted(slow.items())) or "none"} | {pp:.2f}, {tg:.2f}')
PY
)
  echo "| $(basename "$m" .gguf) | ${a[*]} | ${b[*]} | ${r[*]} | **$(printf '%s\n' "${r[@]}" | med)** | $rest | $l0–$(cut -d' ' -f1 /proc/loadavg) |"
done
rm -f "$out"
