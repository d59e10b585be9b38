package model_test

import (
	"math"
	"testing"

	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/engine/kernels"
	"github.com/lmlite/lmlite/engine/model"
	"github.com/lmlite/lmlite/kvcache"
)

// TestTiledAttentionMatchesPerHead: the forward pass with attention tiled over tokens
// and the heads of a GQA group gives the logits bits of the per-(token, head) path,
// for a prompt of 300 tokens at once (many tiles, cache blocks and chunks, causal
// counts ending everywhere) and one token at a time after it, on 1 and 2 threads.
func TestTiledAttentionMatchesPerHead(t *testing.T) {
	for _, o := range []genmodel.Options{{Arch: "llama", Type: "q4_k_m"}, {Arch: "phi3", Type: "f16"}} {
		t.Run(o.Arch, func(t *testing.T) {
			m := genTinyOpts(t, o)
			V := m.Config().Vocab
			prompt := make([]int32, 300)
			for j := range prompt {
				prompt[j] = int32((j*104729 + 7) % V)
			}
			run := func(tiled bool, threads int) [][]float32 {
				defer model.SetTiledAttention(tiled)()
				defer kernels.SetThreads(kernels.SetThreads(threads))
				st := m.NewState(0)
				all, err := st.Forward(prompt, true)
				if err != nil {
					t.Fatal(err)
				}
				out := [][]float32{append([]float32(nil), all...)}
				for _, tok := range []int32{3, 5, 7} {
					l, err := st.Forward([]int32{tok}, false)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, append([]float32(nil), l...))
				}
				return out
			}
			want := run(false, 1)
			for _, threads := range []int{1, 2} {
				got := run(true, threads)
				for s := range want {
					for i := range want[s] {
						if math.Float32bits(got[s][i]) != math.Float32bits(want[s][i]) {
							t.Fatalf("%d threads, step %d: logit %d = %v tiled, %v per head", threads, s, i, got[s][i], want[s][i])
						}
					}
				}
			}
		})
	}
}

// TestF32AttentionIsBatchInvariant: a sequence in float32 mode (AttnF32) gets the
// same logits bits for its 300-token prompt and the 3 tokens decoded after it,
// whether the prompt runs as one batch on one thread; in chunks of 1, 70, 100 and
// the rest on two threads; per (token, head) instead of tiled; or through a Batch
// over a paged cache of 16-token blocks, in chunks of 7 tokens beside a
// binary16-mode sequence of another prompt. Its logits differ from the same
// sequence's in AttnF16 mode, so the mode is taken.
func TestF32AttentionIsBatchInvariant(t *testing.T) {
	m := genTinyOpts(t, genmodel.Options{Arch: "llama", Type: "q4_k_m"})
	V := m.Config().Vocab
	prompt := make([]int32, 300)
	other := make([]int32, 40)
	for j := range prompt {
		prompt[j] = int32((j*104729 + 7) % V)
	}
	for j := range other {
		other[j] = int32((j*7919 + 3) % V)
	}
	gen := []int32{3, 5, 7}
	rows := func(all []float32) [][]float32 {
		var r [][]float32
		for i := 0; i < len(all); i += V {
			r = append(r, append([]float32(nil), all[i:i+V]...))
		}
		return r
	}
	state := func(attn model.Attention, chunks []int, tiled bool, threads int) [][]float32 {
		defer model.SetTiledAttention(tiled)()
		defer kernels.SetThreads(kernels.SetThreads(threads))
		st := m.NewState(0)
		st.SetAttention(attn)
		var out [][]float32
		done := 0
		for _, n := range chunks {
			n = min(n, len(prompt)-done)
			l, err := st.Forward(prompt[done:done+n], true)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, rows(l)...)
			done += n
		}
		for _, tok := range gen {
			l, err := st.Forward([]int32{tok}, false)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, rows(l)...)
		}
		return out
	}
	batch := func() [][]float32 {
		cfg := m.KVConfig()
		cfg.BlockTokens, cfg.Blocks = 16, 64
		pool, err := kvcache.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		b := m.NewBatch()
		kv, kvo := pool.NewSeq("a"), pool.NewSeq("b")
		var out [][]float32
		seq := append(append([]int32(nil), prompt...), gen...)
		for done, odone := 0, 0; done < len(seq); {
			n := min(7, len(prompt)-done)
			if done >= len(prompt) {
				n = 1
			}
			logits := n
			if done >= len(prompt) {
				logits = 1
			}
			if err := kv.Grow(done + n); err != nil {
				t.Fatal(err)
			}
			items := []model.Item{{KV: kv, Start: done, Tokens: seq[done : done+n], Logits: logits, Attn: model.AttnF32}}
			if odone < len(other) {
				on := min(5, len(other)-odone)
				if err := kvo.Grow(odone + on); err != nil {
					t.Fatal(err)
				}
				items = append(items, model.Item{KV: kvo, Start: odone, Tokens: other[odone : odone+on], Logits: 1, Attn: model.AttnF16})
				odone += on
			}
			l, err := b.Forward(items)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, rows(l[0])...)
			done += n
		}
		return out
	}
	want := state(model.AttnF32, []int{len(prompt)}, true, 1)
	for name, got := range map[string][][]float32{
		"chunked, 2 threads":           state(model.AttnF32, []int{1, 70, 100, len(prompt)}, true, 2),
		"per head":                     state(model.AttnF32, []int{len(prompt)}, false, 2),
		"batch beside an f16 sequence": batch(),
	} {
		if len(got) != len(want) {
			t.Fatalf("%s: %d rows, want %d", name, len(got), len(want))
		}
		for s := range want {
			for i := range want[s] {
				if math.Float32bits(got[s][i]) != math.Float32bits(want[s][i]) {
					t.Fatalf("%s: row %d logit %d = %v, one batch %v", name, s, i, got[s][i], want[s][i])
				}
			}
		}
	}
	f16 := state(model.AttnF16, []int{len(prompt)}, true, 1)
	differ := 0
	for s := range want {
		for i := range want[s] {
			if want[s][i] != f16[s][i] {
				differ++
			}
		}
	}
	if differ == 0 {
		t.Fatal("AttnF32 gave the logits of AttnF16: the mode was not taken")
	}
}

// TestAttentionForFollowsThreshold: float32 attention from a model's threshold on;
// binary16 (llama.cpp's one-query numerics) below it, and for every prompt however
// long where the threshold is none (0 or less).
func TestAttentionForFollowsThreshold(t *testing.T) {
	for _, c := range []struct {
		prompt, min int
		want        model.Attention
	}{
		{10000, 0, model.AttnF16},
		{63, model.AttnF32MinPrompt, model.AttnF16},
		{64, model.AttnF32MinPrompt, model.AttnF32},
		{5, 1, model.AttnF32},
		{5, -1, model.AttnF16},
	} {
		if got := model.AttentionFor(c.prompt, c.min); got != c.want {
			t.Errorf("AttentionFor(%d, %d) = %v, want %v", c.prompt, c.min, got, c.want)
		}
	}
}
