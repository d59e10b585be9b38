package model

import (
	"fmt"
	"os"
	"runtime/pprof"
	"testing"
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
	bt, seqs, np, par := prefilledBenchSeqs(b, 576, 16)
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
