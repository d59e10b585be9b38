package model

import (
	"path/filepath"
	"testing"

	"github.com/lmlite/lmlite/engine/genmodel"
)

// BenchmarkForward measures prefill (64 tokens as one batch) and decode (one token
// after a 64-token prefix) on generated models.
func BenchmarkForward(b *testing.B) {
	for _, c := range []struct{ preset, typ string }{{"tiny", "q8_0"}, {"tiny", "q4_k_m"}, {"125m", "q4_k_m"}} {
		path := filepath.Join(b.TempDir(), "m.gguf")
		if err := genmodel.Generate(genmodel.Options{Arch: "llama", Preset: c.preset, Type: c.typ, Seed: 1}, path); err != nil {
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
		b.Run(c.preset+"-"+c.typ+"/prefill64", func(b *testing.B) {
			for b.Loop() {
				if _, err := m.NewState(256).Forward(prompt, false); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(64*b.N)/b.Elapsed().Seconds(), "tok/s")
		})
		b.Run(c.preset+"-"+c.typ+"/decode", func(b *testing.B) {
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
