#!/usr/bin/env bash
# Side-by-side speed against llama.cpp, as docs/PERFORMANCE.md reports it: runs
# `lmlite bench --json` and ../shared/peers/llamacpp/bench.sh alternately (ABAB...) on
# the same file with the same arguments, then prints each pair's ratios and the median
# of the pair-by-pair ratios as one markdown table row.
# usage: scripts/abab.sh --model M.gguf [--pairs 3] [--threads 2] [--prompt 512] [--gen 128] [--parallel 1] [--reps 3]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
peer=${LLAMACPP_BENCH:-$here/../shared/peers/llamacpp/bench.sh}
lmlite=${LMLITE:-$here/bin/lmlite}
model="" pairs=3 threads=2 prompt=512 gen=128 parallel=1 reps=3
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=$2;; --pairs) pairs=$2;; --threads) threads=$2;; --prompt) prompt=$2;;
    --gen) gen=$2;; --parallel) parallel=$2;; --reps) reps=$2;;
    *) echo "abab.sh: unknown argument $1" >&2; exit 2;;
  esac
  shift 2
done
[ -f "$model" ] || { echo "abab.sh: --model FILE is required" >&2; exit 2; }
[ -x "$lmlite" ] || { echo "abab.sh: build first (make build)" >&2; exit 2; }
args=(--model "$model" --threads "$threads" --prompt "$prompt" --gen "$gen" --parallel "$parallel" --reps "$reps")
out=$(mktemp)
for i in $(seq "$pairs"); do
  a=$("$lmlite" bench "${args[@]}" --json)
  b=$("$peer" "${args[@]}")
  echo "pair $i lmlite: $a" >&2
  echo "pair $i llama.cpp: $b" >&2
  printf '%s\n%s\n' "$a" "$b" >>"$out"
done
python3 - "$out" "$model" "$threads" "$parallel" <<'PY'
import json, sys, statistics, os
lines = [json.loads(l) for l in open(sys.argv[1])]
pairs = list(zip(lines[0::2], lines[1::2]))
pp = [a["pp_tok_s"] / b["pp_tok_s"] for a, b in pairs]
tg = [a["tg_tok_s"] / b["tg_tok_s"] for a, b in pairs]
f = lambda xs: " ".join(f"{x:.2f}" for xs_ in [xs] for x in xs_)
print(f"| {os.path.basename(sys.argv[2])} | {sys.argv[3]} | {sys.argv[4]} "
      f"| {statistics.median(a['pp_tok_s'] for a,_ in pairs):.1f} | {statistics.median(b['pp_tok_s'] for _,b in pairs):.1f} | {f(pp)} | **{statistics.median(pp):.2f}** "
      f"| {statistics.median(a['tg_tok_s'] for a,_ in pairs):.1f} | {statistics.median(b['tg_tok_s'] for _,b in pairs):.1f} | {f(tg)} | **{statistics.median(tg):.2f}** |")
PY
rm -f "$out"
