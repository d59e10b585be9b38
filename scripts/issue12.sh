#!/usr/bin/env bash
# scripts/issue12.sh: issue 36's "no behaviour or speed change" line, the issue 12 protocol
# (docs/PERFORMANCE.md, "Issue 36's \"no speed change\": main against the commit
# before it"): d98c1fb (the commit before issue 36) against NEW, each side with its
# own lmlite and its own gwbench, in ABBA-ordered rounds (odd rounds d98c1fb first,
# even rounds NEW first, each row's two sides back to back):
#
#   gateway, fake upstream, 1 and 16 connections   gwbench --conns 1,16 --pairs 1
#   embedded (tiny, random weights), 1 and 16      gwbench --embedded --conns 1,16 --pairs 1
#   --parallel 16 (125m Q4_K_M, random weights)    lmlite bench --threads 2 --parallel 16
#                                                    --prompt 128 --gen 64 --reps 2 --json
#
# and prints, per row, each round's NEW ÷ d98c1fb ratio and their median: req/s and
# the gateway's CPU per request (gwbench's figure), prefill and decode tok/s (wall)
# and the bench run's CPU seconds (user + sys, /usr/bin/time).
#
# usage: scripts/issue12.sh [NEW]           NEW: a commit of $REPO (default: main's HEAD)
# environment (defaults):
#   REPO=(this checkout)  OLD=d98c1fb  ROUNDS=4  DUR=4s (gwbench segment length)
#   PAR_GEN=64 PAR_REPS=2 PAR_PROMPT=128 PAR_THREADS=2   the --parallel 16 run
#   ROWS="proxy emb par"         which rows to run
#   OUT=$Q/runs/<time>    where the raw JSON, times and the summary go
# Binaries: $Q/ (Q, default $TMPDIR/lmlite-issue12): {lmlite,gwbench}-<short commit>, built once from `git archive`
# of the commit (CGO_CFLAGS as the Makefile); delete them to rebuild.
# Run it on a quiet machine: loaded figures are noise (the script records the load
# average before each round).
set -euo pipefail

Q=${Q:-${TMPDIR:-/tmp}/lmlite-issue12} # binaries, sources, the model, runs: outside the repo
mkdir -p "$Q"
REPO=${REPO:-$(cd "$(dirname "$0")/.." && pwd)}
OLD=${OLD:-d98c1fb}
NEW=${1:-$(git -C "$REPO" rev-parse main)}
ROUNDS=${ROUNDS:-4}
DUR=${DUR:-4s}
PAR_GEN=${PAR_GEN:-64}
PAR_REPS=${PAR_REPS:-2}
PAR_PROMPT=${PAR_PROMPT:-128}
PAR_THREADS=${PAR_THREADS:-2}
ROWS=${ROWS:-proxy emb par}
export CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations"

old=$(git -C "$REPO" rev-parse --short=7 "$OLD")
new=$(git -C "$REPO" rev-parse --short=7 "$NEW")
OUT=${OUT:-$Q/runs/$(date -u +%Y%m%dT%H%M%S)-$old-$new}
mkdir -p "$OUT"

build() { # commit: lmlite-$c and gwbench-$c in $Q, from the commit's tree
	local c=$1 src=$Q/src-$1
	if [ -x "$Q/lmlite-$c" ] && [ -x "$Q/gwbench-$c" ]; then return; fi
	echo "building $c" >&2
	rm -rf "$src" && mkdir -p "$src"
	git -C "$REPO" archive "$c" | tar -x -C "$src"
	(cd "$src" && go build -o "$Q/lmlite-$c" ./cmd/lmlite && go build -o "$Q/gwbench-$c" ./gateway/internal/gwbench)
}
build "$old"
build "$new"

MODEL=$Q/125m-q4km.gguf # random weights; the same file for both sides
if [[ " $ROWS " == *" par "* ]] && [ ! -s "$MODEL" ]; then
	"$Q/lmlite-$new" gen-model --preset 125m --type q4_k_m --seed 1 --out "$MODEL" >&2
fi

{
	echo "old $OLD ($old), new $NEW ($new), rounds $ROUNDS, duration $DUR, rows: $ROWS"
	echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-) ($(nproc) CPUs), $(date -u)"
} | tee "$OUT/meta.txt" >&2

for r in $(seq 1 "$ROUNDS"); do
	if [ $((r % 2)) = 1 ]; then order="$old $new"; else order="$new $old"; fi
	echo "round $r ($order): load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/meta.txt" >&2
	for row in $ROWS; do
		for v in $order; do
			case $row in
			proxy) "$Q/gwbench-$v" --lmlite "$Q/lmlite-$v" --conns 1,16 --pairs 1 --duration "$DUR" --json "$OUT/proxy-$v-$r.json" >"$OUT/proxy-$v-$r.txt" 2>&1 ;;
			emb) "$Q/gwbench-$v" --lmlite "$Q/lmlite-$v" --embedded --conns 1,16 --pairs 1 --duration "$DUR" --json "$OUT/emb-$v-$r.json" >"$OUT/emb-$v-$r.txt" 2>&1 ;;
			par) /usr/bin/time -f '%e %U %S' -o "$OUT/par-$v-$r.time" "$Q/lmlite-$v" bench --model "$MODEL" --threads "$PAR_THREADS" \
				--parallel 16 --prompt "$PAR_PROMPT" --gen "$PAR_GEN" --reps "$PAR_REPS" --json >"$OUT/par-$v-$r.json" 2>"$OUT/par-$v-$r.err" ;;
			esac || echo "round $r: $row of $v failed (exit $?): see $OUT/$row-$v-$r.*; its ratios are left out" | tee -a "$OUT/meta.txt" >&2
		done
	done
done
echo "round ends: load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/meta.txt" >&2

python3 - "$OUT" "$old" "$new" "$ROUNDS" <<'EOF' | tee "$OUT/summary.txt"
import json, os, statistics, sys
out, old, new, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

def gw(kind, v, r, conns):
    """(req/s, the gateway's CPU µs per request) of one gwbench run at conns."""
    sets = load(f"{out}/{kind}-{v}-{r}.json")
    for s in sets or []:
        if s.get("conns") == conns:
            if any(g.get("errors") for g in s.get("segments", [])):
                return None, None  # failed requests: the figures are not valid
            segs = [g for g in s.get("segments", []) if g.get("side") not in ("direct", "bare")]
            cpu = statistics.mean(g["cpu_us_per_request"] for g in segs) if segs else None
            return s.get("gateway_rps"), cpu
    return None, None

def par(v, r):
    """(prefill tok/s, decode tok/s, CPU s) of one bench run."""
    b = load(f"{out}/par-{v}-{r}.json")
    try:
        with open(f"{out}/par-{v}-{r}.time") as f:
            e, u, s = map(float, f.read().split()[-3:])
        cpu = u + s
    except (OSError, ValueError):
        cpu = None
    if not b:
        return None, None, cpu
    return b.get("pp_tok_s"), b.get("tg_tok_s"), cpu

rows = []  # (name, unit, higher is better, getter(v, r))
for kind, label in (("proxy", "gateway, fake upstream"), ("emb", "embedded (tiny, random)")):
    for c in (1, 16):
        rows.append((f"{label}, {c} conn req/s", lambda v, r, k=kind, c=c: gw(k, v, r, c)[0]))
        rows.append((f"{label}, {c} conn CPU µs/req", lambda v, r, k=kind, c=c: gw(k, v, r, c)[1]))
rows.append(("--parallel 16 prefill tok/s (wall)", lambda v, r: par(v, r)[0]))
rows.append(("--parallel 16 decode tok/s (wall)", lambda v, r: par(v, r)[1]))
rows.append(("--parallel 16 run CPU s", lambda v, r: par(v, r)[2]))

print(f"{new} ÷ {old}, per round (ABBA: odd rounds {old} first) and median; "
      "req/s and tok/s: above 1 is faster; CPU: above 1 costs more")
print(f"{'row':44} {old+' → '+new+' medians':>24}  {'median':>7}  rounds")
for name, get in rows:
    ratios, olds, news = [], [], []
    for r in range(1, rounds + 1):
        a, b = get(old, r), get(new, r)
        if a and b:
            ratios.append(b / a)
            olds.append(a)
            news.append(b)
    if not ratios:
        continue
    med = statistics.median(ratios)
    print(f"{name:44} {statistics.median(olds):>11.4g} → {statistics.median(news):<10.4g}  {med:7.3f}  "
          + " ".join(f"{x:.3f}" for x in ratios))
EOF
echo "raw results in $OUT" >&2
