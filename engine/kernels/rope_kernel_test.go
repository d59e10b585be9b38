package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// ropeReference is RoPE's Go loop as it was before the AVX2 kernels (d73e63d),
// verbatim: the bits RoPE must keep.
func ropeReference(x []float32, nHeads, headDim, nDims int, cos, sin []float32, neox bool) {
	half := nDims / 2
	for h := 0; h < nHeads; h++ {
		v := x[h*headDim : h*headDim+nDims]
		for i := 0; i < half; i++ {
			a, b := 2*i, 2*i+1
			if neox {
				a, b = i, i+half
			}
			x0, x1 := v[a], v[b]
			v[a] = fmaf(x0, cos[i], -float32(x1*sin[i]))
			v[b] = fmaf(x0, sin[i], float32(x1*cos[i]))
		}
	}
}

// ropeExtremes are inputs where a wrong rounding or sign shows: signed zeros,
// subnormals, values whose products overflow or underflow float32, infinities
// and NaN.
var ropeExtremes = []float32{
	0, float32(math.Copysign(0, -1)), 1, -1, 1e-45, -1e-45, 1e-40, -3e-39, 1.1754944e-38,
	1e-20, -1e-20, 1e20, -1e20, 3e38, -3.4028235e38, 65504, 1e-7,
	float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
}

// fillRoPECase fills x, cos and sin for one case: kind 0 random normals with
// RoPECache's angles, 1 random extremes everywhere, 2 pairs where x0·cos and
// x1·sin nearly cancel (there no FMA gives other bits), 3 pairs where x0·cos is
// exactly halfway between two float32 and x1·sin tiny: the float64 FMA rounds
// to the halfway value and VCVTPD2PS to even, a float32 FMA (one rounding) can
// go the other way.
func fillRoPECase(r *rand.Rand, kind int, x, cos, sin []float32, neox bool) {
	half := len(cos)
	switch kind {
	case 0:
		RoPECache(cos, sin, r.IntN(40000), 2*half, 10000, 1, nil)
		for i := range x {
			x[i] = float32(r.NormFloat64() * 3)
		}
	case 1:
		pick := func() float32 {
			if r.IntN(3) == 0 {
				return float32(r.NormFloat64())
			}
			return ropeExtremes[r.IntN(len(ropeExtremes))]
		}
		for i := range cos {
			cos[i], sin[i] = pick(), pick()
		}
		for i := range x {
			x[i] = pick()
		}
	case 3:
		odd := func() float32 { return 1 + float32(2*r.IntN(500)+1)/4096 }
		for i := range cos {
			cos[i], sin[i] = odd()/2, 0x1p-40
		}
		for i := range x {
			x[i] = odd() * float32(math.Ldexp(1, r.IntN(7)-3))
			if r.IntN(2) == 0 {
				x[i] = -x[i]
			}
		}
		headDim := len(x)
		for i := 0; i < half && 2*half <= headDim; i++ {
			b := 2*i + 1
			if neox {
				b = i + half
			}
			x[b] = 0x1p-40
			if r.IntN(2) == 0 {
				x[b] = -x[b]
			}
		}
	case 2:
		RoPECache(cos, sin, r.IntN(40000), 2*half, 10000, 1, nil)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		headDim := len(x) // one head here: pairs (a, b) with x1 ≈ x0·cos/sin
		for i := 0; i < half && 2*half <= headDim; i++ {
			a, b := 2*i, 2*i+1
			if neox {
				a, b = i, i+half
			}
			if sin[i] != 0 {
				x[b] = x[a] * cos[i] / sin[i]
			}
		}
	}
}

// TestRoPEKernelMatchesGo: RoPE (the AVX2 kernels where the build and CPU have
// them, with their Go tails) gives the bits of the Go loop ropeReference on
// random, extreme, cancelling and double-rounding inputs, normal and neox, half = 1…70 (every
// tail), several heads and partial rotations (headDim > nDims), leaving the
// unrotated elements alone. Run it also under GODEBUG=cpu.avx512f=off and
// -tags purego.
func TestRoPEKernelMatchesGo(t *testing.T) {
	t.Logf("assembly on: %v", simdAvailable())
	r := rand.New(rand.NewPCG(49, 8))
	for _, neox := range []bool{false, true} {
		for half := 1; half <= 70; half++ {
			for _, extra := range []int{0, 2, 7} {
				for kind := 0; kind < 4; kind++ {
					nHeads := 1 + r.IntN(3)
					nDims := 2 * half
					headDim := nDims + extra
					if kind >= 2 {
						nHeads = 1
					}
					cos, sin := make([]float32, half), make([]float32, half)
					x := make([]float32, nHeads*headDim)
					fillRoPECase(r, kind, x, cos, sin, neox)
					want := append([]float32(nil), x...)
					ropeReference(want, nHeads, headDim, nDims, cos, sin, neox)
					got := append([]float32(nil), x...)
					RoPE(got, nHeads, headDim, nDims, cos, sin, neox)
					bad := 0
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							if bad < 3 {
								t.Errorf("neox %v half %d headDim %d heads %d kind %d: x[%d] = %g (%#08x), Go loop %g (%#08x); input %g",
									neox, half, headDim, nHeads, kind, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]), x[i])
							}
							bad++
						}
					}
					if bad > 3 {
						t.Errorf("... %d values differ", bad)
					}
				}
			}
		}
	}
}

// BenchmarkRoPE: one position's rotation of q-sized rows, the Go loop of d73e63d
// (reference), the hoisted Go loop ropeHeadGeneric (the purego path and the
// tails) and RoPE (the AVX2 kernels where on).
func BenchmarkRoPE(b *testing.B) {
	for _, sh := range []struct{ heads, dims int }{{32, 64}, {4, 64}, {32, 128}} {
		for _, neox := range []bool{false, true} {
			half := sh.dims / 2
			cos, sin := make([]float32, half), make([]float32, half)
			RoPECache(cos, sin, 1234, sh.dims, 10000, 1, nil)
			x := make([]float32, sh.heads*sh.dims)
			r := rand.New(rand.NewPCG(1, 2))
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
			name := fmt.Sprintf("%dx%d-neox%v", sh.heads, sh.dims, neox)
			b.Run(name+"/reference", func(b *testing.B) {
				for b.Loop() {
					ropeReference(x, sh.heads, sh.dims, sh.dims, cos, sin, neox)
				}
			})
			b.Run(name+"/go", func(b *testing.B) {
				for b.Loop() {
					for h := 0; h < sh.heads; h++ {
						ropeHeadGeneric(x[h*sh.dims:(h+1)*sh.dims], cos, sin, 0, neox)
					}
				}
			})
			b.Run(name+"/RoPE", func(b *testing.B) {
				for b.Loop() {
					RoPE(x, sh.heads, sh.dims, sh.dims, cos, sin, neox)
				}
			})
		}
	}
}
