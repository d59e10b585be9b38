package model

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/engine/kernels"
	"github.com/lmlite/lmlite/kvcache"
)

// peerKVScript is peerScript for one model with llama.cpp's KV cache types set, as
// -ctk / -ctv do (node-llama-cpp's experimentalKvCacheKeyType / ValueType), and
// flash attention on, which llama.cpp needs for a quantized V cache. The peer's
// logits.mjs has no option for the cache types, hence this script. It runs with
// LLAMA_ATTN_ROT_DISABLE=1 (see the test).
const peerKVScript = `import { loadLlama } from %q;
import { execFileSync } from "node:child_process";
const [setup, idsArg, stepsArg, topArg, ctk, ctv, m] = process.argv.slice(2);
const peerDir = execFileSync(setup, { encoding: "utf8" }).trim();
const { llama } = await loadLlama(peerDir);
const ids = idsArg.split(",").map(Number), steps = Number(stepsArg), topN = Number(topArg);
const model = await llama.loadModel({ modelPath: m, gpuLayers: 0 });
const ctx = await model.createContext({ contextSize: Math.max(256, ids.length + steps + 8), threads: 1,
  flashAttention: true, experimentalKvCacheKeyType: ctk, experimentalKvCacheValueType: ctv });
const seq = ctx.getSequence();
const out = [];
for await (const o of seq.evaluateWithMetadata(ids, { probabilities: true }, { temperature: 0 })) {
  const top = [...o.probabilities.entries()].sort((a, b) => b[1] - a[1]).slice(0, topN).map(([t, p]) => [t, +p.toPrecision(6)]);
  out.push({ token: o.token, top });
  if (out.length >= steps) break;
}
console.log(JSON.stringify({ model: m, prompt_ids: ids, steps: out }));
await ctx.dispose(); await model.dispose();
`

// TestParityWithLlamaCppKVTypes is TestParityWithLlamaCpp with quantized KV caches:
// llama.cpp continues the prompt greedily for 64 steps with the same K and V cache
// types (q8_0, q4_0, mixed), and the model scores the same sequence here in a paged
// pool of those types: top-1 disagreements at no more than 2 of the 64 steps, mean
// KL(llama.cpp ‖ lmlite) over llama.cpp's top 20 below 1e-3 (the float types'
// bound: both sides store the same blocks; seen: 0 disagreements, KL below 1e-5),
// and llama.cpp's run nearer to ours with the types than to ours with an f16 cache
// (seen: 1e-4 to 4e-2 there), so that the types are known to be in effect on both
// sides.
func TestParityWithLlamaCppKVTypes(t *testing.T) {
	if testing.Short() {
		t.Skip("parity with llama.cpp runs node; skipped in -short")
	}
	if raceEnabled {
		t.Skip("pure numerics: make test runs it without the race detector")
	}
	logits := peerLogitsScript(t)
	peerDir := filepath.Dir(logits)
	dir := t.TempDir()
	script := filepath.Join(dir, "kv.mjs")
	if err := os.WriteFile(script, []byte(fmt.Sprintf(peerKVScript, "file://"+filepath.Join(peerDir, "common.mjs"))), 0o644); err != nil {
		t.Fatal(err)
	}
	const steps, top = 64, 20
	prompt := "1,574,568,260,562" // <s> ▁Once ▁upon ▁a ▁time in the built-in vocabulary
	for _, j := range []struct {
		arch, typ string
		kt, vt    kernels.KVType
	}{
		{"llama", "f16", kernels.KVQ8_0, kernels.KVQ8_0},
		{"llama", "f16", kernels.KVQ4_0, kernels.KVQ4_0},
		{"llama", "q8_0", kernels.KVQ8_0, kernels.KVF16},
		{"llama", "q4_k_m", kernels.KVF16, kernels.KVQ8_0},
		{"qwen3", "f16", kernels.KVQ8_0, kernels.KVQ8_0},
	} {
		t.Run(fmt.Sprintf("%s-%s/%v-%v", j.arch, j.typ, j.kt, j.vt), func(t *testing.T) {
			path := filepath.Join(dir, j.arch+"-"+j.typ+".gguf")
			if _, err := os.Stat(path); err != nil {
				if err := genmodel.Generate(genmodel.Options{Arch: j.arch, Preset: "tiny", Type: j.typ, Seed: 7}, path); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command("node", script, filepath.Join(peerDir, "setup.sh"), prompt, fmt.Sprint(steps), fmt.Sprint(top),
				strings.ToUpper(j.kt.String()), strings.ToUpper(j.vt.String()), path)
			// llama.cpp rotates Q, K and V by a Hadamard matrix before a quantized
			// cache since its PR 21038 (April 2026; head sizes multiple of 64);
			// LLAMA_ATTN_ROT_DISABLE=1 is its switch back to the plain block formats,
			// which are what this cache stores.
			cmd.Env = append(os.Environ(), "LLAMA_ATTN_ROT_DISABLE=1")
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("llama.cpp peer: %v: %s", err, stderr.String())
			}
			var r peerRun
			if err := json.Unmarshal(out, &r); err != nil || len(r.Steps) != steps {
				t.Fatalf("llama.cpp peer output (%v): %q", err, out)
			}
			m, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			seq := append([]int32(nil), r.PromptIDs...)
			for _, s := range r.Steps {
				seq = append(seq, s.Token)
			}
			kc := m.KVConfig()
			kc.TypeK, kc.TypeV = j.kt, j.vt
			kc.Blocks = kc.BlocksFor(len(seq), 1, 0)
			pool, err := kvcache.New(kc)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			kv := pool.NewSeq("")
			if err := kv.Grow(len(seq)); err != nil {
				t.Fatal(err)
			}
			// llama.cpp's order: the prompt as one batch, then one token at a time.
			b := m.NewBatch()
			V := m.Config().Vocab
			rows := make([][]float32, len(seq))
			np := len(r.PromptIDs)
			res, err := b.Forward([]Item{{KV: kv, Start: 0, Tokens: seq[:np], Logits: 1}})
			if err != nil {
				t.Fatal(err)
			}
			rows[np-1] = append([]float32(nil), res[0]...)
			for p := np; p < len(seq)-1; p++ {
				res, err := b.Forward([]Item{{KV: kv, Start: p, Tokens: seq[p : p+1], Logits: 1}})
				if err != nil {
					t.Fatal(err)
				}
				rows[p] = append([]float32(nil), res[0]...)
			}
			// The same sequence through a binary16 cache, to show that the cache
			// types matter on both sides: llama.cpp's run with them is nearer to
			// ours with them than to ours without.
			f16, err := m.NewState(0).Forward(seq, true)
			if err != nil {
				t.Fatal(err)
			}
			var klSum, klF16 float64
			mismatches := 0
			for i, s := range r.Steps {
				row := rows[np-1+i]
				if len(row) != V {
					t.Fatalf("step %d: %d logits", i, len(row))
				}
				q := Probs(row)
				if best := TopProbs(row, 1)[0].ID; best != int32(s.Top[0][0]) {
					mismatches++
					t.Logf("step %d: top two of llama.cpp %v, of lmlite %v", i, s.Top[:min(2, len(s.Top))], TopProbs(row, 2))
				}
				q16 := Probs(f16[(np-1+i)*V : (np+i)*V])
				for _, tp := range s.Top {
					if p := tp[1]; p > 0 {
						klSum += p * math.Log(p/math.Max(q[int(tp[0])], 1e-30))
						klF16 += p * math.Log(p/math.Max(q16[int(tp[0])], 1e-30))
					}
				}
			}
			meanKL := klSum / steps
			t.Logf("%s %s K %v V %v: top-1 mismatches %d/%d, mean KL %.3g (against our f16 cache: %.3g)", j.arch, j.typ, j.kt, j.vt, mismatches, steps, meanKL, klF16/steps)
			if meanKL >= klF16/steps {
				t.Errorf("llama.cpp's run with K %v V %v is no nearer to ours with them (KL %.3g) than to ours with f16 (%.3g)", j.kt, j.vt, meanKL, klF16/steps)
			}
			if mismatches > 2 {
				t.Errorf("top-1 differs from llama.cpp at %d of %d steps", mismatches, steps)
			}
			if meanKL > 1e-3 {
				t.Errorf("mean KL %.3g > 1e-3", meanKL)
			}
		})
	}
}
