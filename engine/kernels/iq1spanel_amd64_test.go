//go:build !purego

package kernels

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestIQ1SByteDecoderAVX512: the AVX-512 IQ1_S byte-panel decoder writes
// decodeIQ1SBytePanel's values, lane starts, ±scales and scales, into its slot
// only, for random and extreme blocks.
func TestIQ1SByteDecoderAVX512(t *testing.T) {
	requireSIMD(t, "avx512")
	r := rand.New(rand.NewPCG(47, 3))
	for _, mode := range []string{"random", "ones", "zeros"} {
		const nb = 3
		for _, i := range []int{0, 1, 6, 7, iqPanelGroup - 1} {
			row := panelTestRow(r, IQ1_S, nb, mode)
			var want, got iq1sPanelBuf
			want.grow(1, nb)
			got.grow(1, nb)
			decodeIQ1SBytePanel(want.w, want.c, want.ls, want.dx, row, nb, i)
			decodeIQ1SBytePanelAVX512(got.w, got.c, got.ls, got.dx, row, nb, i)
			if !slices.Equal(got.w, want.w) || !slices.Equal(got.c, want.c) || !slices.Equal(got.ls, want.ls) || !slices.Equal(got.dx, want.dx) {
				t.Fatalf("%s slot %d: the AVX-512 decoder differs", mode, i)
			}
		}
	}
}

// BenchmarkIQ1SPrompt: IQ1_S prompt products of the 1b shape (random blocks,
// one thread): the FFN's down projection (2048 rows of 8192 columns) and a
// square 2048 × 2048 one, by 128 tokens, through the byte panels with AVX-512
// VNNI; cpu-us/op for a loaded machine.
func BenchmarkIQ1SPrompt(b *testing.B) {
	defer SetThreads(SetThreads(1))
	r := rand.New(rand.NewPCG(47, 2))
	for _, s := range []struct{ rows, cols, nTok int }{{2048, 8192, 128}, {2048, 2048, 128}} {
		w := Matrix{Type: IQ1_S, Rows: s.rows, Cols: s.cols, Data: randomBlocks(r, IQ1_S, s.rows*s.cols/qkK)}
		x := randRow(r, s.nTok*s.cols, 1)
		dst := make([]float32, s.nTok*s.rows)
		b.Run(fmt.Sprintf("%dx%dx%d", s.rows, s.cols, s.nTok), func(b *testing.B) {
			t0 := cpuSeconds()
			for b.Loop() {
				MatMul(dst, w, x, s.nTok)
			}
			b.ReportMetric((cpuSeconds()-t0)*1e6/float64(b.N), "cpu-us/op")
		})
	}
}
