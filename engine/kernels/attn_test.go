package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// attnCase is the cache and query of one attention head for the span tests.
type attnCase struct {
	hd, n, stride, off int
	k, v               []uint16
	q                  []float32
	scale              float32
}

// newAttnCase fills a cache of n positions; mode "rising" makes every score a new
// maximum, "wide" spreads the scores over the whole range of expf (scores far
// below the maximum give 0, the first ones far above it), "flat" makes many equal.
func newAttnCase(r *rand.Rand, hd, n, stride, off int, mode string) attnCase {
	c := attnCase{hd: hd, n: n, stride: stride, off: off, scale: float32(1 / math.Sqrt(float64(hd)))}
	size := off + (n-1)*stride + hd + 5
	c.k, c.v = make([]uint16, size), make([]uint16, size)
	for i := range c.k {
		c.k[i] = F32ToF16(float32(r.NormFloat64()))
		c.v[i] = F32ToF16(float32(r.NormFloat64() * 3))
	}
	c.q = make([]float32, hd)
	for i := range c.q {
		c.q[i] = float32(r.NormFloat64())
	}
	switch mode {
	case "rising":
		for j := 0; j < n; j++ {
			for i := 0; i < hd; i++ {
				c.k[off+j*stride+i] = F32ToF16(float32(j) * 0.05 * sign(c.q[i]))
			}
		}
	case "wide":
		c.scale = 40
	case "flat":
		for j := 0; j < n; j++ {
			copy(c.k[off+j*stride:off+j*stride+hd], c.k[off:off+hd])
		}
	}
	return c
}

func sign(x float32) float32 {
	if x < 0 {
		return -1
	}
	return 1
}

// TestAttnSpanMatchesReference: the assembly's chunked attention gives the bits of
// the Go loop, for head sizes around the slab sizes, position counts around the
// chunk size, and spans of any length (as a paged cache gives them).
func TestAttnSpanMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, hd := range []int{8, 16, 24, 64, 72, 128, 136, 256, 264} {
		for _, n := range []int{1, 2, 7, 8, 9, 63, 64, 65, 130, 150, 200} {
			for _, mode := range []string{"random", "rising", "wide", "flat"} {
				stride, off := hd*3+8*(n%3), 8*(n%4)+hd%16
				c := newAttnCase(r, hd, n, stride, off, mode)
				k, v := c.k[c.off:], c.v[c.off:]
				var ref attnState
				ref.start(c.q)
				attnSpanGeneric(&ref, k, v, n, stride, c.scale)
				want := make([]float32, hd)
				ref.finish(want)
				for i, split := range []int{n, 1, 5, 16, 64} {
					levels := simdLevels()
					restore := setSIMD(levels[i%len(levels)]) // each level, on some of the splits
					var st attnState
					st.start(c.q)
					for j := 0; j < n; j += split {
						m := min(split, n-j)
						st.span(k[j*stride:], v[j*stride:], m, stride, c.scale)
					}
					got := make([]float32, hd+2)
					got[0], got[hd+1] = -7, -7
					st.finish(got[1 : hd+1])
					if got[0] != -7 || got[hd+1] != -7 {
						t.Fatalf("hd %d n %d %s: wrote outside out", hd, n, mode)
					}
					for i := range want {
						if math.Float32bits(got[1+i]) != math.Float32bits(want[i]) {
							t.Fatalf("hd %d n %d %s split %d: out[%d] = %v, reference %v (mx %v/%v sum %v/%v)",
								hd, n, mode, split, i, got[1+i], want[i], st.mx, ref.mx, st.sum, ref.sum)
						}
					}
					if st.mx != ref.mx || math.Float32bits(st.sum) != math.Float32bits(ref.sum) { // (the maximum's zero may differ in sign)
						t.Fatalf("hd %d n %d %s split %d: mx %v sum %v, reference %v %v", hd, n, mode, split, st.mx, st.sum, ref.mx, ref.sum)
					}
					restore()
				}
			}
		}
	}
}

// BenchmarkAttend measures one head of 64 over 512 cached positions (GQA layout:
// 4 KV heads side by side), in ns per position.
func BenchmarkAttend(b *testing.B) {
	r := rand.New(rand.NewPCG(25, 26))
	const hd, n = 64, 512
	c := newAttnCase(r, hd, n, 4*hd, 0, "random")
	out := make([]float32, hd)
	for _, level := range simdLevels() {
		b.Run(level, func(b *testing.B) {
			defer setSIMD(level)()
			for b.Loop() {
				Attend(out, c.q, c.k, c.v, n, 4*hd, c.scale)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/pos")
		})
	}
}

// TestAttendBlocksMatchesAttend: the same rows, contiguous or in blocks of any size,
// give the same bits, at every SIMD level.
func TestAttendBlocksMatchesAttend(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, tc := range []struct{ hd, heads, n, bt int }{{8, 1, 1, 16}, {64, 2, 37, 16}, {72, 3, 100, 7}, {128, 1, 33, 1}, {16, 2, 64, 64},
		// head size 64 in blocks that are the fused kernel's chunks (8 to 64 positions), and one too big to be
		{64, 2, 150, 16}, {64, 1, 200, 64}, {64, 1, 130, 32}, {64, 1, 90, 8}, {64, 1, 140, 128}, {64, 1, 70, 24}} {
		stride := tc.hd * tc.heads
		k, v := make([]uint16, tc.n*stride), make([]uint16, tc.n*stride)
		for i := range k {
			k[i], v[i] = F32ToF16(float32(rng.NormFloat64())), F32ToF16(float32(rng.NormFloat64()))
		}
		var ks, vs [][]uint16
		for b := 0; b*tc.bt < tc.n; b++ {
			// each block its own allocation, the tail block full-sized as in a pool
			kb, vb := make([]uint16, tc.bt*stride), make([]uint16, tc.bt*stride)
			copy(kb, k[b*tc.bt*stride:])
			copy(vb, v[b*tc.bt*stride:])
			ks, vs = append(ks, kb), append(vs, vb)
		}
		q := make([]float32, tc.hd)
		for i := range q {
			q[i] = float32(rng.NormFloat64())
		}
		for _, level := range simdLevels() {
			restore := setSIMD(level)
			for h := 0; h < tc.heads; h++ {
				for n := 1; n <= tc.n; n++ {
					want, got := make([]float32, tc.hd), make([]float32, tc.hd)
					attnSpanReference(want, q, k[h*tc.hd:], v[h*tc.hd:], n, stride, 0.125)
					AttendBlocks(got, q, ks, vs, h*tc.hd, stride, tc.bt, n, 0.125)
					for i := range want {
						if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
							restore()
							t.Fatalf("%+v %s head %d n %d: out[%d] = %v, the reference gives %v", tc, level, h, n, i, got[i], want[i])
						}
					}
				}
			}
			restore()
		}
	}
}

// attnSpanReference is Attend through the pure-Go span.
func attnSpanReference(out, q []float32, k, v []uint16, n, stride int, scale float32) {
	var st attnState
	st.start(q[:len(out)])
	attnSpanGeneric(&st, k, v, n, stride, scale)
	st.finish(out)
}

// BenchmarkAttendBlocks: the same head over a paged cache, in blocks of the engine's
// 16 tokens, of 32 and of 64, against BenchmarkAttend's contiguous rows.
func BenchmarkAttendBlocks(b *testing.B) {
	r := rand.New(rand.NewPCG(25, 26))
	const hd, n, stride = 64, 512, 4 * 64
	c := newAttnCase(r, hd, n, stride, 0, "random")
	out := make([]float32, hd)
	for _, bt := range []int{16, 32, 64} {
		var ks, vs [][]uint16
		for j := 0; j < n; j += bt {
			end := min((j+bt)*stride, len(c.k))
			ks, vs = append(ks, c.k[j*stride:end]), append(vs, c.v[j*stride:min((j+bt)*stride, len(c.v))])
		}
		b.Run(fmt.Sprintf("bt%d", bt), func(b *testing.B) {
			for b.Loop() {
				AttendBlocks(out, c.q, ks, vs, 0, stride, bt, n, c.scale)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/pos")
		})
	}
}
