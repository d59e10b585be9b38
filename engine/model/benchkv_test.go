package model

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/lmlite/lmlite/engine/kernels"
	"github.com/lmlite/lmlite/kvcache"
)

// BenchmarkDecodeKVTypes compares decoding over KV caches of the three types in one
// process, on the model file named by LMLITE_BENCH_MODEL (skipped when unset): for
// each cache (f16 in the attention mode the engine takes for such a prompt,
// AttnF32MinPromptFor's default; q8_0; q4_0), LMLITE_BENCH_PARALLEL
// sequences (default 1) hold LMLITE_BENCH_PROMPT positions (default 2,048) of
// random K and V rows, written through kernels.PutKVRow as the model writes them
// (the values do not change the work, and an 8k prefill per cache would take
// minutes); an op is one decode step of every sequence at the position after its
// prompt (its KV row rewritten) in each variant, each timed on its own, their order
// rotated every op, so that the machine's drift falls on all alike. Reports each
// variant's tok/s and q8_0/f16 and q4_0/f16, the speed ratios against f16 (above
// 1: the quantized cache decodes faster), in wall time; as …-cpu, in the
// process's CPU time (user and system, all threads: on a machine shared with other
// processes, the time this one was not running is left out; the workers' spinning
// is in); as …-fastest, of each variant's fastest op (the one the other processes
// disturbed least). LMLITE_BENCH_THREADS sets the kernels' workers (default: one
// per CPU); with 1, the CPU-time ratios hold no workers' spinning, the measure to
// take on a loaded machine.
func BenchmarkDecodeKVTypes(b *testing.B) {
	path := os.Getenv("LMLITE_BENCH_MODEL")
	if path == "" {
		b.Skip("LMLITE_BENCH_MODEL not set")
	}
	np, par := benchEnvInt(b, "LMLITE_BENCH_PROMPT", 2048), benchEnvInt(b, "LMLITE_BENCH_PARALLEL", 1)
	if os.Getenv("LMLITE_BENCH_THREADS") != "" {
		defer kernels.SetThreads(kernels.SetThreads(benchEnvInt(b, "LMLITE_BENCH_THREADS", 0)))
	}
	m, err := Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	f16Mode := AttentionFor(np, AttnF32MinPromptFor(0, m.cfg.HeadDim))
	type variant struct {
		name   string
		kt, vt kernels.KVType
		attn   Attention
		items  []Item
		t, cpu time.Duration
		fast   time.Duration // the fastest op
	}
	// The f16 cache in the mode the engine takes (AttnF32 only where its kernels
	// are fast); the quantized caches take llama.cpp's one-query path in any mode.
	f16 := &variant{name: "f16", attn: f16Mode}
	q8 := &variant{name: "q8_0", kt: kernels.KVQ8_0, vt: kernels.KVQ8_0}
	q4 := &variant{name: "q4_0", kt: kernels.KVQ4_0, vt: kernels.KVQ4_0}
	vars := []*variant{f16, q8, q4}
	// 257 random rows, cycled (drawing every row would take longer than the runs).
	rng := rand.New(rand.NewPCG(1, 2))
	kvd := m.cfg.KVHeads * m.cfg.HeadDim
	rows := make([][]float32, 257)
	for i := range rows {
		rows[i] = make([]float32, kvd)
		for j := range rows[i] {
			rows[i][j] = float32(rng.NormFloat64())
		}
	}
	r := 0
	for _, v := range vars {
		kc := m.KVConfig()
		kc.TypeK, kc.TypeV = v.kt, v.vt
		kc.Blocks = kc.BlocksFor(np+1, par, 0)
		pool, err := kvcache.New(kc)
		if err != nil {
			b.Fatal(err)
		}
		defer pool.Close()
		for s := 0; s < par; s++ {
			seq := pool.NewSeq("")
			if err := seq.Grow(np + 1); err != nil {
				b.Fatal(err)
			}
			for pos := 0; pos < np; pos++ {
				for l := 0; l < m.cfg.Layers; l++ {
					k, vr := seq.Row(pos, l)
					kernels.PutKVRow(k, v.kt, rows[r%len(rows)])
					kernels.PutKVRow(vr, v.vt, rows[(r+1)%len(rows)])
					r += 2
				}
			}
			v.items = append(v.items, Item{KV: seq, Start: np, Tokens: []int32{int32(3 + s)}, Logits: 1, Attn: v.attn})
		}
	}
	bt := m.NewBatch()
	b.Run(fmt.Sprintf("ctx%d/par%d", np, par), func(b *testing.B) {
		for _, v := range vars {
			v.t, v.cpu, v.fast = 0, 0, 0
		}
		i := 0
		for b.Loop() {
			for j := range vars {
				v := vars[(i+j)%len(vars)]
				t0, c0 := time.Now(), processCPU(b)
				if _, err := bt.Forward(v.items); err != nil {
					b.Fatal(err)
				}
				d := time.Since(t0)
				v.t += d
				v.cpu += processCPU(b) - c0
				if v.fast == 0 || d < v.fast {
					v.fast = d
				}
			}
			i++
		}
		for _, v := range vars {
			b.ReportMetric(float64(par*b.N)/v.t.Seconds(), v.name+"-tok/s")
		}
		b.ReportMetric(f16.t.Seconds()/q8.t.Seconds(), "q8_0/f16")
		b.ReportMetric(f16.t.Seconds()/q4.t.Seconds(), "q4_0/f16")
		b.ReportMetric(f16.cpu.Seconds()/q8.cpu.Seconds(), "q8_0/f16-cpu")
		b.ReportMetric(f16.cpu.Seconds()/q4.cpu.Seconds(), "q4_0/f16-cpu")
		b.ReportMetric(f16.fast.Seconds()/q8.fast.Seconds(), "q8_0/f16-fastest")
		b.ReportMetric(f16.fast.Seconds()/q4.fast.Seconds(), "q4_0/f16-fastest")
	})
}
