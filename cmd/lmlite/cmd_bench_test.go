package main

import (
	"path/filepath"
	"testing"

	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/engine/kernels"
)

// TestBenchNamesSlowPath: bench names the tensor types of a file that run on the
// pure-Go reference kernels, and only those.
func TestBenchNamesSlowPath(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		typ  string
		want map[string]int
	}{
		{"tq2_0", map[string]int{"TQ2_0": 16}}, // every matrix: token_embd, output, 7 per layer
		{"q4_k_m", nil},
		{"q3_k_m", nil},
	} {
		path := filepath.Join(dir, c.typ+".gguf")
		if err := genmodel.Generate(genmodel.Options{Arch: "llama", Preset: "tiny", Type: c.typ, Seed: 1}, path); err != nil {
			t.Fatal(err)
		}
		f, err := gguf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		got := slowPathTypes(f)
		f.Close()
		want := c.want
		if !kernels.HasSIMD(kernels.Q4_K) { // the purego build or a CPU without AVX2: all slow
			continue
		}
		if len(got) != len(want) || got["TQ2_0"] != want["TQ2_0"] {
			t.Errorf("%s: slow path %v, want %v", c.typ, got, want)
		}
	}
}
