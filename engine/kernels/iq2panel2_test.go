package kernels

import (
	"encoding/binary"
	"math"
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

// TestIQ2PanelDecoderAVX2: decodeIQ2PanelRowAVX2 writes decodeIQ2OuterRow's
// records with each value v in place of v+43 (IQ3_XXS too: byte(v+43)−43 is
// byte(v) however the bias wrapped), its f16 scales, and as each
// block's correction −128·Σ_j s_j·Σv_j of the reference's values (iq2Values),
// into its row slot only.
func TestIQ2PanelDecoderAVX2(t *testing.T) {
	r := rand.New(rand.NewPCG(48, 5))
	for _, typ := range iq2AVX2PanelTypes {
		for _, mode := range []string{"random", "ones", "zeros"} {
			const nb = 3
			for _, i := range []int{0, 7, iqPanelGroup - 1} {
				row := panelTestRow(r, typ, nb, mode)
				ref := make([]byte, nb*iqPanelGroup*iq2OuterRec)
				want, got := make([]byte, nb*iq2AVX2Blk), make([]byte, nb*iq2AVX2Blk)
				wdx, gdx := make([]float32, nb*iqPanelGroup), make([]float32, nb*iqPanelGroup)
				decodeIQ2OuterRow(typ, ref, wdx, row, nb, i)
				for b := 0; b < nb; b++ {
					for j := 0; j < 16; j++ {
						for k := 0; k < iq2OuterRec; k++ {
							v := ref[(b*16+j)*iq2OuterRec+k]
							if k < qkK && k%64/4 == i {
								v -= iq2OuterBias
							}
							want[b*iq2AVX2Blk+j*iq2OuterRec+k] = v
						}
					}
					var v [qkK]int8
					var ls [16]int32
					iq2Values(typ, row[b*typ.BlockBytes():], &v, &ls)
					var corr int32
					for q, x := range v {
						corr -= 128 * ls[q/16] * int32(x)
					}
					binary.LittleEndian.PutUint32(want[b*iq2AVX2Blk+iqPanelGroup*iq2OuterRec+4*i:], uint32(corr))
				}
				decodeIQ2PanelRowAVX2(typ, got, gdx, row, nb, i)
				if !slices.Equal(got, want) || !slices.Equal(gdx, wdx) {
					t.Fatalf("%v %s slot %d: the AVX2 panel decoder differs", typ, mode, i)
				}
			}
		}
	}
}

// TestIQ3XXSValuesMatchDequant: iq2Values' IQ3_XXS values times its group
// scales are dequantIQ3XXS's floats over d/4 (the values the AVX2 byte panels
// hold are the reference's).
func TestIQ3XXSValuesMatchDequant(t *testing.T) {
	r := rand.New(rand.NewPCG(48, 6))
	for _, mode := range []string{"random", "ones", "zeros"} {
		blk := panelTestRow(r, IQ3_XXS, 1, mode)
		var v [qkK]int8
		var ls [16]int32
		iq2Values(IQ3_XXS, blk, &v, &ls)
		var y [qkK]float32
		dequantIQ3XXS(y[:], blk)
		d := f16Table[le16(blk)]
		for q := range v {
			// dequant: d·(0.5+s)·0.5 · g · sign with ls = 2s+1, i.e. d·ls/4 · v.
			want := y[q]
			got := d * float32(ls[q/16]) / 4 * float32(v[q])
			if math.Abs(float64(got-want)) > 1e-6*math.Abs(float64(want))+1e-30 {
				t.Fatalf("%s value %d: %v·%d = %v, dequant %v", mode, q, v[q], ls[q/16], got, want)
			}
		}
	}
}
