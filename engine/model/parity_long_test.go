package model

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/engine/genmodel"
)

// TestParityWithLlamaCppLongPrompt is the parity test for prompts long enough for
// llama.cpp's tiled float32 flash attention (a ubatch of 64 queries or more,
// GGML_FA_TILE_Q) and for our float32 attention mode (AttnF32, the default for such
// prompts on AVX-512): llama.cpp evaluates a prompt of 320 tokens (five full
// 64-position chunks and a part) and continues it greedily for 64 steps; we score
// the same sequence in AttnF32 mode and compare the 64 next-token distributions
// with the parity test's limits (top-1 at most 2 misses in 64, mean KL over
// llama.cpp's top 20 below 1e-2 for quantized types, and below 1e-4 for the float
// type, which is what makes the test see a broken attention). The binary16 mode (AttnF16: the default where the float32 kernels have no assembly)
// is held to the same limits on the same prompt.
//
// LMLITE_PARITY_LONG_MODELS (GGUF paths, comma-separated) and
// LMLITE_PARITY_LONG_PROMPTS (prompt lengths, comma-separated) run it on other
// models and lengths instead, e.g. the 125m bench model at 512 and 2048 tokens.
func TestParityWithLlamaCppLongPrompt(t *testing.T) {
	if testing.Short() {
		t.Skip("parity with llama.cpp runs node; skipped in -short")
	}
	if raceEnabled {
		t.Skip("pure numerics: make test runs it without the race detector")
	}
	script := peerLogitsScript(t)
	const steps, top = 64, 20
	prompts := []int{320}
	if s := os.Getenv("LMLITE_PARITY_LONG_PROMPTS"); s != "" {
		prompts = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n < 1 {
				t.Fatalf("LMLITE_PARITY_LONG_PROMPTS: %q", f)
			}
			prompts = append(prompts, n)
		}
	}
	type job struct {
		path  string
		klMax float64
	}
	var jobs []job
	if s := os.Getenv("LMLITE_PARITY_LONG_MODELS"); s != "" {
		for _, p := range strings.Split(s, ",") {
			jobs = append(jobs, job{p, 1e-2})
		}
	} else {
		dir := t.TempDir()
		for _, typ := range []string{"f16", "q8_0", "q4_k_m"} {
			// The float model holds the attention to 1e-4, tighter than the
			// issue's 1e-3 for float types: with no quantized products in the
			// way, llama.cpp's own two paths agree with each other at KL 1.5e-5
			// and ours with each at 6e-6, while a float32 attention that leaves
			// out each query's own position (the causal end off by one) gives
			// 6.8e-4 here, within 1e-3 (and the quantized models stay within
			// 1e-2 with it).
			kl := 1e-2
			if typ == "f16" {
				kl = 1e-4
			}
			p := filepath.Join(dir, "llama-"+typ+".gguf")
			if err := genmodel.Generate(genmodel.Options{Arch: "llama", Preset: "tiny", Type: typ, Seed: 7}, p); err != nil {
				t.Fatal(err)
			}
			jobs = append(jobs, job{p, kl})
		}
	}
	// The models of one run share a vocabulary size (the built-in one, or the
	// caller's), so one prompt serves them all: BOS, then ordinary tokens drawn
	// from past the byte tokens of a SentencePiece vocabulary (ids 3-258) and
	// below the specials a larger vocabulary keeps at its end.
	m0, err := Open(jobs[0].path)
	if err != nil {
		t.Fatal(err)
	}
	vocab := m0.Config().Vocab
	m0.Close()
	paths := make([]string, len(jobs))
	for i, j := range jobs {
		paths[i] = j.path
	}
	for _, n := range prompts {
		rng := rand.New(rand.NewPCG(uint64(n), 17))
		ids := []int32{1}
		for len(ids) < n {
			ids = append(ids, int32(259+rng.IntN(min(vocab, 32000)-259-2)))
		}
		idStr := make([]string, len(ids))
		for i, id := range ids {
			idStr[i] = strconv.Itoa(int(id))
		}
		runs := runPeerLong(t, script, t.TempDir(), paths, strings.Join(idStr, ","), steps, top)
		// The runs of parityDecodingRef are scored against llama.cpp taking the
		// prompt a token at a time too (ubatch 1: vec_dot products, one-query
		// binary16 attention), and the same again at ubatch GGML_FA_TILE_Q-1
		// (llamafile's sgemm for the prompt's products, from 2 tokens on, but
		// still the one-query attention), which must give the same run: what
		// parts llama.cpp's served run from these is its tiled float32 attention
		// for the prompt, not its sgemm.
		var decPaths []string
		for _, p := range paths {
			if _, ok := parityDecodingRef["long/"+longParityName(p, n, AttnF16, "served")]; ok {
				decPaths = append(decPaths, p)
			}
		}
		dec := runPeerBatch(t, script, t.TempDir(), decPaths, strings.Join(idStr, ","), steps, top, 1)
		decSgemm := runPeerBatch(t, script, t.TempDir(), decPaths, strings.Join(idStr, ","), steps, top, faTileQ-1)
		for _, p := range decPaths {
			d, ds := dec[p], decSgemm[p]
			if len(d.Steps) != steps || len(ds.Steps) != steps {
				t.Fatalf("%s: llama.cpp decoding the prompt in ubatches of 1 and %d gave no result of %d steps", p, faTileQ-1, steps)
			}
			if sn, skl := peerPathsDiffer(d, ds); sn != steps || skl != 0 {
				t.Errorf("%s/prompt-%d: llama.cpp's prompt in ubatches of %d (sgemm products) and of 1 (vec_dot) part: same tokens for %d of %d steps, mean KL %.3g there; parityDecodingRef's reason is out of date", filepath.Base(p), n, faTileQ-1, sn, steps, skl)
			}
		}
		for i, j := range jobs {
			lr, ok := runs[paths[i]]
			if !ok || len(lr.served.Steps) != steps || len(lr.batch.Steps) != steps {
				t.Fatalf("%s: llama.cpp gave no result of %d steps", j.path, steps)
			}
			// llama.cpp against itself: its prefill path and its decoding path
			// disagree by this much on the same tokens (what is not attention in
			// it: its quantized batch products are not its one-token ones).
			self, selfKL := comparePeers(lr.served, lr.batch)
			t.Logf("%s/prompt-%d: llama.cpp batch against llama.cpp served: top-1 mismatches %d/%d, mean KL %.3g", filepath.Base(j.path), n, self, steps, selfKL)
			// Each of our modes is held to the limits against llama.cpp's
			// evaluation in the same attention class (f32: its tiled float32
			// path, evaluating the whole sequence; f16: its one-query binary16
			// path, decoding, though its served run took the prompt through the
			// tiled path: where that parts them, parityDecodingRef scores f16
			// against its prompt a token at a time), and only logged against the
			// other.
			for _, c := range []struct {
				attn   Attention
				peer   string
				strict bool
			}{{AttnF32, "batch", true}, {AttnF32, "served", false}, {AttnF16, "served", true}, {AttnF16, "batch", false}} {
				name := longParityName(j.path, n, c.attn, c.peer)
				r := lr.served
				if c.peer == "batch" {
					r = lr.batch
				}
				t.Run(name, func(t *testing.T) {
					m, err := Open(j.path)
					if err != nil {
						t.Fatal(err)
					}
					defer m.Close()
					mismatches, meanKL, maxKL := scoreAgainstPeer(t, m, r, c.attn)
					t.Logf("%s: top-1 mismatches %d/%d, mean KL %.3g (max step %.3g)", name, mismatches, steps, meanKL, maxKL)
					if !c.strict {
						return
					}
					if why, ok := parityDecodingRef["long/"+name]; ok {
						d, ok := dec[j.path]
						if !ok || len(d.Steps) != steps {
							t.Fatalf("llama.cpp decoding the prompt a token at a time gave no result of %d steps", steps)
						}
						if mismatches <= 2 && meanKL <= j.klMax {
							t.Errorf("%s now meets the bounds against llama.cpp's served run (%d of %d, mean KL %.3g): take it off parityDecodingRef", name, mismatches, steps, meanKL)
						}
						pn, pkl := peerPathsDiffer(r, d)
						t.Logf("%s: %s; llama.cpp's served run and its run with the prompt a token at a time agree on %d steps, mean KL %.3g there", name, why, pn, pkl)
						mismatches, meanKL, maxKL = scoreAgainstPeer(t, m, d, c.attn)
						t.Logf("%s against llama.cpp decoding its prompt a token at a time: top-1 mismatches %d/%d, mean KL %.3g (max step %.3g)", name, mismatches, steps, meanKL, maxKL)
					}
					checkParity(t, "long/"+name, mismatches, steps, meanKL, j.klMax)
				})
			}
		}
	}
}

// faTileQ is llama.cpp's GGML_FA_TILE_Q: a ubatch of this many queries or more
// takes its tiled float32 flash attention, a smaller one its one-query binary16
// path.
const faTileQ = 64

// longParityName is the name of a long-prompt parity run (and, after "long/", its
// key in parityKnownGaps and parityDecodingRef): the model file, the prompt
// length, our attention mode and llama.cpp's run ("served" or "batch").
func longParityName(path string, n int, attn Attention, peer string) string {
	return fmt.Sprintf("%s/prompt-%d/%s-vs-%s", filepath.Base(path), n, map[Attention]string{AttnF32: "f32", AttnF16: "f16"}[attn], peer)
}

// comparePeers compares two llama.cpp runs' distributions step by step over a's
// top tokens (one missing from b's top counts as b's smallest probability there):
// the steps whose top-1 differs and the mean KL(a ‖ b).
func comparePeers(a, b peerRun) (mismatches int, meanKL float64) {
	for i := range a.Steps {
		q := map[int32]float64{}
		floor := 1.0
		for _, tp := range b.Steps[i].Top {
			q[int32(tp[0])] = tp[1]
			floor = math.Min(floor, tp[1])
		}
		if a.Steps[i].Top[0][0] != b.Steps[i].Top[0][0] {
			mismatches++
		}
		for _, tp := range a.Steps[i].Top {
			if p := tp[1]; p > 0 {
				qp, ok := q[int32(tp[0])]
				if !ok {
					qp = floor
				}
				meanKL += p * math.Log(p/math.Max(qp, 1e-30))
			}
		}
	}
	return mismatches, meanKL / float64(len(a.Steps))
}

// scoreAgainstPeer runs llama.cpp's sequence (its prompt, then its greedy tokens)
// through m in attention mode attn and compares our next-token distribution at each
// of llama.cpp's steps with its top probabilities: the steps whose top-1 token
// differs, and the mean and largest KL(llama.cpp ‖ lmlite) over llama.cpp's top.
// The prompt but its last token goes in without logits (the bits do not depend
// on the batching), so that a long prompt's logits are not all kept.
func scoreAgainstPeer(t *testing.T, m *Model, r peerRun, attn Attention) (mismatches int, meanKL, maxKL float64) {
	t.Helper()
	st := m.NewState(0)
	st.SetAttention(attn)
	p := len(r.PromptIDs)
	if p > 1 {
		if _, err := st.Forward(r.PromptIDs[:p-1], false); err != nil {
			t.Fatal(err)
		}
	}
	seq := []int32{r.PromptIDs[p-1]}
	for _, s := range r.Steps {
		seq = append(seq, s.Token)
	}
	logits, err := st.Forward(seq, true)
	if err != nil {
		t.Fatal(err)
	}
	V := m.Config().Vocab
	var klSum float64
	for i, s := range r.Steps {
		row := logits[i*V : (i+1)*V]
		q := Probs(row)
		if best := TopProbs(row, 1)[0].ID; best != int32(s.Top[0][0]) {
			mismatches++
			t.Logf("step %d: top two of llama.cpp %v, of lmlite %v", i, s.Top[:min(2, len(s.Top))], TopProbs(row, 2))
		}
		var kl float64
		for _, tp := range s.Top {
			if pp := tp[1]; pp > 0 {
				kl += pp * math.Log(pp/math.Max(q[int(tp[0])], 1e-30))
			}
		}
		klSum += kl
		maxKL = math.Max(maxKL, kl)
	}
	return mismatches, klSum / float64(len(r.Steps)), maxKL
}

// longPeerRun is llama.cpp on a long prompt: served is its greedy continuation as
// a server runs it (the prompt in one ubatch, so its tiled float32 attention, then
// one token at a time, its binary16 one-query path); batch is the same sequence
// (the prompt and the first steps-1 greedy tokens) evaluated again, teacher-forced,
// in one ubatch, so every distribution comes from the tiled float32 path.
type longPeerRun struct {
	served, batch peerRun
}

// peerLongScript runs both of longPeerRun's evaluations for each model in one
// process, printing one JSON line per model.
const peerLongScript = `import { loadLlama } from %q;
import { execFileSync } from "node:child_process";
const [setup, idsArg, stepsArg, topArg, ...models] = process.argv.slice(2);
const peerDir = execFileSync(setup, { encoding: "utf8" }).trim();
const { llama } = await loadLlama(peerDir);
const ids = idsArg.split(",").map(Number), steps = Number(stepsArg), topN = Number(topArg);
const topOf = (probs) => [...probs.entries()].sort((a, b) => b[1] - a[1]).slice(0, topN).map(([t, p]) => [t, +p.toPrecision(6)]);
const n = ids.length + steps;
for (const m of models) {
  const model = await llama.loadModel({ modelPath: m, gpuLayers: 0 });
  let ctx = await model.createContext({ contextSize: n + 8, batchSize: n, threads: 1 });
  const served = [];
  for await (const o of ctx.getSequence().evaluateWithMetadata(ids, { probabilities: true }, { temperature: 0 })) {
    served.push({ token: o.token, top: topOf(o.probabilities) });
    if (served.length >= steps) break;
  }
  await ctx.dispose();
  ctx = await model.createContext({ contextSize: n + 8, batchSize: n, threads: 1 });
  const seq = [...ids, ...served.slice(0, steps - 1).map((s) => s.token)];
  const input = seq.map((t, i) => (i >= ids.length - 1 ? [t, { generateNext: { probabilities: true } }] : t));
  const outs = await ctx.getSequence().controlledEvaluate(input);
  const batch = [];
  for (let i = ids.length - 1; i < seq.length; i++) {
    const tok = i + 1 < seq.length ? seq[i + 1] : served[steps - 1].token;
    batch.push({ token: tok, top: topOf(outs[i].next.probabilities) });
  }
  console.log(JSON.stringify({ model: m, prompt_ids: ids, steps: served, batch }));
  await ctx.dispose(); await model.dispose();
}
`

// runPeerLong runs peerLongScript on the models in one node process and returns
// each model's runs by path.
func runPeerLong(t *testing.T, logitsScript, dir string, models []string, ids string, steps, top int) map[string]longPeerRun {
	t.Helper()
	peerDir := filepath.Dir(logitsScript)
	script := filepath.Join(dir, "long.mjs")
	common := "file://" + filepath.Join(peerDir, "common.mjs")
	if err := os.WriteFile(script, []byte(fmt.Sprintf(peerLongScript, common)), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{script, filepath.Join(peerDir, "setup.sh"), ids, fmt.Sprint(steps), fmt.Sprint(top)}, models...)
	cmd := exec.Command("node", args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("llama.cpp peer: %v: %s", err, stderr.String())
	}
	runs := map[string]longPeerRun{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r struct {
			Model string `json:"model"`
			peerRun
			Batch json.RawMessage `json:"batch"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("llama.cpp peer output: %v: %q", err, line)
		}
		b := peerRun{PromptIDs: r.PromptIDs}
		if err := json.Unmarshal(r.Batch, &b.Steps); err != nil {
			t.Fatalf("llama.cpp peer output: %v", err)
		}
		runs[r.Model] = longPeerRun{served: r.peerRun, batch: b}
	}
	return runs
}
