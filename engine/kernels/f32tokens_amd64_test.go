//go:build !purego

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestF32TokenKernels: dotF32AVX512t6/t4/t2 and dotF32AVX2t3/t2 give every
// token the bits of the one-token F32 kernel (dotF32AVX2) and of
// dotFloatSIMDOrder, for lengths that are multiples of 8 but not all of 64
// (groups of 8 into accumulator 0), at strides that are not the row length,
// and write only their outputs.
func TestF32TokenKernels(t *testing.T) {
	type kernel = func(x *byte, y *float32, ys, n int, out *float32, os int)
	for _, level := range []string{"avx2", "avx512"} {
		t.Run(level, func(t *testing.T) {
			requireSIMD(t, level)
			kernels := map[int]kernel{3: dotF32AVX2t3, 2: dotF32AVX2t2}
			if level == "avx512" {
				kernels = map[int]kernel{6: dotF32AVX512t6, 4: dotF32AVX512t4, 2: dotF32AVX512t2}
			}
			testF32TokenKernels(t, kernels)
		})
	}
}

func testF32TokenKernels(t *testing.T, kernels map[int]func(x *byte, y *float32, ys, n int, out *float32, os int)) {
	r := rand.New(rand.NewPCG(91, 92))
	const guard = -12345.5
	for _, n := range []int{8, 56, 64, 72, 120, 128, 168, 768, 2056} {
		for T := range kernels {
			name := fmt.Sprintf("%d/t%d", n, T)
			w := randRow(r, n, 0.5)
			row := make([]byte, F32.RowBytes(n))
			QuantizeRow(row, F32, w)
			const pad, os = 5, 3
			ys := n + pad
			y := randRow(r, T*ys, 2)
			out := make([]float32, T*os+1)
			for i := range out {
				out[i] = guard
			}
			kernels[T](&row[0], (*float32)(unsafe.Pointer(&y[0])), 4*ys, n, &out[0], 4*os)
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
				if one := dotF32AVX2(&row[0], &yt[0], n); math.Float32bits(v) != math.Float32bits(one) {
					t.Fatalf("%s: token %d = %v, one-token kernel %v", name, tk, v, one)
				}
			}
		}
	}
}

// TestMatMulF32TokensMatchOneToken: MatMul of F32 weights for every token count
// 1-40 and lengths with and without groups of 8 and single elements over (and
// fewer than 8), on every SIMD level, gives every token the bits of dotF32Row
// on that level (MatMul of that token alone) and writes nothing past its
// outputs.
func TestMatMulF32TokensMatchOneToken(t *testing.T) {
	defer SetThreads(SetThreads(1))
	const guard = -12345.5
	for _, level := range []string{"generic", "avx2", "avx512"} {
		t.Run(level, func(t *testing.T) {
			if level != "generic" {
				requireSIMD(t, level)
			}
			defer setSIMD(level)()
			r := rand.New(rand.NewPCG(93, 94))
			const rows = 19
			for _, cols := range []int{5, 8, 64, 72, 133, 172, 512} {
				w := Matrix{Type: F32, Rows: rows, Cols: cols, Data: make([]byte, rows*F32.RowBytes(cols))}
				for i := 0; i < rows; i++ {
					QuantizeRow(w.Row(i), F32, randRow(r, cols, 0.5))
				}
				x := randRow(r, 40*cols, 1)
				alone := make([]float32, 40*rows)
				for tk := 0; tk < 40; tk++ {
					MatMul(alone[tk*rows:(tk+1)*rows], w, x[tk*cols:(tk+1)*cols], 1)
					for i := 0; i < rows; i++ {
						one := dotF32Row(w.Row(i), x[tk*cols:(tk+1)*cols])
						if math.Float32bits(one) != math.Float32bits(alone[tk*rows+i]) {
							t.Fatalf("cols %d: token %d row %d alone %v, dotF32Row %v", cols, tk, i, alone[tk*rows+i], one)
						}
					}
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
								t.Fatalf("cols %d, %d tokens: dst[%d] = %v, written past the outputs", cols, n, k, v)
							}
							continue
						}
						if math.Float32bits(v) != math.Float32bits(alone[k]) {
							t.Fatalf("cols %d, %d tokens: token %d row %d: %v, alone %v", cols, n, k/rows, k%rows, v, alone[k])
						}
					}
				}
			}
		})
	}
}
