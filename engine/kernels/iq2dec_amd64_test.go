//go:build !purego

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// decTypes are the types with a many-row AVX-512 decoding kernel.
var decTypes = []Type{IQ2_XXS, IQ2_XS, IQ2_S, IQ1_M}

// TestLatticeDecRowsMatchReference: each many-row decoding kernel gives every
// row the block reference's bits (dotKRowGeneric) for row counts 1 to 9 and
// block counts 1 to 9, over random and extreme blocks and activations, and
// writes no output past its rows.
func TestLatticeDecRowsMatchReference(t *testing.T) {
	requireSIMD(t, "avx512vbmi")
	r := rand.New(rand.NewPCG(47, 4))
	for _, typ := range decTypes {
		k := latticeDecKernel(typ)
		if k == nil {
			t.Fatalf("%v: no decoding kernel", typ)
		}
		bb := typ.BlockBytes()
		for _, nb := range []int{1, 2, 8, 9} {
			for _, wm := range []string{"random", "0x00", "0xff", "0x5a"} {
				for _, am := range []string{"quantized", "max", "min", "random"} {
					const rows = 9
					data := make([]byte, 0, rows*nb*bb)
					for i := 0; i < rows; i++ {
						data = append(data, kRow(r, typ, nb, wm, false, 0)...)
					}
					y := q8KActs(r, nb, am, false)
					noMinus128(y)
					for n := 1; n <= rows; n++ {
						const guard = -12345.5
						buf := make([]float32, n+2)
						for i := range buf {
							buf[i] = guard
						}
						k(&data[0], nb*bb, (*byte)(unsafe.Pointer(&y[0])), nb, n, &buf[1], latticeGrid(typ))
						if buf[0] != guard || buf[n+1] != guard {
							t.Fatalf("%v nb %d rows %d: guard overwritten: %v", typ, nb, n, buf)
						}
						for i := 0; i < n; i++ {
							row := data[i*nb*bb : (i+1)*nb*bb]
							want := dotKRowGeneric(refCodecOf(typ).dotK, bb, row, y)
							if got := buf[1+i]; math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
								t.Fatalf("%v nb %d weights %s acts %s: row %d of %d = %v, reference %v", typ, nb, wm, am, i, n, got, want)
							}
						}
					}
				}
			}
		}
	}
}

// BenchmarkLatticeDecode: one token against 256 rows of 2048 columns (the 1b
// model's hidden size; random blocks, in cache) through the AVX2 row kernel one
// row a call ("avx2") and the AVX-512 decoding kernel all rows in one call
// ("avx512r"). Compare by CPU time (-cpu 1).
func BenchmarkLatticeDecode(b *testing.B) {
	if !useVNNI16 || !hasBITALG {
		b.Skip("no AVX-512 VBMI and BITALG")
	}
	r := rand.New(rand.NewPCG(1, 2))
	const rows, cols = 256, 2048
	for _, typ := range decTypes {
		nb := cols / qkK
		rb := typ.RowBytes(cols)
		data := make([]byte, rows*rb)
		for i := 0; i < rows; i++ {
			fillRow(r, typ, data[i*rb:(i+1)*rb], 1)
		}
		y := q8KActs(r, nb, "quantized", false)
		out := make([]float32, rows)
		b.Run(fmt.Sprintf("%v/avx2", typ), func(b *testing.B) {
			restore := setSIMD("avx2")
			defer restore()
			t0 := cpuSeconds()
			for b.Loop() {
				for i := range out {
					out[i] = dotKRowAVX2(typ, data[i*rb:(i+1)*rb], y)
				}
			}
			b.ReportMetric((cpuSeconds()-t0)*1e6/float64(b.N), "cpu-us/op")
		})
		b.Run(fmt.Sprintf("%v/avx512r", typ), func(b *testing.B) {
			k := latticeDecKernel(typ)
			t0 := cpuSeconds()
			for b.Loop() {
				k(&data[0], rb, (*byte)(unsafe.Pointer(&y[0])), nb, rows, &out[0], latticeGrid(typ))
			}
			b.ReportMetric((cpuSeconds()-t0)*1e6/float64(b.N), "cpu-us/op")
		})
	}
}

// dotKRowAVX2 is typ's row dot at the level set (AVX2 in BenchmarkLatticeDecode).
func dotKRowAVX2(typ Type, row []byte, y []q8KBlock) float32 {
	switch typ {
	case IQ2_XXS:
		return dotIQ2XXSRow(row, y)
	case IQ2_XS:
		return dotIQ2XSRow(row, y)
	case IQ2_S:
		return dotIQ2SRow(row, y)
	case IQ1_M:
		return dotIQ1MRow(row, y)
	}
	panic(typ.String())
}

// BenchmarkLatticeDecodeMatMul: MatMul of one token through 1024 rows of 2048
// columns of each decoding type (random blocks, about 0.6 MiB for IQ2_S) on one
// thread, as CPU time per call: the path a decoding step takes.
func BenchmarkLatticeDecodeMatMul(b *testing.B) {
	defer SetThreads(SetThreads(1))
	r := rand.New(rand.NewPCG(3, 4))
	const rows, cols = 1024, 2048
	for _, typ := range []Type{IQ2_XS, IQ2_S, IQ1_M, IQ2_XXS} {
		w := Matrix{Type: typ, Rows: rows, Cols: cols, Data: make([]byte, rows*typ.RowBytes(cols))}
		for i := 0; i < rows; i++ {
			fillRow(r, typ, w.Row(i), 1)
		}
		x := randRow(r, cols, 1)
		dst := make([]float32, rows)
		b.Run(typ.String(), func(b *testing.B) {
			t0 := cpuSeconds()
			for b.Loop() {
				MatMul(dst, w, x, 1)
			}
			b.ReportMetric((cpuSeconds()-t0)*1e6/float64(b.N), "cpu-us/op")
		})
	}
}

// BenchmarkLatticeDecodeLarge: MatMul of one token through 16384 rows of 8192
// columns (43 MiB of IQ2_S, larger than the caches; 64 distinct random rows
// repeated) on one thread, as CPU time per call: decoding's streaming of the
// weights from memory.
func BenchmarkLatticeDecodeLarge(b *testing.B) {
	defer SetThreads(SetThreads(1))
	r := rand.New(rand.NewPCG(5, 6))
	const rows, cols, distinct = 16384, 8192, 64
	for _, typ := range []Type{IQ2_XS, IQ2_S, IQ1_M} {
		w := Matrix{Type: typ, Rows: rows, Cols: cols, Data: make([]byte, rows*typ.RowBytes(cols))}
		for i := 0; i < distinct; i++ {
			fillRow(r, typ, w.Row(i), 1)
		}
		for i := distinct; i < rows; i++ {
			copy(w.Row(i), w.Row(i%distinct))
		}
		x := randRow(r, cols, 1)
		dst := make([]float32, rows)
		b.Run(typ.String(), func(b *testing.B) {
			b.SetBytes(int64(len(w.Data)))
			t0 := cpuSeconds()
			for b.Loop() {
				MatMul(dst, w, x, 1)
			}
			b.ReportMetric((cpuSeconds()-t0)*1e6/float64(b.N), "cpu-us/op")
		})
	}
}
