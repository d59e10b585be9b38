//go:build !purego

package kernels

import "unsafe"

// dot0Tiles is fastTokens for Q8_0, Q4_0 and Q5_0 at the AVX2 level (no
// AVX-512): rows [r, r+4) for tokens [t0, t0+nt) through the 4-row × 4-token
// tiles (dotQ8_0AVX2r4t4 …, _asm/dot0tiles.go; Q4_0 and Q5_0 8 tokens a call
// while 8 are left, dotQ4_0AVX2r4t8 …), the last one to three tokens with
// earlier ones again (the same bits), or 0 if fewer than 4 rows or 4 tokens are
// left (dot0Rows then). Every output has the one-token kernel's bits.
func (m *matMul) dot0Tiles(r, hi, t0, nt int) int {
	if r+4 > hi || nt < 4 {
		return 0
	}
	var k, k8 func(x *byte, xs int, y *byte, ys int, nb int, out *float32, os int)
	switch m.w.Type {
	case Q8_0:
		k = dotQ8_0AVX2r4t4
	case Q4_0:
		k, k8 = dotQ4_0AVX2r4t4, dotQ4_0AVX2r4t8
	case Q5_0:
		k, k8 = dotQ5_0AVX2r4t4, dotQ5_0AVX2r4t8
	default:
		return 0
	}
	a, rows := m.a, m.w.Rows
	nb := a.cols / qk0
	if nb == 0 {
		return 0
	}
	end := t0 + nt
	_ = m.w.Data[(r+4)*m.rb-1]
	_ = a.q8[end*nb-1]
	_ = m.dst[(end-1)*rows+r+3]
	ys := nb * int(unsafe.Sizeof(q8Block{}))
	t := t0
	if k8 != nil {
		for ; t+8 <= end; t += 8 {
			k8(&m.w.Data[r*m.rb], m.rb, (*byte)(unsafe.Pointer(&a.q8[t*nb])), ys, nb, &m.dst[t*rows+r], 4*rows)
		}
	}
	for ; t < end; t += 4 {
		t = min(t, end-4) // the last tokens with earlier ones again
		k(&m.w.Data[r*m.rb], m.rb, (*byte)(unsafe.Pointer(&a.q8[t*nb])), ys, nb, &m.dst[t*rows+r], 4*rows)
	}
	return 4
}
