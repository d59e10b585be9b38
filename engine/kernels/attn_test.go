package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The attention loops (assembly where the CPU has it) give the reference's bits, for
// every length around the vector width, on slices that start anywhere.
func TestAttnLoopsMatchReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	f16s := func(n int, scale float64) []uint16 {
		out := make([]uint16, n+3)
		for i := range out {
			out[i] = F32ToF16(float32(r.NormFloat64() * scale))
		}
		return out
	}
	for n := 0; n <= 70; n++ {
		for off := 0; off < 3; off++ {
			k := f16s(n, 1)[off : off+n]
			q := make([]float32, n+off)[off:]
			for i := range q {
				q[i] = RoundF16(float32(r.NormFloat64()))
			}
			var got, want [8]float32
			for l := range got {
				got[l] = float32(l) * 0.25
				want[l] = got[l]
			}
			attnLanes(k, q, &got)
			attnLanesGeneric(k, q, &want)
			if got != want {
				t.Fatalf("attnLanes n=%d off=%d: %v, want %v", n, off, got, want)
			}
			s := float32(math.Exp(-r.Float64() * 3))
			acc := f16s(n, 4)[off : off+n]
			v := f16s(n, 1)[off : off+n]
			ref := append([]uint16(nil), acc...)
			guard := append([]uint16(nil), acc[:cap(acc)][n:]...)
			attnMad(acc, v, s)
			attnMadGeneric(ref, v, s)
			for i := range acc {
				if acc[i] != ref[i] {
					t.Fatalf("attnMad n=%d off=%d i=%d: %#x, want %#x", n, off, i, acc[i], ref[i])
				}
			}
			attnScale(acc, s)
			attnScaleGeneric(ref, s)
			for i := range acc {
				if acc[i] != ref[i] {
					t.Fatalf("attnScale n=%d off=%d i=%d: %#x, want %#x", n, off, i, acc[i], ref[i])
				}
			}
			for i, g := range acc[:cap(acc)][n:] {
				if g != guard[i] {
					t.Fatalf("n=%d off=%d: wrote past the slice at %d", n, off, n+i)
				}
			}
		}
	}
}

// TestAttendBlocksMatchesAttend: the same rows, contiguous or in blocks of any size,
// give the same bits.
func TestAttendBlocksMatchesAttend(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, tc := range []struct{ hd, heads, n, bt int }{{8, 1, 1, 16}, {64, 2, 37, 16}, {72, 3, 100, 7}, {128, 1, 33, 1}, {16, 2, 64, 64}} {
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
		for h := 0; h < tc.heads; h++ {
			for n := 1; n <= tc.n; n++ {
				want, got := make([]float32, tc.hd), make([]float32, tc.hd)
				Attend(want, q, k[h*tc.hd:], v[h*tc.hd:], n, stride, 0.125)
				AttendBlocks(got, q, ks, vs, h*tc.hd, stride, tc.bt, n, 0.125)
				for i := range want {
					if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
						t.Fatalf("%+v head %d n %d: out[%d] = %v, Attend gives %v", tc, h, n, i, got[i], want[i])
					}
				}
			}
		}
	}
}
