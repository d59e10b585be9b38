package engine

import (
	"testing"

	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/engine/kernels"
	"github.com/lmlite/lmlite/engine/model"
)

// TestAttentionModeDefault: a model that says nothing about attention_f32_min_prompt
// serves a prompt of 64 tokens or more in float32 attention where that runs on its
// assembly (the bits of a model set to 64) and in binary16 elsewhere (the bits of a
// model set to -1); a shorter prompt gets binary16 under every setting. The two
// modes do give different bits here, so the comparisons can tell them apart.
func TestAttentionModeDefault(t *testing.T) {
	opts := genmodel.Options{Arch: "llama", Type: "q4_k_m", Seed: 5} // tiny: head size 64
	def := genBlock(t, ModelConfig{MaxModelLen: 256, DisablePrefixCache: true}, opts)
	f32 := genBlock(t, ModelConfig{MaxModelLen: 256, DisablePrefixCache: true, AttnF32MinPrompt: model.AttnF32MinPrompt}, opts)
	off := genBlock(t, ModelConfig{MaxModelLen: 256, DisablePrefixCache: true, AttnF32MinPrompt: -1}, opts)
	tok, _ := def.Tokenizer("m")
	req := func(n int) Request {
		return Request{Prompt: promptOf(n, 3, tok.VocabSize()), MaxTokens: 8, Sampling: Sampling{Temperature: 0.7, Seed: 9}}
	}
	long, short := req(80), req(40)
	gotLong, wantF32, wantF16 := generate(def, long), generate(f32, long), generate(off, long)
	if wantF32.same(wantF16) == nil {
		t.Fatal("float32 and binary16 attention gave the same bits: the test cannot tell them apart")
	}
	want, mode := wantF16, "binary16"
	if kernels.FastAttnF32(64) {
		want, mode = wantF32, "float32"
	}
	if err := want.same(gotLong); err != nil {
		t.Errorf("80-token prompt by default, want %s attention: %v", mode, err)
	}
	s := generate(off, short)
	for name, b := range map[string]*Block{"default": def, "64": f32} {
		if err := s.same(generate(b, short)); err != nil {
			t.Errorf("40-token prompt, attention_f32_min_prompt %s: not binary16's bits: %v", name, err)
		}
	}
}
