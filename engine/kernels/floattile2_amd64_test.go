//go:build !purego

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestFloatAVX2TokenKernels: dotF16AVX2t3/t2 and dotBF16AVX2t3/t2 give every
// token the bits of the one-token AVX2 kernel (dotF16AVX2, dotBF16AVX2) and of
// dotFloatSIMDOrder, for lengths that are multiples of 8 but not all of 64
// (groups of 8 into accumulator 0), at strides that are not the row length,
// and write only their outputs.
func TestFloatAVX2TokenKernels(t *testing.T) {
	requireSIMD(t, "avx2")
	type kernel = func(x *byte, y *float32, ys, n int, out *float32, os int)
	kernels := map[Type]map[int]kernel{
		F16:  {3: dotF16AVX2t3, 2: dotF16AVX2t2},
		BF16: {3: dotBF16AVX2t3, 2: dotBF16AVX2t2},
	}
	one := map[Type]func(x *byte, y *float32, n int) float32{F16: dotF16AVX2, BF16: dotBF16AVX2}
	r := rand.New(rand.NewPCG(95, 96))
	const guard = -12345.5
	for _, typ := range []Type{F16, BF16} {
		for _, n := range []int{8, 56, 64, 72, 120, 128, 168, 768, 2056} {
			for T, k := range kernels[typ] {
				name := fmt.Sprintf("%v/%d/t%d", typ, n, T)
				row := make([]byte, typ.RowBytes(n))
				QuantizeRow(row, typ, randRow(r, n, 0.5))
				w := make([]float32, n)
				DequantizeRow(w, typ, row)
				const pad, os = 5, 3
				ys := n + pad
				y := randRow(r, T*ys, 2)
				for i := range y {
					if typ == F16 {
						y[i] = RoundF16(y[i])
					} else {
						y[i] = RoundBF16(y[i])
					}
				}
				out := make([]float32, T*os+1)
				for i := range out {
					out[i] = guard
				}
				k(&row[0], (*float32)(unsafe.Pointer(&y[0])), 4*ys, n, &out[0], 4*os)
				for i, v := range out {
					tk := i / os
					if i%os != 0 || tk >= T {
						if v != guard {
							t.Fatalf("%s: out[%d] = %v, written outside the outputs", name, i, v)
						}
						continue
					}
					yt := y[tk*ys : tk*ys+n]
					if want := dotFloatSIMDOrder(w, yt); math.Float32bits(v) != math.Float32bits(want) {
						t.Fatalf("%s: token %d = %v, the kernels' order in Go %v", name, tk, v, want)
					}
					if o := one[typ](&row[0], &yt[0], n); math.Float32bits(v) != math.Float32bits(o) {
						t.Fatalf("%s: token %d = %v, one-token kernel %v", name, tk, v, o)
					}
				}
			}
		}
	}
}

// TestMatMulFloatTokensMatchOneToken: MatMul of F16 and BF16 weights for every
// token count 1-40 and lengths with and without groups of 8 and single
// elements over (and fewer than 8), on every SIMD level, gives every token the
// bits of dotF16Row / dotBF16Row on that level (MatMul of that token alone)
// and writes nothing past its outputs. On AVX2 the tokens go through
// dotF16AVX2t3/t2 (f32Tokens), on AVX-512 through floatTokens' kernels.
func TestMatMulFloatTokensMatchOneToken(t *testing.T) {
	defer SetThreads(SetThreads(1))
	const guard = -12345.5
	for _, level := range []string{"generic", "avx2", "avx512"} {
		t.Run(level, func(t *testing.T) {
			if level != "generic" {
				requireSIMD(t, level)
			}
			defer setSIMD(level)()
			r := rand.New(rand.NewPCG(97, 98))
			const rows = 19
			for _, typ := range []Type{F16, BF16} {
				for _, cols := range []int{5, 8, 64, 72, 133, 172, 512} {
					w := Matrix{Type: typ, Rows: rows, Cols: cols, Data: make([]byte, rows*typ.RowBytes(cols))}
					for i := 0; i < rows; i++ {
						QuantizeRow(w.Row(i), typ, randRow(r, cols, 0.5))
					}
					x := randRow(r, 40*cols, 1)
					alone := make([]float32, 40*rows)
					for tk := 0; tk < 40; tk++ {
						MatMul(alone[tk*rows:(tk+1)*rows], w, x[tk*cols:(tk+1)*cols], 1)
					}
					for n := 1; n <= 40; n++ {
						dst := make([]float32, n*rows+3)
						for i := range dst {
							dst[i] = guard
						}
						MatMul(dst, w, x, n)
						for k, v := range dst {
							if k >= n*rows {
								if v != guard {
									t.Fatalf("%v cols %d, %d tokens: dst[%d] = %v, written past the outputs", typ, cols, n, k, v)
								}
								continue
							}
							if math.Float32bits(v) != math.Float32bits(alone[k]) {
								t.Fatalf("%v cols %d, %d tokens: token %d row %d: %v, alone %v", typ, cols, n, k/rows, k%rows, v, alone[k])
							}
						}
					}
				}
			}
		})
	}
}
