//go:build !purego

package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// attnExpf's special cases, clamps and every binade (subnormal results too) reach
// the assembly through attnExpF16: scores s against a running maximum of 0 give
// attnExpf(s) (s ≤ 0) or attnExpf(-s).
func TestAttnExpMatchesExpf(t *testing.T) {
	requireSIMD(t, "avx2")
	r := rand.New(rand.NewPCG(23, 24))
	var xs []float32
	for _, x := range []float64{0, -0.0, -87.33654, -87.33655, -87.3365, -88, -100, -103.97, -103.98, -104, -105, -1e30, math.Inf(-1), math.NaN(), -1e-30, -0.5, -1} {
		xs = append(xs, float32(x))
	}
	for i := 0; i < 4000; i++ {
		xs = append(xs, -float32(math.Abs(r.NormFloat64()*30)))
	}
	for len(xs)%8 != 0 {
		xs = append(xs, -1)
	}
	// check compares each lane with expf by bits; a NaN score must give a NaN
	// factor (any payload: the only lanes not compared by bits).
	check := func(kernel string, in, out []float32) {
		for l, x := range in {
			got, want := out[l], attnExpf(x)
			if math.IsNaN(float64(x)) {
				if !math.IsNaN(float64(got)) {
					t.Errorf("%s: expf(NaN) = %v (%#x), want NaN", kernel, got, math.Float32bits(got))
				}
				continue
			}
			if math.Float32bits(got) != math.Float32bits(want) {
				t.Errorf("%s: expf(%v): assembly %v (%#x), Go %v (%#x)", kernel, x, got, math.Float32bits(got), want, math.Float32bits(want))
			}
		}
	}
	lanes := map[string]int{}
	for i := 0; i < len(xs); i += 8 {
		var mask [2]uint8
		mx := float32(0)
		if i%16 == 0 && useAVX512 && i+16 <= len(xs) {
			var s16 [16]float32
			copy(s16[:], xs[i:i+16])
			attnExpF16AVX512(&s16[0], 16, &mx, &mask[0])
			check("attnExpF16AVX512", xs[i:i+16], s16[:])
			lanes["attnExpF16AVX512 (avx512)"] += 16
			i += 8
		} else {
			var s [8]float32
			copy(s[:], xs[i:i+8])
			attnExpF16(&s[0], 8, &mx, &mask[0])
			check("attnExpF16", xs[i:i+8], s[:])
			lanes["attnExpF16 (avx2)"] += 8
		}
		if mask != [2]uint8{} || mx != 0 {
			t.Errorf("scores ≤ 0 against 0: mask %#x, max %v", mask, mx)
		}
	}
	// Which kernels ran: the AVX-512 one only where its kernels are on (a CPU with
	// AVX-512 and the kernels off fails TestMain through the avx512 tests).
	t.Logf("lanes compared per kernel: %v (AVX-512 kernels on: %v)", lanes, useAVX512)
}

// TestAttnGroupKernelsMatchReference: the group kernels, fused or not, give, for every query of
// the group, the bits of their Go references (attnGroupScoresRef,
// attnGroupAccumRef), for groups of 2 to 4 queries, chunks of 8 to 64 positions,
// rows strided as in a cache of several KV heads, and new maxima at no position,
// some and every one.
func TestAttnGroupKernelsMatchReference(t *testing.T) {
	requireSIMD(t, "avx512")
	r := rand.New(rand.NewPCG(41, 42))
	const hd, stride = attnGroupHD, 3 * attnGroupHD
	for _, nq := range []int{2, 3, 4} {
		for _, n := range []int{8, 16, 24, 40, 64} {
			for _, newMax := range []float64{0, 0.1, 1} {
				k, v := make([]uint16, n*stride), make([]uint16, n*stride)
				for i := range k {
					k[i], v[i] = F32ToF16(float32(r.NormFloat64()*3)), F32ToF16(float32(r.NormFloat64()*2))
				}
				var gr attnGroup
				gr.nq = nq
				qr := make([][]float32, nq)
				for q := range qr {
					qr[q] = make([]float32, hd)
					for i := range qr[q] {
						qr[q][i] = RoundF16(float32(r.NormFloat64()))
					}
					for g := range gr.qd {
						copy(gr.qd[g][q][:8], qr[q][8*g:])
						copy(gr.qd[g][q][8:], qr[q][8*g:])
					}
				}
				// Scores.
				want := make([][]float32, nq)
				for q := range want {
					want[q] = make([]float32, n)
				}
				attnGroupScoresRef(want, qr, k[hd:], n, stride, 0.125)
				switch nq {
				case 2:
					attnTileScores2F16AVX512(&k[hd], &gr.qd[0][0][0], hd, n, stride, 0.125, &gr.e[0][0][0])
				case 3:
					attnTileScores3F16AVX512(&k[hd], &gr.qd[0][0][0], hd, n, stride, 0.125, &gr.e[0][0][0])
				case 4:
					attnTileScores4F16AVX512(&k[hd], &gr.qd[0][0][0], hd, n, stride, 0.125, &gr.e[0][0][0])
				}
				for q := range want {
					for j, w := range want[q] {
						if math.Float32bits(gr.e[0][q][j]) != math.Float32bits(w) {
							t.Fatalf("nq %d n %d: score of query %d position %d: %v, reference %v", nq, n, q, j, gr.e[0][q][j], w)
						}
					}
				}
				// Accumulator updates.
				acc, e := make([][]float32, nq), make([][]float32, nq)
				mask, sum := make([]uint64, nq), make([]float32, nq)
				for q := 0; q < nq; q++ {
					acc[q], e[q] = make([]float32, hd), make([]float32, n)
					for i := range acc[q] {
						acc[q][i] = RoundF16(float32(r.NormFloat64() * 10))
					}
					for j := range e[q] {
						e[q][j] = float32(r.Float64())
						if r.Float64() < newMax {
							mask[q] |= 1 << j
						}
					}
					sum[q] = float32(r.Float64() * 100)
					copy(gr.acc[q][:], acc[q])
					copy(gr.e[0][q][:], e[q])
				}
				copy(gr.bits[:], mask)
				copy(gr.sum[:], sum)
				attnGroupAccumRef(acc, v[hd:], n, stride, e, mask, sum)
				// The fused kernels: the same update, and the scores of n more keys.
				fu := gr
				var part attnPart
				kn := make([]uint16, n*stride)
				for i := range kn {
					kn[i] = F32ToF16(float32(r.NormFloat64() * 3))
				}
				attnGroupScoresRef(want, qr, kn[2*hd:], n, stride, 0.25)
				switch nq {
				case 2:
					attnTileFused2F16AVX512(&fu.acc[0][0], &v[hd], n, stride, &fu.e[0][0][0], &fu.bits[0], &fu.sum[0], &kn[2*hd], &fu.qd[0][0][0], 0.25, &fu.e[1][0][0], &part[0][0][0])
				case 3:
					attnTileFused3F16AVX512(&fu.acc[0][0], &v[hd], n, stride, &fu.e[0][0][0], &fu.bits[0], &fu.sum[0], &kn[2*hd], &fu.qd[0][0][0], 0.25, &fu.e[1][0][0], &part[0][0][0])
				case 4:
					attnTileFused4F16AVX512(&fu.acc[0][0], &v[hd], n, stride, &fu.e[0][0][0], &fu.bits[0], &fu.sum[0], &kn[2*hd], &fu.qd[0][0][0], 0.25, &fu.e[1][0][0], &part[0][0][0])
				}
				for q := 0; q < nq; q++ {
					for j, w := range want[q] {
						if math.Float32bits(fu.e[1][q][j]) != math.Float32bits(w) {
							t.Fatalf("fused nq %d n %d: score of query %d position %d: %v, reference %v", nq, n, q, j, fu.e[1][q][j], w)
						}
					}
					if math.Float32bits(fu.sum[q]) != math.Float32bits(sum[q]) {
						t.Fatalf("fused nq %d n %d new %v: sum of query %d: %v, reference %v", nq, n, newMax, q, fu.sum[q], sum[q])
					}
					for i, w := range acc[q] {
						if math.Float32bits(fu.acc[q][i]) != math.Float32bits(w) {
							t.Fatalf("fused nq %d n %d new %v: acc[%d][%d] = %v, reference %v", nq, n, newMax, q, i, fu.acc[q][i], w)
						}
					}
				}
				switch nq {
				case 2:
					attnTileAccum2F16AVX512(&gr.acc[0][0], &v[hd], n, stride, &gr.e[0][0][0], &gr.bits[0], &gr.sum[0])
				case 3:
					attnTileAccum3F16AVX512(&gr.acc[0][0], &v[hd], n, stride, &gr.e[0][0][0], &gr.bits[0], &gr.sum[0])
				case 4:
					attnTileAccum4F16AVX512(&gr.acc[0][0], &v[hd], n, stride, &gr.e[0][0][0], &gr.bits[0], &gr.sum[0])
				}
				for q := 0; q < nq; q++ {
					if math.Float32bits(gr.sum[q]) != math.Float32bits(sum[q]) {
						t.Fatalf("nq %d n %d new %v: sum of query %d: %v, reference %v", nq, n, newMax, q, gr.sum[q], sum[q])
					}
					for i, w := range acc[q] {
						if math.Float32bits(gr.acc[q][i]) != math.Float32bits(w) {
							t.Fatalf("nq %d n %d new %v: acc[%d][%d] = %v, reference %v", nq, n, newMax, q, i, gr.acc[q][i], w)
						}
					}
				}
			}
		}
	}
}
