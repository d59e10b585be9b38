package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// panelTestRow returns a row of nb IQ3_S blocks: random bytes (mode "random"),
// every byte 0xff (the largest scales and grid indices, every sign set) or
// 0x00, with a finite f16 scale (IQ1_M's in its scale words' top nibbles,
// TQ2_0's after its quants).
func panelTestRow(r *rand.Rand, typ Type, nb int, mode string) []byte {
	row := randomBlocks(r, typ, nb)
	bb := typ.BlockBytes()
	if typ == TQ2_0 {
		for b := 0; b < nb; b++ {
			put16(row[b*bb+64:], uint16(0x3000|r.IntN(0x400)))
			if mode != "random" {
				for i := 0; i < 64; i++ {
					row[b*bb+i] = map[string]byte{"ones": 0xff, "zeros": 0}[mode]
				}
			}
		}
		return row
	}
	if mode != "random" {
		v := map[string]byte{"ones": 0xff, "zeros": 0}[mode]
		for b := 0; b < nb; b++ {
			if typ == IQ1_M {
				for i := 0; i < bb; i++ {
					if i >= 48 && i%2 == 1 {
						row[b*bb+i] = row[b*bb+i]&0xf0 | v&0x0f
					} else {
						row[b*bb+i] = v
					}
				}
				continue
			}
			for i := 2; i < bb; i++ {
				row[b*bb+i] = v
			}
		}
	}
	return row
}

// panelTestActs returns rows×cols activations: random, all equal (every
// quant −127) or alternating in sign (±127).
func panelTestActs(r *rand.Rand, rows, cols int, mode string) []float32 {
	x := randRow(r, rows*cols, 1)
	for i := range x {
		switch mode {
		case "flat":
			x[i] = 0.5
		case "alternating":
			x[i] = float32(1 - 2*(i%2))
		}
	}
	return x
}

// panelTypes are the types with int16 panels (IQ1_S and TQ2_0 have byte
// panels: iq1spanel.go, tq2panel.go).
var panelTypes = []Type{IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ1_M}

// panelRef is the reference row dot of a panel type: dotIQ3SRowGeneric for
// IQ3_S, the block reference's for the others.
func panelRef(typ Type) func([]byte, []q8KBlock) float32 {
	switch typ {
	case IQ3_S:
		return dotIQ3SRowGeneric
	case IQ1_S:
		return dotIQ1SRowGeneric
	}
	c, bb := refCodecOf(typ), typ.BlockBytes()
	return func(row []byte, y []q8KBlock) float32 { return dotKRowGeneric(c.dotK, bb, row, y) }
}

// TestPanelDecodeMatchesRowKernel: a row decoded into a panel (decodePanelRow)
// and tokens widened into the panels' order (widenQ8K), multiplied lane by
// lane (panelDotGeneric; panelSumDotGeneric for the types of one float step a
// block), give the reference's bits: the decoders, the layout and the float
// steps the panel kernels rely on.
func TestPanelDecodeMatchesRowKernel(t *testing.T) {
	for _, typ := range panelTypes {
		testPanelDecode(t, typ)
	}
}

func testPanelDecode(t *testing.T, typ Type) {
	r := rand.New(rand.NewPCG(45, 1))
	const nb, rows = 3, 5
	ref := panelRef(typ)
	for _, wm := range []string{"random", "ones", "zeros"} {
		for _, am := range []string{"random", "flat", "alternating"} {
			var a acts
			a.prepare(typ, panelTestActs(r, rows, nb*qkK, am), rows, nb*qkK)
			a.widenQ8K(nb, rows)
			w := make([]int16, nb*iqPanelGroup*qkK)
			dx := make([]float32, nb*iqPanelGroup)
			for i := 0; i < iqPanelGroup; i += 5 {
				row := panelTestRow(r, typ, nb, wm)
				decodePanelRow(typ, w, dx, row, nb, i)
				for tok := 0; tok < rows; tok++ {
					got := panelDotGeneric(w, dx, i, a.q8kW, a.ydT, a.yds, rows, tok, nb)
					if f := panelFactor(typ); f != 0 {
						got = panelSumDotGeneric(w, dx, i, a.q8kW, a.ydT, a.yds, rows, tok, nb, f, panelFactorFirst(typ))
					}
					want := ref(row, a.q8k[tok*nb:(tok+1)*nb])
					if math.Float32bits(got) != math.Float32bits(want) {
						t.Fatalf("%v weights %s, acts %s, slot %d token %d: %v, want %v", typ, wm, am, i, tok, got, want)
					}
				}
			}
		}
	}
}

// TestPanelMatMul: MatMul of prompts of the panel types (through the panels
// with AVX-512 VNNI from 8 tokens on) gives the reference's bits for every row
// and token on every level, at row counts that leave partial groups and rows
// outside any tile, token counts that leave 1-3 tokens after the fours, and
// extreme weights and activations; it writes nothing outside its outputs.
func TestPanelMatMul(t *testing.T) {
	for _, typ := range append(panelTypes, TQ2_0, IQ1_S) { // TQ2_0, IQ1_S: their byte panels
		testPanelMatMul(t, typ)
	}
}

func testPanelMatMul(t *testing.T, typ Type) {
	r := rand.New(rand.NewPCG(45, 2))
	ref := panelRef(typ)
	for _, c := range []struct {
		rows, nb int
		wm, am   string
	}{
		{4, 1, "random", "random"}, {21, 2, "random", "random"}, {53, 3, "random", "random"},
		{37, 8, "random", "random"}, {16, 2, "ones", "alternating"}, {16, 2, "ones", "flat"},
		{20, 1, "zeros", "random"}, {35, 1, "random", "alternating"},
	} {
		cols := c.nb * qkK
		w := Matrix{Type: typ, Rows: c.rows, Cols: cols, Data: make([]byte, 0, c.rows*typ.RowBytes(cols))}
		for i := 0; i < c.rows; i++ {
			w.Data = append(w.Data, panelTestRow(r, typ, c.nb, c.wm)...)
		}
		for _, nTok := range []int{5, 6, 7, 8, 9, 11, 16, 19, 37} {
			x := panelTestActs(r, nTok, cols, c.am)
			y := make([]q8KBlock, nTok*c.nb)
			quantRowsQ8K(y, x)
			for _, level := range simdLevels() {
				restore := setSIMD(level)
				const guard = -12345.5
				dst := make([]float32, nTok*c.rows+1)
				for i := range dst {
					dst[i] = guard
				}
				MatMul(dst, w, x, nTok)
				restore()
				if dst[nTok*c.rows] != guard {
					t.Fatalf("%d×%d, %d tokens, %s: wrote past its outputs", c.rows, cols, nTok, level)
				}
				for tok := 0; tok < nTok; tok++ {
					for i := 0; i < c.rows; i++ {
						got := dst[tok*c.rows+i]
						want := ref(w.Row(i), y[tok*c.nb:(tok+1)*c.nb])
						if math.Float32bits(got) != math.Float32bits(want) {
							t.Fatalf("%v %d×%d (%s, %s), %d tokens, %s: row %d token %d = %v, want %v", typ, c.rows, cols, c.wm, c.am, nTok, level, i, tok, got, want)
						}
					}
				}
			}
		}
	}
}
