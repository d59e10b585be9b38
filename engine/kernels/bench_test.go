package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func BenchmarkQuantizeRow(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	x := randRow(r, 4096, 1)
	for _, typ := range []Type{Q4_K, Q6_K, Q8_0, Q4_0} {
		dst := make([]byte, typ.RowBytes(len(x)))
		b.Run(typ.String(), func(b *testing.B) {
			b.SetBytes(int64(4 * len(x)))
			for b.Loop() {
				QuantizeRow(dst, typ, x)
			}
		})
	}
}

func BenchmarkMatMul(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	const rows, cols = 512, 1024
	for _, typ := range weightTypes {
		w := Matrix{Type: typ, Rows: rows, Cols: cols, Data: make([]byte, rows*typ.RowBytes(cols))}
		for i := 0; i < rows; i++ {
			fillRow(r, typ, w.Row(i), 0.1)
		}
		x := randRow(r, cols, 1)
		dst := make([]float32, rows)
		b.Run(typ.String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				MatMul(dst, w, x, 1)
			}
		})
	}
}

// BenchmarkMatMulDecodeLarge: one token against a matrix larger than the caches
// (about 38 MiB for Q4_K), on 1 and 2 threads: the rate at which decoding streams
// weights from memory (compare BenchmarkTileKernels, in cache, and
// `lmlite bench --membw --threads 1`).
func BenchmarkMatMulDecodeLarge(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	const rows, cols, distinct = 16384, 4096, 64
	for _, typ := range []Type{Q4_K, Q6_K, Q2_K} {
		w := Matrix{Type: typ, Rows: rows, Cols: cols, Data: make([]byte, rows*typ.RowBytes(cols))}
		for i := 0; i < distinct; i++ {
			fillRow(r, typ, w.Row(i), 0.1)
		}
		for i := distinct; i < rows; i++ {
			copy(w.Row(i), w.Row(i%distinct))
		}
		x := randRow(r, cols, 1)
		dst := make([]float32, rows)
		for _, th := range []int{1, 2} {
			b.Run(fmt.Sprintf("%v threads %d", typ, th), func(b *testing.B) {
				defer SetThreads(SetThreads(th))
				b.SetBytes(int64(len(w.Data)))
				for b.Loop() {
					MatMul(dst, w, x, 1)
				}
			})
		}
	}
}
