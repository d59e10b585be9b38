package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestIQ1MBytePanelMatchesRowKernel: a row decoded into IQ1_M's byte panel
// (decodeIQ1MBytePanel: values 8·ls·grid, lane corrections, ±scales of the
// groups of 8) and multiplied as iq1mPanelAVX512r4t4 does
// (iq1mPanelDotGeneric: unsigned quants, the corrections subtracted, the
// shifts from the sums of 8 quants) gives the reference row's bits, in every
// slot, for random and extreme blocks and activations (quants of −128
// included).
func TestIQ1MBytePanelMatchesRowKernel(t *testing.T) {
	r := rand.New(rand.NewPCG(49, 1))
	const nb, rows = 3, 5
	ref := panelRef(IQ1_M)
	for _, wm := range []string{"random", "ones", "zeros"} {
		for _, am := range []string{"random", "flat", "alternating", "min"} {
			x := panelTestActs(r, rows, nb*qkK, am)
			if am == "min" {
				for i := range x {
					x[i] = -1 + float32(i%3)*0.25 // quants −128 where x = −1
				}
			}
			var a acts
			a.prepare(IQ1_M, x, rows, nb*qkK)
			var p iq1mPanelBuf
			p.grow(1, nb)
			for i := 0; i < iqPanelGroup; i += 5 {
				row := panelTestRow(r, IQ1_M, nb, wm)
				decodeIQ1MBytePanel(p.w, p.c, p.dl, p.dx, row, nb, i)
				for tok := 0; tok < rows; tok++ {
					y := a.q8k[tok*nb : (tok+1)*nb]
					got, want := iq1mPanelDotGeneric(&p, i, y), ref(row, y)
					if math.Float32bits(got) != math.Float32bits(want) {
						t.Fatalf("weights %s, acts %s, slot %d token %d: %v, want %v", wm, am, i, tok, got, want)
					}
				}
			}
		}
	}
}

// TestUnsignSums8Q8K: the one-pass layout of IQ1_M's byte panels' activations
// writes unsignQ8K's bytes and sums8Q8K's sums, for random blocks and the
// extremes (every quant −128, every quant 127).
func TestUnsignSums8Q8K(t *testing.T) {
	r := rand.New(rand.NewPCG(49, 4))
	for k := 0; k < 50; k++ {
		var qs [qkK]int8
		for i := range qs {
			switch k {
			case 0:
				qs[i] = -128
			case 1:
				qs[i] = 127
			default:
				qs[i] = int8(r.Uint32())
			}
		}
		var wu, gu [qkK]uint8
		var ws, gs [32]int16
		unsignQ8K(wu[:], &qs)
		sums8Q8K(ws[:], &qs)
		unsignSums8Q8K(gu[:], gs[:], &qs)
		if wu != gu || ws != gs {
			t.Fatalf("block %d: %v %v, want %v %v", k, gu[:8], gs[:4], wu[:8], ws[:4])
		}
	}
}
