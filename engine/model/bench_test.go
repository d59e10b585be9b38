package model

import (
	"path/filepath"
	"testing"

	"github.com/lmlite/lmlite/engine/genmodel"
)

// BenchmarkForward measures prefill (64 tokens as one batch) and decode (one token
// after a 64-token prefix) on generated models (and a mixture of experts).
func BenchmarkForward(b *testing.B) {
	for _, c := range []struct{ arch, preset, typ string }{{"llama", "tiny", "q8_0"}, {"llama", "tiny", "q4_k_m"}, {"llama", "125m", "q4_k_m"}, {"mixtral", "tiny", "q4_k_m"}} {
		path := filepath.Join(b.TempDir(), "m.gguf")
		if err := genmodel.Generate(genmodel.Options{Arch: c.arch, Preset: c.preset, Type: c.typ, Seed: 1}, path); err != nil {
			b.Fatal(err)
		}
		m, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		prompt := make([]int32, 64)
		for i := range prompt {
			prompt[i] = int32(300 + i)
		}
		name := c.preset + "-" + c.typ
		if c.arch != "llama" {
			name = c.arch + "-" + name
		}
		b.Run(name+"/prefill64", func(b *testing.B) {
			for b.Loop() {
				if _, err := m.NewState(256).Forward(prompt, false); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(64*b.N)/b.Elapsed().Seconds(), "tok/s")
		})
		b.Run(name+"/decode", func(b *testing.B) {
			st := m.NewState(0)
			if _, err := st.Forward(prompt, false); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				st.Truncate(64)
				if _, err := st.Forward([]int32{400}, false); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tok/s")
		})
		m.Close()
	}
}
