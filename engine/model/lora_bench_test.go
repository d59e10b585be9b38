package model

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/lmlite/lmlite/engine/genmodel"
)

// BenchmarkLoRADecode16 is issue 34's throughput check at the model level: one
// decode step of 16 sequences (prompts of LMLITE_BENCH_PROMPT tokens, default 128,
// prefilled once) on the bare base against the same step with the sequences over 8
// different rank-16 adapters of every attention and FFN projection (2 sequences
// each), on the base LMLITE_BENCH_MODEL, or a generated 125m q8_0 model when unset.
// The two run in alternation (ABAB, LMLITE_BENCH_PAIRS pairs, default 5, of 20
// steps each) and the metric is the median of the pairs' adapter/base
// tokens-per-second ratios; lora/base-cpu is the median of the pairs' base/adapter
// CPU time per step (user + system, the evidence on a loaded machine: with
// -test.cpu 1 it is the tokens-per-CPU-second ratio). LMLITE_BENCH_LORA_SERIAL_ROWS
// sets loraSerialRows (0: the LoRA products on the pool's workers; 64: a 16-row
// step's on the calling goroutine; default 8); LMLITE_BENCH_LORA_TYPE the adapters' type (f16,
// the default, f32 or q8_0) and LMLITE_BENCH_LORA_RANK their rank (default 16;
// q8_0 needs a multiple of 32). LMLITE_BENCH_PARALLEL sets the number of
// sequences (default 16; sequence s on adapter s mod 8: 8 or fewer are one row
// per adapter). The sequences attend in AttnF32 mode (the default, as the
// figures before issue 34's AVX2 round took them) or, with LMLITE_BENCH_ATTN=engine,
// in the mode the engine gives a prompt of LMLITE_BENCH_PROMPT tokens on this CPU
// (AttentionFor: AttnF16 below 64 tokens, and wherever the float32 attention has
// no assembly, as on AVX2, where AttnF32 runs its Go reference).
func BenchmarkLoRADecode16(b *testing.B) {
	path := os.Getenv("LMLITE_BENCH_MODEL")
	if path == "" {
		path = filepath.Join(b.TempDir(), "m.gguf")
		if err := genmodel.Generate(genmodel.Options{Arch: "llama", Preset: "125m", Type: "q8_0", Seed: 1}, path); err != nil {
			b.Fatal(err)
		}
		os.Setenv("LMLITE_BENCH_MODEL", path)
		defer os.Unsetenv("LMLITE_BENCH_MODEL")
	}
	if v := os.Getenv("LMLITE_BENCH_LORA_SERIAL_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			b.Fatalf("LMLITE_BENCH_LORA_SERIAL_ROWS=%q: want a number of rows, 0 or more", v)
		}
		prev := loraSerialRows
		loraSerialRows = n
		defer func() { loraSerialRows = prev }()
	}
	bt, seqs, np, par := prefilledBenchSeqs(b, 128, 16)
	rank := benchEnvInt(b, "LMLITE_BENCH_LORA_RANK", 16)
	var loras [][]LoRA
	for i := range 8 {
		p := filepath.Join(b.TempDir(), fmt.Sprint("a", i, ".gguf"))
		if err := genmodel.GenerateLoRA(genmodel.LoRAOptions{Base: path, Rank: rank, Alpha: 16, Seed: uint64(i), Type: os.Getenv("LMLITE_BENCH_LORA_TYPE")}, p); err != nil {
			b.Fatal(err)
		}
		a, err := bt.m.OpenAdapter(p)
		if err != nil {
			b.Fatal(err)
		}
		defer a.Close()
		loras = append(loras, []LoRA{{Adapter: a, Scale: 1}})
	}
	attn := AttnF32
	switch v := os.Getenv("LMLITE_BENCH_ATTN"); v {
	case "", "f32":
	case "engine":
		attn = AttentionFor(np, AttnF32MinPromptFor(0, bt.m.cfg.HeadDim))
	default:
		b.Fatalf("LMLITE_BENCH_ATTN=%q: want f32 or engine", v)
	}
	b.Logf("attention mode %d (0 AttnF16, 1 AttnF32)", attn)
	bare, adapted := make([]Item, par), make([]Item, par)
	for s := range seqs {
		bare[s] = Item{KV: seqs[s], Start: np, Tokens: []int32{int32(3 + s)}, Logits: 1, Attn: attn}
		adapted[s] = bare[s]
		adapted[s].LoRA = loras[s%8]
	}
	const steps = 20
	// run is the tokens per second of steps steps and their CPU time per step.
	run := func(items []Item) (tps, cpuMS float64) {
		t, c := time.Now(), cpuTime()
		for range steps {
			if _, err := bt.Forward(items); err != nil {
				b.Fatal(err)
			}
		}
		return float64(steps*par) / time.Since(t).Seconds(), float64((cpuTime() - c).Microseconds()) / 1000 / steps
	}
	run(bare)
	run(adapted)
	pairs := benchEnvInt(b, "LMLITE_BENCH_PAIRS", 5)
	var ratios, cpuRatios, baseTPS, loraTPS, baseCPU, loraCPU []float64
	for b.Loop() {
		ratios, cpuRatios, baseTPS, loraTPS, baseCPU, loraCPU = ratios[:0], cpuRatios[:0], baseTPS[:0], loraTPS[:0], baseCPU[:0], loraCPU[:0]
		for range pairs {
			x, xc := run(bare)
			y, yc := run(adapted)
			baseTPS, loraTPS = append(baseTPS, x), append(loraTPS, y)
			baseCPU, loraCPU = append(baseCPU, xc), append(loraCPU, yc)
			ratios = append(ratios, y/x)
			if yc > 0 {
				cpuRatios = append(cpuRatios, xc/yc)
			}
		}
	}
	med := func(v []float64) float64 {
		if len(v) == 0 {
			return 0
		}
		v = slices.Clone(v)
		slices.Sort(v)
		return v[len(v)/2]
	}
	b.ReportMetric(med(baseTPS), "base-tok/s")
	b.ReportMetric(med(loraTPS), "lora-tok/s")
	b.ReportMetric(med(ratios), "lora/base")
	b.ReportMetric(med(baseCPU), "base-cpu-ms/step")
	b.ReportMetric(med(loraCPU), "lora-cpu-ms/step")
	b.ReportMetric(med(cpuRatios), "lora/base-cpu")
	b.Logf("ratios %.3f", ratios)
	b.Logf("CPU per step base %.2f lora %.2f ms; base/lora CPU %.3f", baseCPU, loraCPU, cpuRatios)
}
