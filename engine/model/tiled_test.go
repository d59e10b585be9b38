package model_test

import (
	"math"
	"testing"

	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/engine/kernels"
	"github.com/lmlite/lmlite/engine/model"
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
