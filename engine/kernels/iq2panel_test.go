package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// iq2PanelTypes are the types with byte panels.
var iq2PanelTypes = []Type{IQ2_XXS, IQ2_XS, IQ2_S}

// TestIQ2PanelPosIsPermutation: the byte panels' order puts the 256 values of
// a block on 256 distinct bytes, 16 of each group of 16 values in dword j of
// the four chunks.
func TestIQ2PanelPosIsPermutation(t *testing.T) {
	var seen [qkK]bool
	for q := 0; q < qkK; q++ {
		p := iq2PanelPos(q)
		if seen[p] {
			t.Fatalf("value %d: byte %d taken twice", q, p)
		}
		seen[p] = true
		if p%64/4 != q/16 {
			t.Fatalf("value %d at byte %d: dword %d, not its group %d", q, p, p%64/4, q/16)
		}
	}
}

// TestIQ2PanelDecodeMatchesRowKernel: a row decoded into a byte panel
// (decodeIQ2PanelRow) and tokens stored in its order (iq2Acts), multiplied
// group by group (iq2PanelDotGeneric), give the reference's bits: the
// decoders, the corrections, the layout and the float steps the byte-panel
// kernel relies on.
func TestIQ2PanelDecodeMatchesRowKernel(t *testing.T) {
	for _, typ := range iq2PanelTypes {
		r := rand.New(rand.NewPCG(47, 1))
		const nb, rows = 3, 5
		ref := panelRef(typ)
		for _, wm := range []string{"random", "ones", "zeros"} {
			for _, am := range []string{"random", "flat", "alternating"} {
				var a acts
				a.prepare(typ, panelTestActs(r, rows, nb*qkK, am), rows, nb*qkK)
				a.iq2Acts(nb, rows)
				w := make([]byte, nb*iqPanelGroup*iq2PanelBlock)
				dx := make([]float32, nb*iqPanelGroup)
				corr := make([]int32, nb*iqPanelGroup)
				for i := 0; i < iqPanelGroup; i += 5 {
					row := panelTestRow(r, typ, nb, wm)
					decodeIQ2PanelRow(typ, w, dx, corr, row, nb, i)
					for tok := 0; tok < rows; tok++ {
						got := iq2PanelDotGeneric(w, dx, corr, i, a.q8kU, a.ydT, a.yds, rows, tok, nb, panelFactor(typ))
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

// TestIQ2OuterDecodeMatchesRowKernel: rows decoded into an outer-product
// panel (decodeIQ2OuterRow) and tokens with their −43·bsums (iq2OuterActs),
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
