//go:build !purego

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestDot0AVX2TokenKernels: dotQ8_0AVX2t4/t2, dotQ4_0AVX2t4/t2 and
// dotQ5_0AVX2t4/t2 give every token the bits of the one-token AVX2 kernel and
// of the Go reference (dotQ8_0RowGeneric …), for block counts with and without
// a remainder of four, extreme weights (every byte 0x00, 0x80, 0xff: Q8_0's
// −128, Q5_0's fifth bits all set) and activations (±127), at a token stride
// that is not the row's, and write only their outputs.
func TestDot0AVX2TokenKernels(t *testing.T) {
	requireSIMD(t, "avx2")
	type kernel = func(x, y *byte, ys, nb int, out *float32, os int)
	kernels := map[Type]map[int]kernel{
		Q8_0: {4: dotQ8_0AVX2t4, 2: dotQ8_0AVX2t2},
		Q4_0: {4: dotQ4_0AVX2t4, 2: dotQ4_0AVX2t2},
		Q5_0: {4: dotQ5_0AVX2t4, 2: dotQ5_0AVX2t2},
	}
	ref := map[Type]func([]byte, []q8Block) float32{Q8_0: dotQ8_0RowGeneric, Q4_0: dotQ4_0RowGeneric, Q5_0: dotQ5_0RowGeneric}
	one := map[Type]func(x, y *byte, n int) float32{Q8_0: dotQ8_0AVX2, Q4_0: dotQ4_0AVX2, Q5_0: dotQ5_0AVX2}
	r := rand.New(rand.NewPCG(99, 100))
	const guard = -12345.5
	for _, typ := range []Type{Q8_0, Q4_0, Q5_0} {
		for T, k := range kernels[typ] {
			for _, nb := range []int{1, 2, 3, 4, 5, 7, 8, 9, 64} {
				for _, wm := range []string{"quantized", "random", "0x00", "0x80", "0xff"} {
					for _, am := range []string{"quantized", "random", "max", "min"} {
						name := fmt.Sprintf("%v/t%d/nb %d/weights %s/acts %s", typ, T, nb, wm, am)
						row := weightRow(r, typ, nb, wm, false)
						const pad, os = 3, 5 // blocks between tokens; output stride
						ys := nb + pad
						y := make([]q8Block, T*ys)
						for tk := 0; tk < T; tk++ {
							copy(y[tk*ys:], q8Acts(r, typ, nb, am, false))
						}
						out := make([]float32, T*os+1)
						for i := range out {
							out[i] = guard
						}
						yb := (*byte)(unsafe.Pointer(&y[0]))
						k(&row[0], yb, ys*int(unsafe.Sizeof(y[0])), nb, &out[0], 4*os)
						for i, v := range out {
							tk := i / os
							if i%os != 0 || tk >= T {
								if v != guard {
									t.Fatalf("%s: out[%d] = %v, written outside the outputs", name, i, v)
								}
								continue
							}
							yt := y[tk*ys : tk*ys+nb]
							if want := ref[typ](row, yt); math.Float32bits(v) != math.Float32bits(want) {
								t.Fatalf("%s: token %d = %v, reference %v", name, tk, v, want)
							}
							if o := one[typ](&row[0], (*byte)(unsafe.Pointer(&yt[0])), nb); math.Float32bits(v) != math.Float32bits(o) {
								t.Fatalf("%s: token %d = %v, one-token kernel %v", name, tk, v, o)
							}
						}
					}
				}
			}
		}
	}
}

// TestMatMulDot0TokensMatchReference: MatMul of Q8_0, Q4_0 and Q5_0 weights
// for every token count 1-40, with block counts with and without a remainder
// of four, on each SIMD level, gives every output the generic level's bits
// (the Go reference) and writes nothing past its outputs. On AVX2 the prompts
// go through dot0Rows' multi-token kernels.
func TestMatMulDot0TokensMatchReference(t *testing.T) {
	defer SetThreads(SetThreads(1))
	const guard = -12345.5
	for _, level := range []string{"avx2", "avx512"} {
		t.Run(level, func(t *testing.T) {
			requireSIMD(t, level)
			r := rand.New(rand.NewPCG(101, 102))
			const rows = 19
			for _, typ := range []Type{Q8_0, Q4_0, Q5_0} {
				for _, cols := range []int{32, 96, 160, 512} {
					w := Matrix{Type: typ, Rows: rows, Cols: cols, Data: make([]byte, rows*typ.RowBytes(cols))}
					for i := 0; i < rows; i++ {
						QuantizeRow(w.Row(i), typ, randRow(r, cols, 0.5))
					}
					x := randRow(r, 40*cols, 1)
					want := make([][]float32, 41)
					restore := setSIMD("generic")
					for n := 1; n <= 40; n++ {
						want[n] = make([]float32, n*rows)
						MatMul(want[n], w, x, n)
					}
					restore()
					restore = setSIMD(level)
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
							if math.Float32bits(v) != math.Float32bits(want[n][k]) {
								t.Fatalf("%v cols %d, %d tokens: token %d row %d: %v, reference %v", typ, cols, n, k/rows, k%rows, v, want[n][k])
							}
						}
					}
					restore()
				}
			}
		})
	}
}
