//go:build !purego

package kernels

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestIQ1MByteDecoderAVX512: the AVX-512 IQ1_M byte-panel decoder writes
// decodeIQ1MBytePanel's values, lane starts, ±scales and scales, into its slot
// only, for random and extreme blocks.
func TestIQ1MByteDecoderAVX512(t *testing.T) {
	requireSIMD(t, "avx512")
	r := rand.New(rand.NewPCG(49, 3))
	for _, mode := range []string{"random", "ones", "zeros"} {
		const nb = 3
		for _, i := range []int{0, 1, 6, 7, iqPanelGroup - 1} {
			row := panelTestRow(r, IQ1_M, nb, mode)
			var want, got iq1mPanelBuf
			want.grow(1, nb)
			got.grow(1, nb)
			decodeIQ1MBytePanel(want.w, want.c, want.dl, want.dx, row, nb, i)
			decodeIQ1MBytePanelAVX512(got.w, got.c, got.dl, got.dx, row, nb, i)
			if !slices.Equal(got.w, want.w) || !slices.Equal(got.c, want.c) || !slices.Equal(got.dl, want.dl) || !slices.Equal(got.dx, want.dx) {
				t.Fatalf("%s slot %d: the AVX-512 decoder differs", mode, i)
			}
		}
	}
}

// BenchmarkIQ1MPrompt: IQ1_M prompt products of the 1b shape (random blocks,
// one thread): the FFN's down projection (2048 rows of 8192 columns) and a
// square 2048 × 2048 one, by 128 tokens, through the byte panels ("bytes") and
// the int16 panels ("int16") with AVX-512 VNNI; cpu-us/op for a loaded machine.
func BenchmarkIQ1MPrompt(b *testing.B) {
	defer SetThreads(SetThreads(1))
	r := rand.New(rand.NewPCG(49, 2))
	for _, s := range []struct{ rows, cols, nTok int }{{2048, 8192, 128}, {2048, 2048, 128}} {
		w := Matrix{Type: IQ1_M, Rows: s.rows, Cols: s.cols, Data: randomBlocks(r, IQ1_M, s.rows*s.cols/qkK)}
		x := randRow(r, s.nTok*s.cols, 1)
		dst := make([]float32, s.nTok*s.rows)
		for _, path := range []string{"bytes", "int16"} {
			b.Run(fmt.Sprintf("%dx%dx%d/%s", s.rows, s.cols, s.nTok, path), func(b *testing.B) {
				defer func(v bool) { iq1mBytePanels = v }(iq1mBytePanels)
				iq1mBytePanels = path == "bytes"
				t0 := cpuSeconds()
				for b.Loop() {
					MatMul(dst, w, x, s.nTok)
				}
				b.ReportMetric((cpuSeconds()-t0)*1e6/float64(b.N), "cpu-us/op")
			})
		}
	}
}
