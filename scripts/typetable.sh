#!/usr/bin/env bash
# The 1b speed table of docs/PERFORMANCE.md's "Quantization types", one row per type:
# scripts/abab.sh (lmlite against llama.cpp, alternated) on DIR/llama-1b-T.gguf for
# each type T, prompt 512, gen 128, one repetition per run, 3 pairs. Run it on a
# quiet machine (nothing else running: it takes about an hour for every type).
#
# usage: scripts/typetable.sh [--dir DIR] [--pairs 3] [--gen-models] [T ...] >rows.md
#
# --gen-models first writes the missing models into DIR (outside the repo):
# gen-model for the types it quantizes, random blocks (TestWriteLatticeModels with
# LMLITE_LATTICE_RANDOM=1) for the lattice types and IQ4_NL, whose quantizers take
# from many minutes to an hour on the 1b shape. Without T, every type.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
lmlite=${LMLITE:-$here/bin/lmlite}
vocab=${VOCAB:-$here/../shared/testdata/tokenizer/ggml-vocab-llama-spm.gguf}
dir=$here/../models pairs=3 gen=0 types=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir=$2; shift 2;; --pairs) pairs=$2; shift 2;; --gen-models) gen=1; shift;;
    -*) echo "typetable.sh: unknown argument $1" >&2; exit 2;;
    *) types+=("$1"); shift;;
  esac
done
genmodel=(f16 bf16 q8_0 q6_k q5_k_m q5_1 q5_0 q4_k_m q4_1 q4_0 iq4_xs q3_k_m q2_k tq2_0 tq1_0)
random=(iq4_nl iq3_s iq3_xxs iq2_s iq2_xs iq2_xxs iq1_m iq1_s)
[ ${#types[@]} -gt 0 ] || types=("${genmodel[@]}" "${random[@]}")
[ -x "$lmlite" ] || { echo "typetable.sh: build first (make build)" >&2; exit 2; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
if [ $gen = 1 ]; then
  for t in "${types[@]}"; do
    m=$dir/llama-1b-$t.gguf
    [ -f "$m" ] && continue
    if [[ " ${random[*]} " == *" $t "* ]]; then
      (cd "$here/engine/model" && LMLITE_LATTICE_OUT=$dir LMLITE_LATTICE_RANDOM=1 LMLITE_LATTICE_PRESET=1b \
        LMLITE_LATTICE_VOCAB=$vocab LMLITE_LATTICE_TYPES=$t go test -count=1 -run 'TestWriteLatticeModels$' -timeout 1h . >&2)
    else
      "$lmlite" gen-model --arch llama --preset 1b --type "$t" --seed 1 --vocab "$vocab" --out "$m.tmp" && mv "$m.tmp" "$m"
    fi
  done
fi
echo "build $(git -C "$here" rev-parse --short HEAD), $(date -u '+%Y-%m-%d %H:%M') UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| model | threads | parallel | pp lmlite | pp llama.cpp | pp ratios | pp median | tg lmlite | tg llama.cpp | tg ratios | tg median |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for t in "${types[@]}"; do
  m=$dir/llama-1b-$t.gguf
  if [ ! -f "$m" ]; then echo "typetable.sh: no $m (--gen-models writes it)" >&2; continue; fi
  # The pairs' JSON lines go to stderr, the row to stdout; a failing type is named and skipped.
  "$here/scripts/abab.sh" --model "$m" --pairs "$pairs" --prompt 512 --gen 128 --reps 1 ||
    echo "typetable.sh: $t failed" >&2
done
echo "done $(date -u '+%H:%M') UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"
