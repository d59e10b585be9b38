package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lmlite/lmlite/internal/ggmlref"
)

// TestDotIQ1SMatchesLlamaCppBits: IQ1_S products give ggml_vec_dot_iq1_s_q8_K's
// bits (llama.cpp takes vec_dot for IQ1_S on prompts and decoding alike: it is
// not repacked): the Go reference (dotIQ1SRowGeneric) and MatMul's products of
// 1 to 20 tokens on every SIMD level, through the row kernels and the prompt
// panels (issue 32). Before IQ1_S took that order (one float step per block,
// 8·sumi + sumi1 in one integer), 171 of 256 products differed on every level.
func TestDotIQ1SMatchesLlamaCppBits(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a C program against llama.cpp; skipped in -short")
	}
	const rows, cols, nTok = 64, 2048, 20
	r := rand.New(rand.NewPCG(32, uint64(IQ1_S)))
	raw := randomBlocks(r, IQ1_S, rows*cols/qkK)
	x := randRow(r, nTok*cols, 1)
	var want []float32
	for tok := 0; tok < nTok; tok++ {
		want = append(want, ggmlref.Run(t, uint32(IQ1_S), rows, cols, IQ1_S.RowBytes(cols), nil, raw, x[tok*cols:(tok+1)*cols]).Dots...)
	}
	m := Matrix{Type: IQ1_S, Rows: rows, Cols: cols, Data: raw}
	var a acts
	a.prepare(IQ1_S, x, nTok, cols)
	nb := cols / qkK
	ref := make([]float32, len(want))
	for tok := 0; tok < nTok; tok++ {
		for i := 0; i < rows; i++ {
			ref[tok*rows+i] = dotIQ1SRowGeneric(m.Row(i), a.q8k[tok*nb:(tok+1)*nb])
		}
	}
	if bad := bitsDiffer(ref, want); bad > 0 {
		t.Errorf("dotIQ1SRowGeneric: %d of %d products differ from llama.cpp's bits", bad, len(want))
	}
	for _, level := range simdLevels() {
		restore := setSIMD(level)
		for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 13, nTok} {
			dst := make([]float32, n*rows)
			MatMul(dst, m, x[:n*cols], n)
			if bad := bitsDiffer(dst, want[:n*rows]); bad > 0 {
				t.Errorf("%s, %d tokens: %d of %d products differ from llama.cpp's bits", level, n, bad, len(dst))
			}
		}
		restore()
	}
}

// TestIQ1SBytePanelMatchesRowKernel: a row decoded into IQ1_S's byte panel
// (decodeIQ1SBytePanel: values ls·grid, lane corrections, ±scales) and
// multiplied as iq1sPanelAVX512r2t4 does (iq1sPanelDotGeneric: unsigned
// quants, the corrections subtracted, the shifts from the bsums) gives
// dotIQ1SRowGeneric's bits, in every slot, for random and extreme blocks and
// activations (quants of −128 included).
func TestIQ1SBytePanelMatchesRowKernel(t *testing.T) {
	r := rand.New(rand.NewPCG(47, 1))
	const nb, rows = 3, 5
	for _, wm := range []string{"random", "ones", "zeros"} {
		for _, am := range []string{"random", "flat", "alternating", "min"} {
			x := panelTestActs(r, rows, nb*qkK, am)
			if am == "min" {
				for i := range x {
					x[i] = -1 + float32(i%3)*0.25 // quants −128 where x = −1
				}
			}
			var a acts
			a.prepare(IQ1_S, x, rows, nb*qkK)
			var p iq1sPanelBuf
			p.grow(1, nb)
			for i := 0; i < iqPanelGroup; i += 5 {
				row := panelTestRow(r, IQ1_S, nb, wm)
				decodeIQ1SBytePanel(p.w, p.c, p.ls, p.dx, row, nb, i)
				for tok := 0; tok < rows; tok++ {
					y := a.q8k[tok*nb : (tok+1)*nb]
					got, want := iq1sPanelDotGeneric(&p, i, y), dotIQ1SRowGeneric(row, y)
					if math.Float32bits(got) != math.Float32bits(want) {
						t.Fatalf("weights %s, acts %s, slot %d token %d: %v, want %v", wm, am, i, tok, got, want)
					}
				}
			}
		}
	}
}
