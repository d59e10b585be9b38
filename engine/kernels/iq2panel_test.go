package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// iq2PanelTypes are the types with byte panels (iq2panel.go).
var iq2PanelTypes = []Type{IQ2_XXS, IQ2_XS, IQ2_S}

// iq2AVX2PanelTypes are the types of the AVX2 byte panels
// (decodeIQ2PanelRowAVX2, iq2OuterAVX2r16t4): the IQ2 family and IQ3_XXS.
var iq2AVX2PanelTypes = []Type{IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS}

// TestIQ2OuterDecodeMatchesRowKernel: rows decoded into an IQ2 panel
// (decodeIQ2OuterRow) and tokens with their −43·bsums (iq2OuterActs),
// multiplied group by group (iq2OuterDotGeneric), give the reference's bits.
func TestIQ2OuterDecodeMatchesRowKernel(t *testing.T) {
	for _, typ := range iq2PanelTypes {
		r := rand.New(rand.NewPCG(47, 5))
		const nb, rows = 3, 5
		ref := panelRef(typ)
		for _, wm := range []string{"random", "ones", "zeros"} {
			for _, am := range []string{"random", "flat", "alternating"} {
				var a acts
				a.prepare(typ, panelTestActs(r, rows, nb*qkK, am), rows, nb*qkK)
				a.iq2OuterActs(nb, rows)
				w := make([]byte, nb*iqPanelGroup*iq2OuterRec)
				dx := make([]float32, nb*iqPanelGroup)
				for i := 0; i < iqPanelGroup; i += 5 {
					row := panelTestRow(r, typ, nb, wm)
					decodeIQ2OuterRow(typ, w, dx, row, nb, i)
					for tok := 0; tok < rows; tok++ {
						got := iq2OuterDotGeneric(w, dx, i, a.q8kO, a.ydT, a.yds, rows, tok, nb, panelFactor(typ))
						want := ref(row, a.q8k[tok*nb:(tok+1)*nb])
						if math.Float32bits(got) != math.Float32bits(want) {
							t.Fatalf("%v weights %s, acts %s, slot %d token %d: %v, want %v", typ, wm, am, i, tok, got, want)
						}
					}
				}
			}
		}
	}
}
