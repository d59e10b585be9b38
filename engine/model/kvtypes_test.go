package model_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/engine/kernels"
	"github.com/lmlite/lmlite/engine/model"
	"github.com/lmlite/lmlite/kvcache"
)

// aloneKV runs a prompt alone through a Batch over a fresh pool of the KV types:
// one prefill, then gen decodes (a State's cache is binary16 only).
func aloneKV(t *testing.T, m *model.Model, kt, vt kernels.KVType, prompt []int32, gen int) greedy {
	t.Helper()
	cfg := m.KVConfig()
	cfg.TypeK, cfg.TypeV, cfg.Blocks = kt, vt, 16
	pool, err := kvcache.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	seq := pool.NewSeq("")
	b := m.NewBatch()
	g := greedy{prompt: prompt, tokens: append([]int32(nil), prompt...)}
	start, toks := 0, prompt
	for i := 0; i < gen; i++ {
		if err := seq.Grow(start + len(toks)); err != nil {
			t.Fatal(err)
		}
		out, err := b.Forward([]model.Item{{KV: seq, Start: start, Tokens: toks, Logits: 1}})
		if err != nil {
			t.Fatal(err)
		}
		l := append([]float32(nil), out[0]...)
		g.logits = append(g.logits, l)
		next := argmax(l)
		g.tokens = append(g.tokens, next)
		start += len(toks)
		toks = []int32{next}
	}
	seq.Release()
	return g
}

// TestBatchMatchesAloneKVTypes is TestBatchMatchesAlone over quantized KV caches:
// sequences joining a batch at different steps, prefilled in chunks beside running
// decodes, in blocks of 16 or 4 tokens, with 1 or 2 threads, give the same logits
// bits as each sequence alone (determinism and batch invariance). And the quantized
// cache stays near binary16's: the first greedy token agrees with the f16 State's
// for most prompts, and the distributions are near (mean KL).
func TestBatchMatchesAloneKVTypes(t *testing.T) {
	for _, c := range []struct {
		o      genmodel.Options
		kt, vt kernels.KVType
		klMax  float64 // mean KL(f16 ‖ quantized) of the first step's distributions
	}{
		{genmodel.Options{Arch: "llama", Type: "q8_0"}, kernels.KVQ8_0, kernels.KVQ8_0, 5e-3},
		{genmodel.Options{Arch: "qwen3", Type: "f16"}, kernels.KVQ4_0, kernels.KVQ4_0, 5e-2},
		{genmodel.Options{Arch: "qwen2", Type: "q4_k_m"}, kernels.KVQ8_0, kernels.KVF16, 5e-3},
		{genmodel.Options{Arch: "phi3", Type: "f16"}, kernels.KVF16, kernels.KVQ4_0, 5e-2},
	} {
		t.Run(fmt.Sprintf("%s-%s-%v-%v", c.o.Arch, c.o.Type, c.kt, c.vt), func(t *testing.T) {
			m := genTinyOpts(t, c.o)
			V := m.Config().Vocab
			const gen = 6
			lens := []int{1, 5, 17, 33, 40, 3, 16, 9}
			var want []greedy
			var kl float64
			agree := 0
			for i, n := range lens {
				p := make([]int32, n)
				for j := range p {
					p[j] = int32((i*7919 + j*104729) % V)
				}
				g := aloneKV(t, m, c.kt, c.vt, p, gen)
				want = append(want, g)
				f16 := alone(t, m, p, 1)
				p16, pq := model.Probs(f16.logits[0]), model.Probs(g.logits[0])
				for j, p := range p16 {
					if p > 0 {
						kl += p * math.Log(p/math.Max(pq[j], 1e-30)) / float64(len(lens))
					}
				}
				if argmax(f16.logits[0]) == argmax(g.logits[0]) {
					agree++
				}
			}
			t.Logf("first step vs f16: mean KL %.3g, top-1 agrees for %d of %d prompts", kl, agree, len(lens))
			if kl > c.klMax || kl == 0 || agree < len(lens)-1 {
				t.Errorf("first step vs f16: mean KL %.3g (want in (0, %g]), top-1 agrees for %d of %d", kl, c.klMax, agree, len(lens))
			}
			for _, threads := range []int{1, 2} {
				prev := kernels.SetThreads(threads)
				for _, bt := range []int{16, 4} {
					cfg := m.KVConfig()
					cfg.TypeK, cfg.TypeV = c.kt, c.vt
					cfg.BlockTokens, cfg.Blocks = bt, 64*16/bt
					pool, err := kvcache.New(cfg)
					if err != nil {
						t.Fatal(err)
					}
					runBatch(t, m, pool, want, gen, V)
				}
				kernels.SetThreads(prev)
			}
		})
	}
}
