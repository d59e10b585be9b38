package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// iq3sAVX2TestQuants sets every quant of the blocks y to the mode's extreme
// (−128, +127, or the two alternating: VPMADDUBSW's pair sums at their
// largest), leaving them for "random", "flat" and "alternating".
func iq3sAVX2TestQuants(y []q8KBlock, mode string) {
	for b := range y {
		for k := range y[b].qs {
			switch mode {
			case "min":
				y[b].qs[k] = -128
			case "max":
				y[b].qs[k] = 127
			case "minmax":
				y[b].qs[k] = []int8{-128, 127}[k%2]
			}
		}
	}
}

// TestIQ3SAVX2PanelMatchesRowKernel: IQ3_S rows decoded into the AVX2 byte
// panels (decodeIQ3SPanelRowAVX2) and tokens as bytes q+128 in their order
// (iq3sAVX2Q8K), multiplied as the AVX2 kernel does (iq3sAVX2DotGeneric:
// VPMADDUBSW, VPADDW, VPMADDWD by the scales, the corr), give
// dotIQ3SRowGeneric's bits, at the largest scales and grid values and the
// quants' extremes too: the decoder, the layouts and the bias.
func TestIQ3SAVX2PanelMatchesRowKernel(t *testing.T) {
	r := rand.New(rand.NewPCG(49, 3))
	const nb, rows = 3, 5
	for _, wm := range []string{"random", "ones", "zeros"} {
		for _, am := range []string{"random", "flat", "alternating", "min", "max", "minmax"} {
			var a acts
			a.prepare(IQ3_S, panelTestActs(r, rows, nb*qkK, am), rows, nb*qkK)
			iq3sAVX2TestQuants(a.q8k[:rows*nb], am)
			a.iq3sAVX2Q8K(nb, rows)
			w := make([]byte, nb*iqPanelGroup*iq3sAVX2Slot)
			dx := make([]float32, nb*iqPanelGroup)
			for i := 0; i < iqPanelGroup; i += 5 {
				row := panelTestRow(r, IQ3_S, nb, wm)
				decodeIQ3SPanelRowAVX2(w, dx, row, nb, i)
				for tok := 0; tok < rows; tok++ {
					got := iq3sAVX2DotGeneric(w, dx, i, a.q8kB, a.ydT, a.yds, rows, tok, nb)
					want := dotIQ3SRowGeneric(row, a.q8k[tok*nb:(tok+1)*nb])
					if math.Float32bits(got) != math.Float32bits(want) {
						t.Fatalf("weights %s, acts %s, slot %d token %d: %v, want %v", wm, am, i, tok, got, want)
					}
				}
			}
		}
	}
}

// TestIQ3SAVX2PanelDecoderMatchesRef: decodeIQ3SPanelRowAVX2 (four values at
// a time) writes decodeIQ3SPanelRowAVX2Ref's bytes and scales, into any slot,
// for random blocks and every byte 0xff (the largest grid values and scales,
// every sign set) or 0.
func TestIQ3SAVX2PanelDecoderMatchesRef(t *testing.T) {
	r := rand.New(rand.NewPCG(49, 7))
	const nb = 3
	for _, wm := range []string{"random", "ones", "zeros"} {
		for n := 0; n < 20; n++ {
			row := panelTestRow(r, IQ3_S, nb, wm)
			i := r.IntN(iqPanelGroup)
			w, wr := make([]byte, nb*iqPanelGroup*iq3sAVX2Slot), make([]byte, nb*iqPanelGroup*iq3sAVX2Slot)
			dx, dxr := make([]float32, nb*iqPanelGroup), make([]float32, nb*iqPanelGroup)
			decodeIQ3SPanelRowAVX2(w, dx, row, nb, i)
			decodeIQ3SPanelRowAVX2Ref(wr, dxr, row, nb, i)
			for k := range w {
				if w[k] != wr[k] {
					t.Fatalf("weights %s, slot %d: byte %d = %#x, want %#x", wm, i, k, w[k], wr[k])
				}
			}
			for k := range dx {
				if math.Float32bits(dx[k]) != math.Float32bits(dxr[k]) {
					t.Fatalf("weights %s, slot %d: scale %d = %v, want %v", wm, i, k, dx[k], dxr[k])
				}
			}
		}
	}
}
