//go:build !purego && unix

package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkMatMulF32Levels: BenchmarkMatMulCPU's F32 products of 9 tokens (a
// verification step of 1 + 8 positions) and 128 on each SIMD level the CPU
// has (the AVX2 kernels also where it has AVX-512), as CPU time per call.
func BenchmarkMatMulF32Levels(b *testing.B) {
	defer SetThreads(SetThreads(1))
	r := rand.New(rand.NewPCG(21, 22))
	const rows, cols = 1024, 1024
	w := Matrix{Type: F32, Rows: rows, Cols: cols, Data: make([]byte, rows*F32.RowBytes(cols))}
	for i := 0; i < rows; i++ {
		fillRow(r, F32, w.Row(i), 0.1)
	}
	for _, level := range []string{"avx2", "avx512"} {
		if l, ok := findSIMDLevel(level); !ok || !l.on() {
			continue
		}
		for _, nTok := range []int{9, 128} {
			x := randRow(r, nTok*cols, 1)
			dst := make([]float32, nTok*rows)
			b.Run(fmt.Sprintf("%s/tokens%d", level, nTok), func(b *testing.B) {
				defer setSIMD(level)()
				t0 := cpuSeconds()
				for b.Loop() {
					MatMul(dst, w, x, nTok)
				}
				b.ReportMetric((cpuSeconds()-t0)*1e6/float64(b.N), "cpu-us/op")
			})
		}
	}
}
