//go:build !purego

package kernels

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestPanelDecoderAVX512: the AVX-512 panel decoders write decodePanelRow's
// values and scales, into their slot only.
func TestPanelDecoderAVX512(t *testing.T) {
	requireSIMD(t, "avx512")
	r := rand.New(rand.NewPCG(45, 3))
	for _, typ := range panelTypes {
		for _, mode := range []string{"random", "ones", "zeros"} {
			const nb = 3
			for _, i := range []int{0, 7, iqPanelGroup - 1} {
				row := panelTestRow(r, typ, nb, mode)
				want, got := make([]int16, nb*iqPanelGroup*qkK), make([]int16, nb*iqPanelGroup*qkK)
				wdx, gdx := make([]float32, nb*iqPanelGroup), make([]float32, nb*iqPanelGroup)
				decodePanelRow(typ, want, wdx, row, nb, i)
				decodePanelRowAVX512(typ, got, gdx, row, nb, i)
				if !slices.Equal(got, want) || !slices.Equal(gdx, wdx) {
					t.Fatalf("%v %s slot %d: the AVX-512 decoder differs", typ, mode, i)
				}
			}
		}
	}
}

// BenchmarkPanel1b: a 1b-shaped prompt product through the panels (2048 rows
// of 8192 columns, the FFN's down projection, by 512 tokens), one thread.
func BenchmarkPanel1b(b *testing.B) {
	defer SetThreads(SetThreads(1))
	r := rand.New(rand.NewPCG(45, 4))
	const rows, cols, nTok = 2048, 8192, 512
	w := Matrix{Type: IQ3_S, Rows: rows, Cols: cols, Data: randomBlocks(r, IQ3_S, rows*cols/qkK)}
	x := randRow(r, nTok*cols, 1)
	dst := make([]float32, nTok*rows)
	for b.Loop() {
		MatMul(dst, w, x, nTok)
	}
}

// BenchmarkPanelTokens: IQ3_S products of few tokens (1024 × 1024, one
// thread) through the panels and through the eight-token row kernels
// (iqPanelMinTokens raised), for the panels' threshold.
func BenchmarkPanelTokens(b *testing.B) {
	defer SetThreads(SetThreads(1))
	r := rand.New(rand.NewPCG(45, 5))
	const rows, cols = 1024, 1024
	w := Matrix{Type: IQ3_S, Rows: rows, Cols: cols, Data: randomBlocks(r, IQ3_S, rows*cols/qkK)}
	for _, nTok := range []int{4, 6, 8, 12, 16, 32} {
		x := randRow(r, nTok*cols, 1)
		dst := make([]float32, nTok*rows)
		for _, path := range []string{"panel", "rows"} {
			b.Run(fmt.Sprintf("%d/%s", nTok, path), func(b *testing.B) {
				defer func(m int) { iqPanelMinTokens = m }(iqPanelMinTokens)
				iqPanelMinTokens = 4
				if path == "rows" {
					iqPanelMinTokens = 1 << 30
				}
				t0 := cpuSeconds()
				for b.Loop() {
					MatMul(dst, w, x, nTok)
				}
				b.ReportMetric((cpuSeconds()-t0)*1e6/float64(b.N), "cpu-us/op")
			})
		}
	}
}
