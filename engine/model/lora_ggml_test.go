package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/engine/kernels"
	"github.com/lmlite/lmlite/internal/ggmlref"
)

// TestLoRAMatchesLlamaCppBits applies generated adapters (each type a pair can
// have, with alpha and user scales) to projections of generated bases and compares
// the adapted outputs bit for bit with llama.cpp's CPU backend (its AVX-512
// variant) running build_lora_mm's graph (W·x + ggml_scale(B·(A·x), scale)) on the
// same tensors one token at a time, as llama.cpp decodes. The base product W·x is
// llama.cpp's in both (its order is the kernels' business): what is compared is
// the update, A·x and B·(A·x) in ggml_vec_dot's order, scaled, then added. The
// rows go through scratch.lora as a batch of several tokens, so a token's bits
// are the same in a batch as alone. Not bf16 pairs: llama.cpp's AVX-512 builds
// differ there among themselves (VDPBF16PS where the CPU has AVX512_BF16, products
// and sums elsewhere), and lmlite keeps MatMul's order for them.
func TestLoRAMatchesLlamaCppBits(t *testing.T) {
	if testing.Short() {
		t.Skip("runs llama.cpp's libraries; skipped in -short")
	}
	dir := t.TempDir()
	cases := []struct {
		base  string // base type
		lora  genmodel.LoRAOptions
		scale float32
	}{
		{"q8_0", genmodel.LoRAOptions{Rank: 16, Alpha: 32, Seed: 1}, 1},                 // lora/llama-q8_0: f16 pairs
		{"q4_k_m", genmodel.LoRAOptions{Rank: 4, Alpha: 8, Seed: 4, Type: "f32"}, 0.7},  // f32 pairs, a rank below 8
		{"q4_k_m", genmodel.LoRAOptions{Rank: 16, Alpha: 16, Seed: 3}, 0.5},             // f16
		{"f16", genmodel.LoRAOptions{Rank: 8, Seed: 2}, 0.8},                            // f16, alpha 0
		{"f16", genmodel.LoRAOptions{Rank: 32, Alpha: 64, Seed: 6, Type: "q8_0"}, 1},    // q8_0 pairs
		{"q8_0", genmodel.LoRAOptions{Rank: 64, Alpha: 16, Seed: 8, Type: "f32"}, 1.5},  // f32, rank a multiple of 64
		{"q8_0", genmodel.LoRAOptions{Rank: 72, Alpha: 16, Seed: 9, Type: "f16"}, 0.25}, // f16, 64 values and a tail
		{"q8_0", genmodel.LoRAOptions{Rank: 24, Alpha: 16, Seed: 10, Type: "f32"}, 1},   // f32, a tail of three eights
	}
	const nTok = 3
	rng := rand.New(rand.NewPCG(32, 45))
	for _, tc := range cases {
		typ := tc.lora.Type
		if typ == "" {
			typ = "f16"
		}
		name := fmt.Sprintf("%s-%s-r%d", tc.base, typ, tc.lora.Rank)
		t.Run(name, func(t *testing.T) {
			base := filepath.Join(dir, tc.base+".gguf")
			if err := genmodel.Generate(genmodel.Options{Arch: "llama", Preset: "tiny", Type: tc.base, Seed: 7}, base); err != nil {
				t.Fatal(err)
			}
			m, err := Open(base)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			o := tc.lora
			o.Base = base
			path := filepath.Join(dir, name+"-lora.gguf")
			if err := genmodel.GenerateLoRA(o, path); err != nil {
				t.Fatal(err)
			}
			ad, err := m.OpenAdapter(path)
			if err != nil {
				t.Fatal(err)
			}
			defer ad.Close()
			ly := &m.layers[1]
			for _, p := range []struct {
				name string
				pr   proj
				w    kernels.Matrix
			}{{"attn_q", projQ, ly.wq}, {"ffn_gate", projGate, ly.gate}, {"ffn_down", projDown, ly.down}} {
				pair := ad.layers[1][p.pr]
				in, out := p.w.Cols, p.w.Rows
				x := make([]float32, nTok*in)
				for i := range x {
					x[i] = float32(rng.NormFloat64() * math.Pow(10, float64(i%7-4)))
				}
				// llama.cpp, a token at a time.
				wx := make([]float32, nTok*out)
				want := make([]float32, nTok*out)
				for tok := 0; tok < nTok; tok++ {
					r := ggmlref.RunLoRA(t, uint32(p.w.Type), uint32(pair.a.Type), uint32(pair.b.Type), p.w.Data, pair.a.Data, pair.b.Data,
						in, out, pair.rank, 1, x[tok*in:(tok+1)*in], pair.scale(ad.alpha, tc.scale))
					copy(wx[tok*out:], r.WX)
					copy(want[tok*out:], r.Res)
				}
				// lmlite, the tokens as one batch over llama.cpp's W·x.
				var w scratch
				parts := []part{{tokens: make([]int32, nTok), loras: []LoRA{{Adapter: ad, Scale: tc.scale}}}}
				got := append([]float32(nil), wx...)
				w.lora(parts, 1, p.pr, got, out, x, in)
				diff, maxRel := 0, 0.0
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						diff++
						maxRel = max(maxRel, math.Abs(float64(got[i]-want[i]))/math.Abs(float64(want[i]-wx[i])))
					}
				}
				if diff > 0 {
					t.Errorf("%s (%d×%d, rank %d): %d of %d adapted outputs differ from llama.cpp's bits (largest difference %.2g of the update)",
						p.name, out, in, pair.rank, diff, len(got), maxRel)
				}
			}
		})
	}
}
