//go:build !purego

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestDot0AVX2TileKernels: dotQ8_0AVX2r4t4, dotQ4_0AVX2r4t4 and
// dotQ5_0AVX2r4t4 give every (row, token) pair of their 4×4 tile the bits of the
// Go reference (dotQ8_0RowGeneric …) and of the one-token AVX2 kernel, for
// block counts 1 to 9 and 64, each row and each token different (mixed weight
// and activation kinds, extreme ones among them: every byte 0x00, 0x80, 0xff,
// activations ±127), at row and token strides that are not the row's, and
// write only their outputs.
func TestDot0AVX2TileKernels(t *testing.T) {
	requireSIMD(t, "avx2")
	type kernel = func(x *byte, xs int, y *byte, ys int, nb int, out *float32, os int)
	kernels := map[Type]map[int]kernel{
		Q8_0: {4: dotQ8_0AVX2r4t4},
		Q4_0: {4: dotQ4_0AVX2r4t4, 8: dotQ4_0AVX2r4t8},
		Q5_0: {4: dotQ5_0AVX2r4t4, 8: dotQ5_0AVX2r4t8},
	}
	ref := map[Type]func([]byte, []q8Block) float32{Q8_0: dotQ8_0RowGeneric, Q4_0: dotQ4_0RowGeneric, Q5_0: dotQ5_0RowGeneric}
	one := map[Type]func(x, y *byte, n int) float32{Q8_0: dotQ8_0AVX2, Q4_0: dotQ4_0AVX2, Q5_0: dotQ5_0AVX2}
	wms := []string{"quantized", "random", "0x00", "0x80", "0xff"}
	ams := []string{"quantized", "random", "max", "min"}
	r := rand.New(rand.NewPCG(103, 104))
	const guard = -12345.5
	for _, typ := range []Type{Q8_0, Q4_0, Q5_0} {
		for T, k := range kernels[typ] {
			for _, nb := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 64} {
				for rep := 0; rep < 12; rep++ {
					name := fmt.Sprintf("%v/t%d/nb %d/rep %d", typ, T, nb, rep)
					const rpad, pad, os = 7, 3, 6 // bytes between rows, blocks between tokens, output stride
					rb := nb*typ.BlockBytes() + rpad
					x := make([]byte, 4*rb)
					var kinds [4]string
					for i := 0; i < 4; i++ {
						kinds[i] = wms[(rep+i)%len(wms)]
						if rep >= 5 {
							kinds[i] = wms[r.IntN(len(wms))]
						}
						copy(x[i*rb:], weightRow(r, typ, nb, kinds[i], false))
					}
					ys := nb + pad
					y := make([]q8Block, T*ys)
					for tk := 0; tk < T; tk++ {
						copy(y[tk*ys:], q8Acts(r, typ, nb, ams[(rep+tk)%len(ams)], false))
					}
					out := make([]float32, T*os+1)
					for i := range out {
						out[i] = guard
					}
					k(&x[0], rb, (*byte)(unsafe.Pointer(&y[0])), ys*int(unsafe.Sizeof(y[0])), nb, &out[0], 4*os)
					for i, v := range out {
						tk, row := i/os, i%os
						if row >= 4 || tk >= T {
							if v != guard {
								t.Fatalf("%s: out[%d] = %v, written outside the outputs", name, i, v)
							}
							continue
						}
						xr, yt := x[row*rb:row*rb+nb*typ.BlockBytes()], y[tk*ys:tk*ys+nb]
						if want := ref[typ](xr, yt); math.Float32bits(v) != math.Float32bits(want) {
							t.Fatalf("%s: row %d (weights %s) token %d = %v, reference %v", name, row, kinds[row], tk, v, want)
						}
						if o := one[typ](&xr[0], (*byte)(unsafe.Pointer(&yt[0])), nb); math.Float32bits(v) != math.Float32bits(o) {
							t.Fatalf("%s: row %d token %d = %v, one-token kernel %v", name, row, tk, v, o)
						}
					}
				}
			}
		}
	}
}

// TestMatMulDot0TilesMatchReference: at the AVX2 level MatMul of Q8_0, Q4_0 and
// Q5_0 weights takes rows 4 at a time through the 4×4 tiles for every token
// count from 4 (the 16-token chunks and any last 1-3 tokens again), the rows
// left over and prompts of 2-3 tokens through dot0Rows; for row counts that
// leave 0-3 rows over and token counts 1-37, every output has the Go
// reference's bits and nothing past the outputs is written.
func TestMatMulDot0TilesMatchReference(t *testing.T) {
	requireSIMD(t, "avx2")
	defer SetThreads(SetThreads(1))
	const guard = -12345.5
	r := rand.New(rand.NewPCG(105, 106))
	for _, typ := range []Type{Q8_0, Q4_0, Q5_0} {
		for _, rows := range []int{4, 5, 6, 7, 8, 21} {
			const cols = 160
			w := Matrix{Type: typ, Rows: rows, Cols: cols, Data: make([]byte, rows*typ.RowBytes(cols))}
			for i := 0; i < rows; i++ {
				QuantizeRow(w.Row(i), typ, randRow(r, cols, 0.5))
			}
			for _, n := range []int{1, 2, 3, 4, 5, 6, 7, 8, 15, 16, 17, 19, 31, 37} {
				x := randRow(r, n*cols, 1)
				want := make([]float32, n*rows)
				restore := setSIMD("generic")
				MatMul(want, w, x, n)
				restore()
				restore = setSIMD("avx2")
				dst := make([]float32, n*rows+3)
				for i := range dst {
					dst[i] = guard
				}
				MatMul(dst, w, x, n)
				restore()
				for k, v := range dst {
					if k >= n*rows {
						if v != guard {
							t.Fatalf("%v %d rows, %d tokens: dst[%d] = %v, written past the outputs", typ, rows, n, k, v)
						}
						continue
					}
					if math.Float32bits(v) != math.Float32bits(want[k]) {
						t.Fatalf("%v %d rows, %d tokens: token %d row %d: %v, reference %v", typ, rows, n, k/rows, k%rows, v, want[k])
					}
				}
			}
		}
	}
}

// BenchmarkDot0AVX2Tiles: a 4×4 tile of 2048-column Q8_0, Q4_0 rows and
// tokens through dot<T>AVX2r4t4 ("r4t4") against the 4-token one-row kernel
// four times ("t4"); run it with -benchtime=Nx under /usr/bin/time for CPU time
// on a loaded machine.
func BenchmarkDot0AVX2Tiles(b *testing.B) {
	if !useAVX2 {
		b.Skip("no AVX2")
	}
	const nb = 64
	r := rand.New(rand.NewPCG(1, 2))
	for _, typ := range []Type{Q8_0, Q4_0} {
		rb := nb * typ.BlockBytes()
		x := make([]byte, 4*rb)
		for i := 0; i < 4; i++ {
			copy(x[i*rb:], weightRow(r, typ, nb, "quantized", false))
		}
		y := make([]q8Block, 4*nb)
		for tk := 0; tk < 4; tk++ {
			copy(y[tk*nb:], q8Acts(r, typ, nb, "quantized", false))
		}
		ys := nb * int(unsafe.Sizeof(y[0]))
		var out [16]float32
		b.Run(typ.String()+"/r4t4", func(b *testing.B) {
			k := map[Type]func(x *byte, xs int, y *byte, ys int, nb int, out *float32, os int){Q8_0: dotQ8_0AVX2r4t4, Q4_0: dotQ4_0AVX2r4t4}[typ]
			for i := 0; i < b.N; i++ {
				k(&x[0], rb, (*byte)(unsafe.Pointer(&y[0])), ys, nb, &out[0], 16)
			}
		})
		y8 := make([]q8Block, 8*nb)
		for tk := 0; tk < 8; tk++ {
			copy(y8[tk*nb:], q8Acts(r, typ, nb, "quantized", false))
		}
		var out8 [32]float32
		b.Run(typ.String()+"/r4t8-half", func(b *testing.B) {
			k := map[Type]func(x *byte, xs int, y *byte, ys int, nb int, out *float32, os int){Q4_0: dotQ4_0AVX2r4t8}[typ]
			if k == nil {
				b.Skip("no 8-token tile")
			}
			for i := 0; i < b.N; i += 2 {
				k(&x[0], rb, (*byte)(unsafe.Pointer(&y8[0])), ys, nb, &out8[0], 16)
			}
		})
		b.Run(typ.String()+"/t4", func(b *testing.B) {
			k := map[Type]func(x, y *byte, ys, nb int, out *float32, os int){Q8_0: dotQ8_0AVX2t4, Q4_0: dotQ4_0AVX2t4}[typ]
			for i := 0; i < b.N; i++ {
				for row := 0; row < 4; row++ {
					k(&x[row*rb], (*byte)(unsafe.Pointer(&y[0])), ys, nb, &out[row], 16)
				}
			}
		})
	}
}
