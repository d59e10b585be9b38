//go:build !purego

package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// expf's special cases and every binade reach the assembly through attnExpF16:
// scores s against a running maximum of 0 give expf(s) (s ≤ 0) or expf(-s).
func TestAttnExpMatchesExpf(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2")
	}
	r := rand.New(rand.NewPCG(23, 24))
	var xs []float32
	for _, x := range []float64{0, -0.0, -87.33654, -87.33655, -87.3365, -88, -100, -1e30, math.Inf(-1), math.NaN(), -1e-30, -0.5, -1} {
		xs = append(xs, float32(x))
	}
	for i := 0; i < 4000; i++ {
		xs = append(xs, -float32(math.Abs(r.NormFloat64()*30)))
	}
	for len(xs)%8 != 0 {
		xs = append(xs, -1)
	}
	for i := 0; i < len(xs); i += 8 {
		var s [8]float32
		copy(s[:], xs[i:i+8])
		var mask [2]uint8
		mx := float32(0)
		if i%16 == 0 && useAVX512 && i+16 <= len(xs) {
			var s16 [16]float32
			copy(s16[:], xs[i:i+16])
			attnExpF16AVX512(&s16[0], 16, &mx, &mask[0])
			copy(s[:], s16[:8])
		} else {
			attnExpF16(&s[0], 8, &mx, &mask[0])
		}
		for l, x := range xs[i : i+8] {
			want := expf(x)
			if x != x {
				want = expf(x - 0)
			}
			if math.Float32bits(s[l]) != math.Float32bits(want) && !(s[l] != s[l] && want != want) {
				t.Errorf("expf(%v): assembly %v (%#x), Go %v (%#x)", x, s[l], math.Float32bits(s[l]), want, math.Float32bits(want))
			}
		}
		if mask[0] != 0 || mx != 0 {
			t.Errorf("scores ≤ 0 against 0: mask %#x, max %v", mask[0], mx)
		}
	}
}
