package model

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/lmlite/lmlite/kvcache"
)

// BenchmarkDecodeModes compares decoding in the two attention modes in one process,
// on the model file named by LMLITE_BENCH_MODEL (skipped when unset): each of
// LMLITE_BENCH_PARALLEL sequences (default 1) holds a prompt of LMLITE_BENCH_PROMPT
// tokens (default 2,048, prefilled once, in paged KV as the server keeps it); an op
// is one decode step of every sequence at the position after its prompt (the same
// position each time, its KV row rewritten) in AttnF16 mode and one in AttnF32 mode,
// each timed on its own, their order swapped every op, so that the machine's drift
// falls on both alike. The KV rows' values do not change the work, so one prefill
// serves both modes. Reports each mode's tok/s and f32/f16-time, the ratio of the
// modes' total step times (below 1: float32 mode decodes faster).
func BenchmarkDecodeModes(b *testing.B) {
	bt, seqs, np, par := prefilledBenchSeqs(b, 2048, 1)
	// Both modes alternate step by step, each step timed on its own: the machine's
	// drift (other jobs, frequency) falls on both alike.
	b.Run(fmt.Sprintf("prompt%d/par%d", np, par), func(b *testing.B) {
		var t [2]time.Duration
		f16, f32 := make([]Item, par), make([]Item, par)
		for s := range seqs {
			f16[s] = Item{KV: seqs[s], Start: np, Tokens: []int32{int32(3 + s)}, Logits: 1, Attn: AttnF16}
			f32[s] = f16[s]
			f32[s].Attn = AttnF32
		}
		i := 0
		for b.Loop() {
			for j := range 2 {
				k := (j + i) % 2 // f16 first on even ops, f32 first on odd ones
				it := f16
				if k == 1 {
					it = f32
				}
				t0 := time.Now()
				if _, err := bt.Forward(it); err != nil {
					b.Fatal(err)
				}
				t[k] += time.Since(t0)
			}
			i++
		}
		b.ReportMetric(float64(par*b.N)/t[0].Seconds(), "f16-tok/s")
		b.ReportMetric(float64(par*b.N)/t[1].Seconds(), "f32-tok/s")
		b.ReportMetric(t[1].Seconds()/t[0].Seconds(), "f32/f16-time")
	})
}

// prefilledBenchSeqs opens the model file named by LMLITE_BENCH_MODEL (skipping the
// benchmark when unset) and prefills LMLITE_BENCH_PARALLEL sequences (default par) in
// paged KV with prompts of LMLITE_BENCH_PROMPT pseudo-random tokens (default np),
// float32 attention, 512 tokens at a time, each with room for one more token. The
// model is closed when b ends.
func prefilledBenchSeqs(b *testing.B, np, par int) (*Batch, []*kvcache.Seq, int, int) {
	path := os.Getenv("LMLITE_BENCH_MODEL")
	if path == "" {
		b.Skip("LMLITE_BENCH_MODEL not set")
	}
	np, par = benchEnvInt(b, "LMLITE_BENCH_PROMPT", np), benchEnvInt(b, "LMLITE_BENCH_PARALLEL", par)
	m, err := Open(path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	kc := m.KVConfig()
	kc.Blocks = kc.BlocksFor(np+1, par, 0)
	pool, err := kvcache.New(kc)
	if err != nil {
		b.Fatal(err)
	}
	bt := m.NewBatch()
	seqs := make([]*kvcache.Seq, par)
	seed := uint32(1234)
	prompt := make([]int32, np)
	for s := range seqs {
		seqs[s] = pool.NewSeq("")
		if err := seqs[s].Grow(np + 1); err != nil {
			b.Fatal(err)
		}
		for i := range prompt {
			seed = seed*1664525 + 1013904223
			prompt[i] = 3 + int32(seed%uint32(m.Config().Vocab-3))
		}
		for c := 0; c < np; c += 512 {
			it := Item{KV: seqs[s], Start: c, Tokens: prompt[c:min(np, c+512)], Attn: AttnF32}
			if _, err := bt.Forward([]Item{it}); err != nil {
				b.Fatal(err)
			}
		}
	}
	return bt, seqs, np, par
}
