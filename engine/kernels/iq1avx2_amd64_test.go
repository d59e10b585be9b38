//go:build !purego

package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkIQ1AVX2: IQ1_S and IQ1_M products on the 1b model's shapes (random
// blocks), one thread, as CPU time per call: one token through 2048 rows of
// 2048 columns (decoding) and 64 tokens through 2048 rows of 2048 columns
// (a prompt's chunk). Run it on the level under test (-cpu 1).
func BenchmarkIQ1AVX2(b *testing.B) {
	defer SetThreads(SetThreads(1))
	r := rand.New(rand.NewPCG(48, 2))
	const rows, cols = 2048, 2048
	for _, typ := range []Type{IQ1_S, IQ1_M} {
		w := Matrix{Type: typ, Rows: rows, Cols: cols, Data: randomBlocks(r, typ, rows*cols/qkK)}
		for _, nTok := range []int{1, 4, 8, 64} {
			x := randRow(r, nTok*cols, 1)
			dst := make([]float32, nTok*rows)
			b.Run(fmt.Sprintf("%v/%d", typ, nTok), func(b *testing.B) {
				t0 := cpuSeconds()
				for b.Loop() {
					MatMul(dst, w, x, nTok)
				}
				b.ReportMetric((cpuSeconds()-t0)*1e6/float64(b.N), "cpu-us/op")
			})
		}
	}
}
