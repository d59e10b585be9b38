package sample_test

import (
	"testing"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/sample"
)

// TestParamsMirrorEngine fails to compile when sample.Params and engine.Sampling
// drift apart: the Block converts one into the other.
func TestParamsMirrorEngine(t *testing.T) {
	in := engine.Sampling{Temperature: 0.7, TopK: 40, TopP: 0.9, MinP: 0.05, RepeatPenalty: 1.1,
		PresencePenalty: 0.2, FrequencyPenalty: 0.3, RepeatLastN: 32, Seed: 7}
	p := sample.Params(in)
	if p.Seed != 7 || p.TopK != 40 || p.RepeatLastN != 32 {
		t.Errorf("converted %+v", p)
	}
}

func BenchmarkSample(b *testing.B) {
	logits := make([]float32, 151_936) // Qwen's vocabulary
	for i := range logits {
		logits[i] = float32((i*7919)%2000)/100 - 10
	}
	hist := make([]int32, 256)
	for i := range hist {
		hist[i] = int32(i * 13)
	}
	for _, bc := range []struct {
		name string
		p    sample.Params
	}{
		{"greedy", sample.Params{}},
		{"temperature", sample.Params{Temperature: 0.8, Seed: 1}},
		{"top-p", sample.Params{Temperature: 0.8, TopP: 0.95, Seed: 1}},
		{"chain", sample.Params{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05, RepeatPenalty: 1.1, Seed: 1}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := sample.New(bc.p)
			b.ReportAllocs()
			for b.Loop() {
				s.Sample(logits, hist)
			}
		})
	}
}
