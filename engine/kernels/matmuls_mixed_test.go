package kernels

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestMatMulsMixedTypesShareActivations: MatMuls shares one set of Q8_K
// activations between products of the same X whatever their weight types (a
// mixed file's q/k/v or gate/up: IQ3_S beside Q4_K, say), so each product's
// layouts must be there whichever type came first (acts.layoutQ8K). Every
// product, in every order and at token counts that take the VNNI, panel, byte
// panel, packed and 16-token kernels, has the bits MatMul gives it alone. A
// packed Q4_K matrix after an IQ3_S one read an empty bsT before (index out of
// range in packedRows, TestZooQuantizeParity/llama-dense-IQ3_M).
func TestMatMulsMixedTypesShareActivations(t *testing.T) {
	r := rand.New(rand.NewPCG(47, 1))
	const nb, rows = 2, 37
	packed := q4KMatrix(r, 48, nb)
	packed.Data = bytes.Clone(packed.Data)
	PackQ4K(&packed)
	ws := []Matrix{packed, q4KMatrix(r, rows, nb)}
	for _, typ := range []Type{IQ3_S, IQ1_S, IQ2_XS, IQ2_S, IQ3_XXS, Q6_K, IQ4_XS} {
		m := Matrix{Type: typ, Rows: rows, Cols: nb * qkK}
		for i := 0; i < rows; i++ {
			if typ == Q6_K || typ == IQ4_XS {
				m.Data = append(m.Data, weightRow(r, typ, nb, "random", false)...)
			} else {
				m.Data = append(m.Data, panelTestRow(r, typ, nb, "random")...)
			}
		}
		ws = append(ws, m)
	}
	cols := nb * qkK
	for _, n := range []int{1, 3, 5, 7, 9, 16, 20} {
		x := randRow(r, n*cols, 1)
		want := make([][]float32, len(ws))
		for i, w := range ws {
			want[i] = make([]float32, n*w.Rows)
			MatMul(want[i], w, x, n)
		}
		for first := range ws {
			t.Run(fmt.Sprintf("%d tokens/%v first", n, ws[first].Type), func(t *testing.T) {
				ps := make([]Product, len(ws))
				for k := range ws {
					i := (first + k) % len(ws)
					ps[k] = Product{Dst: make([]float32, n*ws[i].Rows), W: ws[i], X: x, NTok: n}
				}
				MatMuls(ps)
				for k, p := range ps {
					i := (first + k) % len(ws)
					for j, v := range p.Dst {
						if math.Float32bits(v) != math.Float32bits(want[i][j]) {
							t.Fatalf("%v (packed %v) after %v: token %d row %d: %v, alone %v", p.W.Type, p.W.Packed > 0, ws[first].Type, j/p.W.Rows, j%p.W.Rows, v, want[i][j])
						}
					}
				}
			})
		}
	}
}
