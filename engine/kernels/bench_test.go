package kernels

import (
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
