package genmodel

import (
	"path/filepath"
	"testing"

	"github.com/lmlite/lmlite/engine/gguf"
)

// TestGenerateContextOverridesThePresetsContextLength: Options.Context is the
// context_length the file declares, so a tiny model can take an agent's long prompt.
func TestGenerateContextOverridesThePresetsContextLength(t *testing.T) {
	for _, tc := range []struct{ context, want int }{{0, Presets["tiny"].Context}, {65536, 65536}} {
		path := filepath.Join(t.TempDir(), "m.gguf")
		if err := Generate(Options{Arch: "qwen3", Preset: "tiny", Type: "q8_0", Seed: 1, Context: tc.context}, path); err != nil {
			t.Fatal(err)
		}
		f, err := gguf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := f.GetUint("qwen3.context_length")
		f.Close()
		if !ok || got != uint64(tc.want) {
			t.Errorf("Context %d: context_length %d (%v), want %d", tc.context, got, ok, tc.want)
		}
	}
	if err := Generate(Options{Arch: "llama", Preset: "tiny", Type: "q8_0", Context: -1}, filepath.Join(t.TempDir(), "m.gguf")); err == nil {
		t.Error("a negative context length was accepted")
	}
}
