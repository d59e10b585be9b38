//go:build !purego

package kernels

import "math"

// attnChunk is how many positions the assembly takes through each of its three
// steps at a time (scores, softmax factors, accumulator update).
const attnChunk = 64

// span adds positions 0..n-1 (keys and values at k[j*stride:] and v[j*stride:])
// to the state, through the assembly when the head size is a multiple of 8: the
// bits of attnSpanGeneric.
func (st *attnState) span(k, v []uint16, n, stride int, scale float32) {
	hd := st.hd
	if !useAVX2 || hd%8 != 0 || hd == 0 || n <= 0 {
		attnSpanGeneric(st, k, v, n, stride, scale)
		return
	}
	_ = k[(n-1)*stride+hd-1]
	_ = v[(n-1)*stride+hd-1]
	// Two score buffers: the fused kernel (head size 64, AVX-512) writes the next
	// chunk's scores while it updates the accumulator with this one's.
	var buf [2][attnChunk]float32
	var mask [attnChunk / 8]uint8
	qr := &st.qr()[0]
	cur, ready := 0, false
	for j0 := 0; j0 < n; j0 += attnChunk {
		m := min(attnChunk, n-j0)
		e := &buf[cur]
		if !ready {
			attnScoresF16(&k[j0*stride], qr, hd, m, stride, scale, &e[0])
		}
		if useAVX512 {
			for i := m; i < (m+15)&^15; i++ {
				e[i] = float32(math.Inf(-1))
			}
			attnExpF16AVX512(&e[0], m, &st.mx, &mask[0])
		} else {
			for i := m; i < (m+7)&^7; i++ {
				e[i] = float32(math.Inf(-1))
			}
			attnExpF16(&e[0], m, &st.mx, &mask[0])
		}
		var bits uint64
		for i, b := range mask {
			bits |= uint64(b) << (8 * i)
		}
		j1 := j0 + attnChunk
		m1 := min(attnChunk, n-j1)
		switch {
		case useAVX512 && hd == 64 && m == attnChunk && m1 >= 8:
			next := &buf[cur^1]
			nsc := m1 &^ 7
			attnFusedF16AVX512(&st.acc()[0], &v[j0*stride], &e[0], bits, &st.sum, &k[j1*stride], qr, nsc, stride, scale, &next[0])
			if nsc < m1 {
				attnScoresF16(&k[(j1+nsc)*stride], qr, hd, m1-nsc, stride, scale, &next[nsc])
			}
			cur, ready = cur^1, true
			continue
		case useAVX512:
			attnAccumF16AVX512(&st.acc()[0], &v[j0*stride], hd, m, stride, &e[0], bits, &st.sum)
		default:
			attnAccumF16(&st.acc()[0], &v[j0*stride], hd, m, stride, &e[0], bits, &st.sum)
		}
		ready = false
	}
}
