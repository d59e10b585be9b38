//go:build !purego

package kernels

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// BenchmarkIQ2Panel: 1b-shaped prompt products of the IQ2 types (1024 rows of
// 2048 columns by 512 tokens, one thread, random blocks) through the byte
// panels (iq2panel.go) and through the int16 panels, in cpu-µs per product.
func BenchmarkIQ2Panel(b *testing.B) {
	defer SetThreads(SetThreads(1))
	r := rand.New(rand.NewPCG(47, 4))
	const rows, cols, nTok = 1024, 2048, 512
	x := randRow(r, nTok*cols, 1)
	dst := make([]float32, nTok*rows)
	for _, typ := range iq2PanelTypes {
		w := Matrix{Type: typ, Rows: rows, Cols: cols, Data: randomBlocks(r, typ, rows*cols/qkK)}
		for _, path := range []string{"bytes", "int16"} {
			b.Run(typ.String()+"/"+path, func(b *testing.B) {
				defer func(v bool) { iq2Panels = v }(iq2Panels)
				iq2Panels = path == "bytes"
				t0 := cpuSeconds()
				for b.Loop() {
					MatMul(dst, w, x, nTok)
				}
				b.ReportMetric((cpuSeconds()-t0)*1e6/float64(b.N), "cpu-us/op")
			})
		}
	}
}

// TestIQ2OuterDecoderAVX512: the AVX-512 IQ2 panel decoders write
// decodeIQ2OuterRow's bytes, scales and f16 scales, into their row slot only.
func TestIQ2OuterDecoderAVX512(t *testing.T) {
	requireSIMD(t, "avx512")
	r := rand.New(rand.NewPCG(47, 6))
	for _, typ := range iq2PanelTypes {
		for _, mode := range []string{"random", "ones", "zeros"} {
			const nb = 3
			for _, i := range []int{0, 7, iqPanelGroup - 1} {
				row := panelTestRow(r, typ, nb, mode)
				want, got := make([]byte, nb*iqPanelGroup*iq2OuterRec), make([]byte, nb*iqPanelGroup*iq2OuterRec)
				wdx, gdx := make([]float32, nb*iqPanelGroup), make([]float32, nb*iqPanelGroup)
				decodeIQ2OuterRow(typ, want, wdx, row, nb, i)
				decodeIQ2OuterRowAVX512(typ, got, gdx, row, nb, i)
				if !slices.Equal(got, want) || !slices.Equal(gdx, wdx) {
					t.Fatalf("%v %s slot %d: the AVX-512 decoder differs", typ, mode, i)
				}
			}
		}
	}
}

// TestIQ2OuterKernelMatchesGeneric: iq2OuterAVX512r16t8 and r16t4 give
// iq2OuterDotGeneric's bits for each of their 16 rows and tokens, from any 8
// (4) tokens of a prompt, and store only the rows of their mask.
func TestIQ2OuterKernelMatchesGeneric(t *testing.T) {
	requireSIMD(t, "avx512")
	r := rand.New(rand.NewPCG(47, 7))
	for _, typ := range iq2PanelTypes {
		const nb, rows = 4, 11
		var a acts
		a.prepare(typ, panelTestActs(r, rows, nb*qkK, "random"), rows, nb*qkK)
		a.iq2OuterActs(nb, rows)
		w := make([]byte, nb*iqPanelGroup*iq2OuterRec)
		dx := make([]float32, nb*iqPanelGroup)
		for i := 0; i < iqPanelGroup; i++ {
			decodeIQ2OuterRow(typ, w, dx, panelTestRow(r, typ, nb, "random"), nb, i)
		}
		for _, T := range []int{8, 4} {
			for _, t0 := range []int{0, 2, rows - T} {
				for _, valid := range []int{16, 5} {
					const guard = -12345.5
					out := make([]float32, T*16)
					for k := range out {
						out[k] = guard
					}
					kernel := iq2OuterAVX512r16t8
					if T == 4 {
						kernel = iq2OuterAVX512r16t4
					}
					kernel(&w[0], &a.q8kO[t0*iq2OuterTok], rows*iq2OuterTok, &dx[0], &a.ydT[t0], 4*a.yds, nb, panelFactor(typ), &out[0], 64, uint16(1<<valid-1))
					for tk := 0; tk < T; tk++ {
						for i := 0; i < 16; i++ {
							got := out[16*tk+i]
							if i >= valid {
								if got != guard {
									t.Fatalf("%v t%d: row %d outside the mask written", typ, T, i)
								}
								continue
							}
							want := iq2OuterDotGeneric(w, dx, i, a.q8kO, a.ydT, a.yds, rows, t0+tk, nb, panelFactor(typ))
							if math.Float32bits(got) != math.Float32bits(want) {
								t.Fatalf("%v t%d row %d token %d: %v, want %v", typ, T, i, t0+tk, got, want)
							}
						}
					}
				}
			}
		}
	}
}
