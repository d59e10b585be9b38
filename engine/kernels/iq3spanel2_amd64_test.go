//go:build !purego

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestIQ3SAVX2PanelKernelMatchesGeneric: iq3sPanelAVX2r4t3 on the AVX2 byte
// panel of some rows gives iq3sAVX2DotGeneric's bits for each of its 4 rows
// and 3 tokens, from any slot of a group and any 3 tokens of a prompt, with
// the weights' extremes (every byte 0xff: the largest grid values and scales,
// every sign set) and the quants' (−128, +127, alternating), and writes only
// its 4 outputs per token.
func TestIQ3SAVX2PanelKernelMatchesGeneric(t *testing.T) {
	requireSIMD(t, "avx2")
	r := rand.New(rand.NewPCG(49, 4))
	const nb, rows = 4, 8
	for _, wm := range []string{"random", "ones", "zeros"} {
		for _, am := range []string{"random", "flat", "alternating", "min", "max", "minmax"} {
			var a acts
			a.prepare(IQ3_S, panelTestActs(r, rows, nb*qkK, am), rows, nb*qkK)
			iq3sAVX2TestQuants(a.q8k[:rows*nb], am)
			a.iq3sAVX2Q8K(nb, rows)
			w := make([]byte, nb*iqPanelGroup*iq3sAVX2Slot)
			dx := make([]float32, nb*iqPanelGroup)
			for i := 0; i < iqPanelGroup; i++ {
				decodeIQ3SPanelRowAVX2(w, dx, panelTestRow(r, IQ3_S, nb, wm), nb, i)
			}
			for _, s := range []int{0, 4, 12} {
				for _, t0 := range []int{0, 2, rows - 3} {
					const guard = -12345.5
					const os = 7 // floats between tokens' outputs
					out := make([]float32, 3*os)
					for k := range out {
						out[k] = guard
					}
					iq3sPanelAVX2r4t3(&w[s*iq3sAVX2Slot], &a.q8kB[t0*qkK], rows*qkK, &dx[s], &a.ydT[t0], 4*a.yds, nb, &out[0], 4*os)
					for u := 0; u < 3; u++ {
						for k := 0; k < os; k++ {
							got := out[u*os+k]
							if k >= 4 {
								if got != guard {
									t.Fatalf("weights %s, acts %s, slot %d tokens %d: wrote output %d of token %d", wm, am, s, t0, k, u)
								}
								continue
							}
							want := iq3sAVX2DotGeneric(w, dx, s+k, a.q8kB, a.ydT, a.yds, rows, t0+u, nb)
							if math.Float32bits(got) != math.Float32bits(want) {
								t.Fatalf("weights %s, acts %s, slot %d tokens %d: row %d token %d = %v, want %v", wm, am, s, t0, k, u, got, want)
							}
						}
					}
				}
			}
		}
	}
}

// TestIQ3SAVX2PanelMatMul: at the AVX2 level, IQ3_S products of every row
// count 1-21 (4 rows a call, the last 1-3 through the row kernels) and every
// token count 3-20 (3 tokens a call, the last tile overlapping), with the
// panels taken from 3 tokens, give dotIQ3SRowGeneric's bits for every output
// and write nothing past them; at 53 rows and 37 tokens (a short last
// group) too; in token chunks of 3, 6 and 9 tokens as well as one chunk.
func TestIQ3SAVX2PanelMatMul(t *testing.T) {
	requireSIMD(t, "avx2")
	restore := setSIMD("avx2")
	defer restore()
	defer func(m, n int) { iqPanelMinTokens, iq3sAVX2MinTokens = m, n }(iqPanelMinTokens, iq3sAVX2MinTokens)
	iqPanelMinTokens, iq3sAVX2MinTokens = 3, 3
	r := rand.New(rand.NewPCG(49, 5))
	check := func(rows, nb, nTok int) {
		t.Helper()
		if !usesIQ3SAVX2Panel(IQ3_S, nTok) {
			t.Fatalf("%d tokens: the AVX2 panels are not taken", nTok)
		}
		cols := nb * qkK
		w := Matrix{Type: IQ3_S, Rows: rows, Cols: cols, Data: make([]byte, 0, rows*IQ3_S.RowBytes(cols))}
		for i := 0; i < rows; i++ {
			w.Data = append(w.Data, panelTestRow(r, IQ3_S, nb, "random")...)
		}
		x := panelTestActs(r, nTok, cols, "random")
		y := make([]q8KBlock, nTok*nb)
		quantRowsQ8K(y, x)
		// Token chunks of 3, 6 or about 9 tokens, and the default (one chunk).
		for _, tb := range []int{3 * nb * qkK, 6 * nb * qkK, 10 * nb * qkK, iq3sAVX2TokBytes} {
			const guard = -12345.5
			dst := make([]float32, nTok*rows+1)
			for i := range dst {
				dst[i] = guard
			}
			func() {
				defer func(v int) { iq3sAVX2TokBytes = v }(iq3sAVX2TokBytes)
				iq3sAVX2TokBytes = tb
				MatMul(dst, w, x, nTok)
			}()
			if dst[nTok*rows] != guard {
				t.Fatalf("%d×%d, %d tokens, chunks of %d bytes: wrote past its outputs", rows, cols, nTok, tb)
			}
			for tok := 0; tok < nTok; tok++ {
				for i := 0; i < rows; i++ {
					got := dst[tok*rows+i]
					want := dotIQ3SRowGeneric(w.Row(i), y[tok*nb:(tok+1)*nb])
					if math.Float32bits(got) != math.Float32bits(want) {
						t.Fatalf("%d×%d, %d tokens, chunks of %d bytes: row %d token %d = %v, want %v", rows, cols, nTok, tb, i, tok, got, want)
					}
				}
			}
		}
	}
	for rows := 1; rows <= 21; rows++ {
		for nTok := 3; nTok <= 20; nTok++ {
			check(rows, 1+(rows+nTok)%3, nTok)
		}
	}
	check(53, 3, 37)
	check(70, 2, 9)
}

// BenchmarkIQ3SAVX2Panels: IQ3_S prompt products (2048 × 2048 by 128
// tokens, one thread) at the AVX2 level through the byte panels ("panels")
// or the four-token row kernels ("rows"), cpu-µs per op.
func BenchmarkIQ3SAVX2Panels(b *testing.B) {
	defer setSIMD("avx2")()
	defer SetThreads(SetThreads(1))
	r := rand.New(rand.NewPCG(49, 6))
	const rows, nb = 2048, 8
	cols := nb * qkK
	w := Matrix{Type: IQ3_S, Rows: rows, Cols: cols, Data: make([]byte, 0, rows*IQ3_S.RowBytes(cols))}
	for i := 0; i < rows; i++ {
		w.Data = append(w.Data, panelTestRow(r, IQ3_S, nb, "random")...)
	}
	defer func(n int) { iq3sAVX2MinTokens = n }(iq3sAVX2MinTokens)
	iq3sAVX2MinTokens = 3
	for _, nTok := range []int{8, 32, 128} {
		x := panelTestActs(r, nTok, cols, "random")
		dst := make([]float32, nTok*rows)
		for _, path := range []string{"panels", "rows"} {
			b.Run(fmt.Sprintf("%d/%s", nTok, path), func(b *testing.B) {
				defer func(v bool) { iq3sPanelsAVX2 = v }(iq3sPanelsAVX2)
				iq3sPanelsAVX2 = path == "panels"
				t0 := cpuSeconds()
				for i := 0; i < b.N; i++ {
					MatMul(dst, w, x, nTok)
				}
				b.ReportMetric((cpuSeconds()-t0)*1e6/float64(b.N), "cpu-us/op")
			})
		}
	}
}
