package kernels

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestIQ2OuterDecoderFast: decodeIQ2OuterRowFast writes decodeIQ2OuterRow's
// bytes, scales and f16 scales, into its row slot only.
func TestIQ2OuterDecoderFast(t *testing.T) {
	r := rand.New(rand.NewPCG(48, 3))
	for _, typ := range iq2PanelTypes {
		for _, mode := range []string{"random", "ones", "zeros"} {
			const nb = 3
			for _, i := range []int{0, 7, iqPanelGroup - 1} {
				row := panelTestRow(r, typ, nb, mode)
				want, got := make([]byte, nb*iqPanelGroup*iq2OuterRec), make([]byte, nb*iqPanelGroup*iq2OuterRec)
				wdx, gdx := make([]float32, nb*iqPanelGroup), make([]float32, nb*iqPanelGroup)
				decodeIQ2OuterRow(typ, want, wdx, row, nb, i)
				decodeIQ2OuterRowFast(typ, got, gdx, row, nb, i)
				if !slices.Equal(got, want) || !slices.Equal(gdx, wdx) {
					t.Fatalf("%v %s slot %d: the fast decoder differs", typ, mode, i)
				}
			}
		}
	}
}
