//go:build !purego

package kernels

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestTQ2PanelDecoderAVX512: decodeTQ2_0BytesAVX512 writes decodeTQ2Panel's
// bytes and scales, into its slot only.
func TestTQ2PanelDecoderAVX512(t *testing.T) {
	requireSIMD(t, "avx512")
	r := rand.New(rand.NewPCG(46, 1))
	for _, mode := range []string{"random", "ones", "zeros"} {
		const nb = 3
		for _, i := range []int{0, 7, iqPanelGroup - 1} {
			row := panelTestRow(r, TQ2_0, nb, mode)
			want, got := make([]byte, nb*iqPanelGroup*qkK), make([]byte, nb*iqPanelGroup*qkK)
			wdx, gdx := make([]float32, nb*iqPanelGroup), make([]float32, nb*iqPanelGroup)
			decodeTQ2Panel(want, wdx, row, nb, i)
			decodeTQ2_0BytesAVX512(&row[0], nb, &got[i*qkK], &gdx[i])
			if !slices.Equal(got, want) || !slices.Equal(gdx, wdx) {
				t.Fatalf("%s slot %d: the AVX-512 decoder differs", mode, i)
			}
		}
	}
}
