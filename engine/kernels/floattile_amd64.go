//go:build !purego

package kernels

import "unsafe"

// floatTokens computes, for F16 or BF16 weights with AVX-512 and a multiple of
// 64 columns, the outputs of rows [r, hi) for tokens [t0, t0+nt) (nt ≥ 2) and
// returns hi−r; otherwise it returns 0. The tokens go in groups of 6 (then 4,
// then 2; a short last group is moved back over tokens already done, which get
// the same bits again), each group through every row before the next group, so
// that a group's activations stay in the core's cache while the rows go by.
// The kernels (dotF16AVX512t6 …) convert each weight once for the group's
// tokens and give every output dotF16Row's (dotBF16Row's) bits.
func (m *matMul) floatTokens(r, hi, t0, nt int) int {
	a, typ := m.a, m.w.Type
	cols := a.cols
	if !useAVX512 || (typ != F16 && typ != BF16) || cols%64 != 0 || cols == 0 || nt < 2 || r >= hi {
		return 0
	}
	rows, end := m.w.Rows, t0+nt
	_ = m.dst[(end-1)*rows+hi-1]
	_ = m.w.Data[hi*m.rb-1]
	_ = a.f[end*cols-1]
	ys, os := 4*cols, 4*rows
	for t := t0; t < end; {
		n := floatGroup(end-t, nt)
		s := min(t, end-n)
		y := (*float32)(unsafe.Pointer(&a.f[s*cols]))
		for q := r; q < hi; q++ {
			x, o := &m.w.Data[q*m.rb], &m.dst[s*rows+q]
			switch {
			case typ == F16 && n == 6:
				dotF16AVX512t6(x, y, ys, cols, o, os)
			case typ == F16 && n == 4:
				dotF16AVX512t4(x, y, ys, cols, o, os)
			case typ == F16:
				dotF16AVX512t2(x, y, ys, cols, o, os)
			case n == 6:
				dotBF16AVX512t6(x, y, ys, cols, o, os)
			case n == 4:
				dotBF16AVX512t4(x, y, ys, cols, o, os)
			default:
				dotBF16AVX512t2(x, y, ys, cols, o, os)
			}
		}
		t = s + n
	}
	return hi - r
}

// floatGroup is the number of tokens (6, 4 or 2) floatTokens takes next with
// rem tokens left of a chunk of nt (2 ≤ nt): 6 while at least 6 are left,
// otherwise the smallest group covering rem that the chunk holds, or else the
// largest that rem holds.
func floatGroup(rem, nt int) int {
	if rem >= 6 {
		return 6
	}
	for _, n := range [...]int{2, 4, 6} {
		if n >= rem && n <= nt {
			return n
		}
	}
	if rem >= 4 {
		return 4
	}
	return 2
}
