package model

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/engine/gguf"
)

// TestTrailingOneDimensionsAreAbsent writes a Qwen2MoE model the way llama.cpp's
// converter does, its shared-expert gate vector blk.N.ffn_gate_inp_shexp.weight as
// [n_embd 1], and its output matrix as [n_embd vocab 1], and checks that it loads
// and gives the same logits as the model with the plain shapes: a tensor's shape is
// its ggml ne with trailing ones dropped, as llama.cpp takes it (issue 32).
func TestTrailingOneDimensionsAreAbsent(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain.gguf")
	if err := genmodel.Generate(genmodel.Options{Arch: "qwen2moe", Preset: "tiny", Type: "f32", Seed: 3}, plain); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(plain)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := gguf.NewWriter()
	for _, kv := range f.KV {
		w.AddKV(kv.Key, kv.Value)
	}
	padded := 0
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		dims := ti.Dims
		if len(dims) == 1 && strings.HasSuffix(ti.Name, ".ffn_gate_inp_shexp.weight") || ti.Name == "output.weight" || ti.Name == "token_embd.weight" {
			dims = append(slices.Clone(dims), 1)
			padded++
		}
		if err := w.AddTensor(ti.Name, ti.Type, dims, f.TensorData(ti)); err != nil {
			t.Fatal(err)
		}
	}
	if padded < 3 {
		t.Fatalf("only %d tensors padded: the generated model has no ffn_gate_inp_shexp", padded)
	}
	conv := filepath.Join(dir, "converter.gguf")
	if err := w.WriteFile(conv); err != nil {
		t.Fatal(err)
	}
	ids := []int32{1, 574, 568, 260, 562}
	var logits [2][]float32
	for i, p := range []string{plain, conv} {
		m, err := Open(p)
		if err != nil {
			t.Fatalf("%s: %v", filepath.Base(p), err)
		}
		logits[i], err = m.NewState(0).Forward(ids, true)
		m.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(logits[0], logits[1]) {
		t.Error("the model with trailing 1-dimensions gives other logits")
	}
}
