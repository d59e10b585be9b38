package model

import (
	"fmt"
	"os"
	"runtime/pprof"
	"testing"

	"github.com/lmlite/lmlite/kvcache"
)

// BenchmarkDecodeBatch is one decode step of LMLITE_BENCH_PARALLEL sequences (default
// 16) as `lmlite bench --parallel N` runs it, on the model file named by
// LMLITE_BENCH_MODEL (skipped when unset): each sequence holds a prompt of
// LMLITE_BENCH_PROMPT tokens (default 576, the mean context of a `--prompt 512 --gen
// 128` run; prefilled once, paged KV, float32 attention as the server runs prompts of
// that length), and an op is one step of all of them at the position after the prompt
// (the same position each time, its KV row rewritten). LMLITE_BENCH_CPUPROFILE=prefix
// writes a CPU profile of the timed loop alone to prefix-decode.prof (a whole run's
// -cpuprofile is mostly the prefill).
func BenchmarkDecodeBatch(b *testing.B) {
	path := os.Getenv("LMLITE_BENCH_MODEL")
	if path == "" {
		b.Skip("LMLITE_BENCH_MODEL not set")
	}
	np, par := benchEnvInt(b, "LMLITE_BENCH_PROMPT", 576), benchEnvInt(b, "LMLITE_BENCH_PARALLEL", 16)
	m, err := Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
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
	b.Run(fmt.Sprintf("prompt%d/par%d", np, par), func(b *testing.B) {
		items := make([]Item, par)
		for s := range seqs {
			items[s] = Item{KV: seqs[s], Start: np, Tokens: []int32{int32(3 + s)}, Logits: 1, Attn: AttnF32}
		}
		if prefix := os.Getenv("LMLITE_BENCH_CPUPROFILE"); prefix != "" {
			f, err := os.Create(prefix + "-decode.prof")
			if err != nil {
				b.Fatal(err)
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				b.Fatal(err)
			}
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
		defer cpuPerOp(b)()
		for b.Loop() {
			if _, err := bt.Forward(items); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(par*b.N)/b.Elapsed().Seconds(), "tok/s")
	})
}
