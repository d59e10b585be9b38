package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestIQ3SBytePanelMatchesRowKernel: IQ3_S rows decoded into byte panels
// (decodeIQ3SBytePanel) and tokens as bytes in their order (panelQ8K),
// multiplied lane by lane as the kernel does (iq3sBPDotGeneric: VPDPBUSD,
// VPACKSSDW, VPDPWSSD and the corr), give dotIQ3SRowGeneric's bits, at the
// largest scales and quants too: the decoder, the layout and the bias.
func TestIQ3SBytePanelMatchesRowKernel(t *testing.T) {
	r := rand.New(rand.NewPCG(47, 1))
	const nb, rows = 3, 5
	for _, wm := range []string{"random", "ones", "zeros"} {
		for _, am := range []string{"random", "flat", "alternating"} {
			var a acts
			a.prepare(IQ3_S, panelTestActs(r, rows, nb*qkK, am), rows, nb*qkK)
			a.panelQ8K(IQ3_S, nb, rows)
			w := make([]byte, nb*iqPanelGroup*iq3sBPSlot)
			dx := make([]float32, nb*iqPanelGroup)
			for i := 0; i < iqPanelGroup; i += 5 {
				row := panelTestRow(r, IQ3_S, nb, wm)
				decodeIQ3SBytePanel(w, dx, row, nb, i)
				for tok := 0; tok < rows; tok++ {
					got := iq3sBPDotGeneric(w, dx, i, a.q8kB, a.ydT, a.yds, rows, tok, nb)
					want := dotIQ3SRowGeneric(row, a.q8k[tok*nb:(tok+1)*nb])
					if math.Float32bits(got) != math.Float32bits(want) {
						t.Fatalf("weights %s, acts %s, slot %d token %d: %v, want %v", wm, am, i, tok, got, want)
					}
				}
			}
		}
	}
}

// TestIQ3SInt16PanelMatMul: with the byte panels off, IQ3_S's prompts take
// the int16 panels again, still with the reference's bits (TestPanelMatMul
// checks the byte panels).
func TestIQ3SInt16PanelMatMul(t *testing.T) {
	defer func(v bool) { iq3sBytePanels = v }(iq3sBytePanels)
	iq3sBytePanels = false
	testPanelMatMul(t, IQ3_S)
}
