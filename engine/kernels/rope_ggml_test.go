package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lmlite/lmlite/internal/ggmlref"
)

// TestRoPEMatchesLlamaCppBits rotates random heads at positions from 0 to beyond
// 30000 with RoPE and compares the bits with llama.cpp's RoPE op (its AVX-512 CPU
// variant) at the same angles (llama.cpp's cos and sin, read as its rotation of
// the pairs (1, 0)): normal and neox pairs, partial rotations (phi3's), the llama
// and llama3 frequency bases and a linear frequency scale. It logs how many of
// RoPECache's values differ from llama.cpp's. A last-bit
// difference in q or k is invisible on a bare quantized model but not once an
// F16 LoRA adapter reads the values (issue 32, lora/llama-q8_0).
func TestRoPEMatchesLlamaCppBits(t *testing.T) {
	if testing.Short() {
		t.Skip("runs llama.cpp's libraries; skipped in -short")
	}
	rng := rand.New(rand.NewPCG(7, 32))
	var pos []int32
	for p := int32(0); p < 80; p++ {
		pos = append(pos, p)
	}
	pos = append(pos, 511, 1000, 4095, 8191, 32767)
	for _, tc := range []struct {
		hd, nh, nDims int
		neox          bool
		base, fscale  float32
	}{
		{64, 4, 64, false, 10000, 1},
		{64, 2, 64, true, 1000000, 1},
		{128, 2, 128, false, 500000, 1},
		{96, 2, 32, true, 10000, 1},
		{64, 2, 64, false, 10000, 0.25},
	} {
		t.Run(fmt.Sprintf("hd%d-dims%d-neox%v-base%g-scale%g", tc.hd, tc.nDims, tc.neox, tc.base, tc.fscale), func(t *testing.T) {
			x := make([]float32, tc.hd*tc.nh*len(pos))
			for i := range x {
				x[i] = float32(rng.NormFloat64() * 3)
			}
			want := ggmlref.RoPE(t, x, tc.hd, tc.nh, pos, tc.nDims, tc.neox, tc.base, tc.fscale)
			// llama.cpp's cos and sin: the rotation of the pairs (1, 0).
			half := tc.nDims / 2
			unit := make([]float32, tc.hd*len(pos))
			for i := range pos {
				for j := 0; j < half; j++ {
					a := 2 * j
					if tc.neox {
						a = j
					}
					unit[i*tc.hd+a] = 1
				}
			}
			cache := ggmlref.RoPE(t, unit, tc.hd, 1, pos, tc.nDims, tc.neox, tc.base, tc.fscale)
			got := append([]float32(nil), x...)
			cs, sn := make([]float32, half), make([]float32, half)
			gcs, gsn := make([]float32, half), make([]float32, half)
			diff, cacheDiff := 0, 0
			for i, p := range pos {
				RoPECache(cs, sn, int(p), tc.nDims, tc.base, tc.fscale, nil)
				for j := 0; j < half; j++ {
					a, b := 2*j, 2*j+1
					if tc.neox {
						a, b = j, j+half
					}
					gcs[j], gsn[j] = cache[i*tc.hd+a], cache[i*tc.hd+b]
					if gcs[j] != cs[j] || gsn[j] != sn[j] {
						cacheDiff++
					}
				}
				row := got[i*tc.hd*tc.nh : (i+1)*tc.hd*tc.nh]
				RoPE(row, tc.nh, tc.hd, tc.nDims, gcs, gsn, tc.neox)
				for j, v := range row {
					if w := want[i*tc.hd*tc.nh+j]; math.Float32bits(v) != math.Float32bits(w) {
						if diff < 3 {
							t.Logf("position %d value %d: %g, llama.cpp %g", p, j, v, w)
						}
						diff++
					}
				}
			}
			t.Logf("RoPECache: %d of %d angles' cos or sin differ from llama.cpp's (libm's cosf and sinf)", cacheDiff, half*len(pos))
			if diff > 0 {
				t.Errorf("%d of %d rotated values differ from llama.cpp's bits", diff, len(x))
			}
		})
	}
}
