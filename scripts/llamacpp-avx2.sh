#!/usr/bin/env bash
# llama.cpp's AVX2 code on any x86-64 machine: ../shared/peers/llamacpp/bench.sh's
# prebuilt libllama from npm, with ggml's CPU backend loaded from a folder that holds
# only its "haswell" variant (AVX2, FMA, F16C), so an AVX-512 machine runs what an
# AVX2-only one would. Beside lmlite's AVX2 level (GODEBUG=cpu.avx512f=off):
#   LLAMACPP_BENCH=scripts/llamacpp-avx2.sh GODEBUG=cpu.avx512f=off scripts/abab.sh --model M …
#   LMLITE_GODEBUG=cpu.avx512f=off scripts/typetriage.sh --peer scripts/llamacpp-avx2.sh M
# usage: scripts/llamacpp-avx2.sh --model M.gguf [--threads 2] [--prompt 512] [--gen 128] [--parallel 1] [--reps 3]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
peer=$here/../shared/peers/llamacpp
model="" threads=2 prompt=512 gen=128 parallel=1 reps=3
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=$2;; --threads) threads=$2;; --prompt) prompt=$2;; --gen) gen=$2;;
    --parallel) parallel=$2;; --reps) reps=$2;;
    *) echo "llamacpp-avx2.sh: unknown argument $1" >&2; exit 2;;
  esac
  shift 2
done
[ -f "$model" ] || { echo "llamacpp-avx2.sh: --model FILE is required" >&2; exit 2; }
dir=$("$peer/setup.sh")
lib=$dir/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
# bench.sh builds its harness on first use; a one-token run on the model does that.
[ -x "$dir/llamacpp-bench" ] && [ ! "$peer/bench.c" -nt "$dir/llamacpp-bench" ] ||
  "$peer/bench.sh" --model "$model" --threads 1 --prompt 1 --gen 1 --reps 1 >/dev/null
avx2=$dir/cpu-haswell-only
mkdir -p "$avx2"
ln -sf "$lib/libggml-cpu-haswell.so" "$avx2/libggml-cpu-haswell.so"
exec "$dir/llamacpp-bench" "$avx2" "$model" "$threads" "$prompt" "$gen" "$parallel" "$reps"
