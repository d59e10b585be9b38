package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestDotF16VecDotRowsLevelsMatchGeneric checks that dotF16VecDotRows (through
// attnScoresF16 where the CPU has AVX2) gives the bits of the pure-Go order
// (dotF16VecDot64Generic, then the float64 tail) at every SIMD level, for lengths
// below, at and above multiples of 64 and row counts around the four-row groups.
func TestDotF16VecDotRowsLevelsMatchGeneric(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, level := range simdLevels() {
		restore := setSIMD(level)
		for _, n := range []int{1, 2, 3, 4, 5, 16, 17, 32, 40, 48, 64, 65, 66, 72, 79, 80, 96, 128, 200, 768} {
			for _, rows := range []int{1, 3, 4, 7, 8, 9, 16, 17, 24, 31, 32, 40, 47} {
				w := make([]byte, 2*n*rows)
				for i := 0; i < len(w); i += 2 {
					h := F32ToF16(float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(6)-3))))
					w[i], w[i+1] = byte(h), byte(h>>8)
				}
				x := make([]float32, n)
				for i := range x {
					x[i] = RoundF16(float32(rng.NormFloat64()))
				}
				got := make([]float32, rows)
				dotF16VecDotRows(got, w, x)
				n64 := n &^ 63
				for r := range rows {
					row := w[r*2*n : (r+1)*2*n]
					var s float64
					if n64 > 0 {
						s = float64(dotF16VecDot64Generic(row[:2*n64], x[:n64]))
					}
					for i := n64; i < n; i++ {
						s += float64(f16Table[le16(row[2*i:])] * x[i])
					}
					if want := float32(s); math.Float32bits(got[r]) != math.Float32bits(want) {
						t.Errorf("%s: n %d, %d rows: row %d %g, generic %g", level, n, rows, r, got[r], want)
					}
				}
			}
		}
		restore()
	}
}

// TestDotF16VecDotRows2MatchesOneToken checks that two tokens at once
// (dotF16VecDotRows2, through dotF16VecDotTail16AVX512t2 where the CPU has
// AVX-512, dotF16VecDotTail16AVX2t2 on AVX2) give each token the bits of dotF16VecDotRows alone, at every SIMD
// level, for tails of none, 16 and other lengths and row counts around the
// sixteen-row groups.
func TestDotF16VecDotRows2MatchesOneToken(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, level := range simdLevels() {
		restore := setSIMD(level)
		for _, n := range []int{8, 16, 17, 32, 48, 64, 80, 96, 100} {
			for _, rows := range []int{1, 8, 15, 16, 17, 24, 32, 47, 64} {
				w := make([]byte, 2*n*rows)
				for i := 0; i < len(w); i += 2 {
					h := F32ToF16(float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(8)-4))))
					w[i], w[i+1] = byte(h), byte(h>>8)
				}
				x := make([]float32, 2*n)
				for i := range x {
					x[i] = RoundF16(float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(4)-2))))
				}
				got := make([]float32, 2*rows+3)
				dotF16VecDotRows2(got[:rows], got[rows+3:], w, x[:n], x[n:])
				for tok := range 2 {
					want := make([]float32, rows)
					dotF16VecDotRows(want, w, x[tok*n:(tok+1)*n])
					g := got[:rows]
					if tok == 1 {
						g = got[rows+3:]
					}
					for r := range rows {
						if math.Float32bits(g[r]) != math.Float32bits(want[r]) {
							t.Errorf("%s: n %d, %d rows: token %d row %d %g, alone %g", level, n, rows, tok, r, g[r], want[r])
						}
					}
				}
			}
		}
		restore()
	}
}

// TestAddScaledLevelsMatchGeneric checks AddScaled's bits (each product rounded
// to float32, then added: not a fused multiply-add) against the Go loop at every
// SIMD level, for lengths around the kernel's 8 and 32 values.
func TestAddScaledLevelsMatchGeneric(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, level := range simdLevels() {
		restore := setSIMD(level)
		for _, n := range []int{0, 1, 7, 8, 9, 31, 32, 33, 40, 100, 2048} {
			src, dst := make([]float32, n), make([]float32, n+1)
			for i := range src {
				src[i] = float32(rng.NormFloat64())
			}
			for i := range dst {
				dst[i] = float32(rng.NormFloat64()) // near the products: a fused multiply-add would differ
			}
			s := float32(rng.NormFloat64())
			want := append([]float32(nil), dst...)
			for i, v := range src {
				want[i] += float32(v * s)
			}
			AddScaled(dst, src, s)
			for i := range dst {
				if math.Float32bits(dst[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s: n %d: value %d %g, want %g (the product rounded, then added)", level, n, i, dst[i], want[i])
				}
			}
		}
		restore()
	}
}
