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

// f32Tokens is floatTokens for F32 weights with AVX2 and at least 8 columns:
// dotF32AVX512t6/t4/t2 (AVX-512) or dotF32AVX2t3/t2 take the largest multiple
// of 8 columns in dotF32AVX2's order, and addF32Tail the last cols%8 of each
// token, as dotF32Row does, so every output has dotF32Row's bits.
func (m *matMul) f32Tokens(r, hi, t0, nt int) int {
	a := m.a
	cols := a.cols
	n8 := cols &^ 7
	if !useAVX2 || n8 == 0 || nt < 2 || r >= hi {
		return 0
	}
	rows, end := m.w.Rows, t0+nt
	_ = m.dst[(end-1)*rows+hi-1]
	_ = m.w.Data[hi*m.rb-1]
	_ = a.f[end*cols-1]
	ys, os := 4*cols, 4*rows
	for t := t0; t < end; {
		var n int
		if useAVX512 {
			n = floatGroup(end-t, nt)
		} else {
			n = min(3, max(2, end-t)) // a last single token again with the one before
		}
		s := min(t, end-n)
		y := (*float32)(unsafe.Pointer(&a.f[s*cols]))
		for q := r; q < hi; q++ {
			x, o := &m.w.Data[q*m.rb], &m.dst[s*rows+q]
			switch {
			case !useAVX512 && n == 3:
				dotF32AVX2t3(x, y, ys, n8, o, os)
			case !useAVX512:
				dotF32AVX2t2(x, y, ys, n8, o, os)
			case n == 6:
				dotF32AVX512t6(x, y, ys, n8, o, os)
			case n == 4:
				dotF32AVX512t4(x, y, ys, n8, o, os)
			default:
				dotF32AVX512t2(x, y, ys, n8, o, os)
			}
			if n8 < cols {
				row := m.w.Data[q*m.rb : (q+1)*m.rb]
				for i := s; i < s+n; i++ {
					d := &m.dst[i*rows+q]
					*d = addF32Tail(*d, row, a.f[i*cols:(i+1)*cols], n8)
				}
			}
		}
		t = s + n
	}
	return hi - r
}
