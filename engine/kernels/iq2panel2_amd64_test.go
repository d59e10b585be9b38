//go:build !purego

package kernels

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// TestIQ2OuterKernelAVX2MatchesGeneric: iq2OuterAVX2r16t4 on the AVX2 panel
// of some rows gives iq2OuterDotGeneric's bits on their panel (IQ3_XXS, whose
// biased bytes would wrap there: iq2AVX2DotGeneric's on the AVX2 panel) for each of its 16 rows and 4 tokens, from any 4
// tokens of a prompt, with the weights' extremes (every byte 0xff: the
// largest grid values, every sign set) and the quants' (all −128 or +127,
// or alternating: VPMADDUBSW's pair sums at their largest), and writes only
// its 16 outputs per token.
func TestIQ2OuterKernelAVX2MatchesGeneric(t *testing.T) {
	requireSIMD(t, "avx2")
	r := rand.New(rand.NewPCG(48, 1))
	for _, typ := range iq2AVX2PanelTypes {
		const nb, rows = 4, 11
		for _, wm := range []string{"random", "ones", "zeros"} {
			for _, am := range []string{"random", "flat", "alternating", "min", "max", "minmax"} {
				var a acts
				a.prepare(typ, panelTestActs(r, rows, nb*qkK, am), rows, nb*qkK)
				a.iq2OuterActs(nb, rows)
				for k := range a.q8kO {
					if k%iq2OuterTok < qkK {
						switch am {
						case "min":
							a.q8kO[k] = 0x80
						case "max":
							a.q8kO[k] = 0x7f
						case "minmax":
							a.q8kO[k] = []byte{0x80, 0x7f}[k/2%2]
						}
					}
				}
				// The −43·bsums of the quants as they are now.
				for o := 0; o < len(a.q8kO); o += iq2OuterTok {
					for j := 0; j < 16; j++ {
						var s int32
						for k := 0; k < 16; k++ {
							s += int32(int8(a.q8kO[o+16*j+k]))
						}
						binary.LittleEndian.PutUint32(a.q8kO[o+qkK+4*j:], uint32(-iq2OuterBias*s))
					}
				}
				w := make([]byte, nb*iqPanelGroup*iq2OuterRec)
				w2 := make([]byte, nb*iq2AVX2Blk)
				dx, dx2 := make([]float32, nb*iqPanelGroup), make([]float32, nb*iqPanelGroup)
				for i := 0; i < iqPanelGroup; i++ {
					row := panelTestRow(r, typ, nb, wm)
					decodeIQ2OuterRow(typ, w, dx, row, nb, i)
					decodeIQ2PanelRowAVX2(typ, w2, dx2, row, nb, i)
				}
				for _, t0 := range []int{0, 3, rows - 4} {
					const guard = -12345.5
					const os = 20 // floats between tokens' outputs
					out := make([]float32, 4*os)
					for k := range out {
						out[k] = guard
					}
					iq2OuterAVX2r16t4(&w2[0], &a.q8kO[t0*iq2OuterTok], rows*iq2OuterTok, &dx2[0], &a.ydT[t0], 4*a.yds, nb, panelFactor(typ), &out[0], 4*os)
					for tk := 0; tk < 4; tk++ {
						for i := 0; i < os; i++ {
							got := out[os*tk+i]
							if i >= iqPanelGroup {
								if got != guard {
									t.Fatalf("%v: output %d of token %d written", typ, i, tk)
								}
								continue
							}
							var want float32
							if typ == IQ3_XXS {
								want = iq2AVX2DotGeneric(w2, dx2, i, a.q8kO, a.ydT, a.yds, rows, t0+tk, nb, panelFactor(typ))
							} else {
								want = iq2OuterDotGeneric(w, dx, i, a.q8kO, a.ydT, a.yds, rows, t0+tk, nb, panelFactor(typ))
							}
							if math.Float32bits(got) != math.Float32bits(want) {
								t.Fatalf("%v weights %s acts %s row %d token %d: %v, want %v", typ, wm, am, i, t0+tk, got, want)
							}
						}
					}
				}
			}
		}
	}
}

// TestIQ2PanelAVX2MatMul: on the AVX2 level, prompts of the IQ2 types and IQ3_XXS go
// through the byte panels (usesIQ2Panel) and MatMul gives the pure-Go
// reference's bits for every output, at token counts that leave a last
// overlapping tile and rows that leave a last group of fewer than 16.
func TestIQ2PanelAVX2MatMul(t *testing.T) {
	requireSIMD(t, "avx2")
	r := rand.New(rand.NewPCG(48, 2))
	for _, typ := range iq2AVX2PanelTypes {
		const cols = 512
		for _, rows := range []int{16, 37, 70} {
			w := Matrix{Type: typ, Rows: rows, Cols: cols, Data: randomBlocks(r, typ, rows*cols/qkK)}
			for _, nTok := range []int{6, 7, 9, 16, 21} {
				x := randRow(r, nTok*cols, 1)
				restore := setSIMD("generic")
				want := make([]float32, nTok*rows)
				MatMul(want, w, x, nTok)
				restore()
				restore = setSIMD("avx2")
				if !usesIQ2Panel(typ, nTok) {
					restore()
					t.Fatalf("%v, %d tokens: not through the panels on AVX2", typ, nTok)
				}
				got := make([]float32, nTok*rows)
				MatMul(got, w, x, nTok)
				restore()
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%v, %d rows, %d tokens: output %d (token %d row %d) = %v, want %v", typ, rows, nTok, i, i/rows, i%rows, got[i], want[i])
					}
				}
			}
		}
	}
}

// BenchmarkIQ2PanelAVX2: 1b-shaped prompt products of the IQ2 types and IQ3_XXS (1024 rows
// of 2048 columns by 512 tokens, one thread, random blocks) on the AVX2 level,
// through the byte panels (iq2OuterAVX2r16t4) and through the four-token row
// kernels (dotLatticeRows), in cpu-µs per product.
func BenchmarkIQ2PanelAVX2(b *testing.B) {
	defer setSIMD("avx2")()
	defer SetThreads(SetThreads(1))
	r := rand.New(rand.NewPCG(48, 4))
	const rows, cols, nTok = 1024, 2048, 512
	x := randRow(r, nTok*cols, 1)
	dst := make([]float32, nTok*rows)
	for _, typ := range iq2AVX2PanelTypes {
		w := Matrix{Type: typ, Rows: rows, Cols: cols, Data: randomBlocks(r, typ, rows*cols/qkK)}
		for _, path := range []string{"bytes", "rows"} {
			b.Run(typ.String()+"/"+path, func(b *testing.B) {
				defer func(v bool) { iq2PanelsAVX2 = v }(iq2PanelsAVX2)
				iq2PanelsAVX2 = path == "bytes"
				t0 := cpuSeconds()
				for b.Loop() {
					MatMul(dst, w, x, nTok)
				}
				b.ReportMetric((cpuSeconds()-t0)*1e6/float64(b.N), "cpu-us/op")
			})
		}
	}
}

// iq2AVX2DotGeneric is iq2OuterAVX2r16t4 for one row (slot i of the AVX2
// panel w, scales dx) and one token t (the records ao, scales ydT with stride
// yds), in Go: per block the row's correction plus Σ_j s_j·Σ v·(q+128), then
// sum += ((dx·dy)·float(isum))·factor.
func iq2AVX2DotGeneric(w []byte, dx []float32, i int, ao []byte, ydT []float32, yds, rows, t, nb int, factor float32) float32 {
	var sum float32
	for b := 0; b < nb; b++ {
		p := w[b*iq2AVX2Blk:]
		y := ao[(b*rows+t)*iq2OuterTok:]
		isum := int32(binary.LittleEndian.Uint32(p[iqPanelGroup*iq2OuterRec+4*i:]))
		for j := 0; j < 16; j++ {
			var g int32
			for c := 0; c < 4; c++ {
				for k := 0; k < 4; k++ {
					g += int32(int8(p[j*iq2OuterRec+64*c+4*i+k])) * (int32(int8(y[16*j+4*c+k])) + 128)
				}
			}
			isum += g * int32(binary.LittleEndian.Uint32(p[j*iq2OuterRec+qkK+4*i:]))
		}
		sum += float32(float32(dx[b*iqPanelGroup+i]*ydT[b*yds+t]*float32(isum)) * factor)
	}
	return sum
}
