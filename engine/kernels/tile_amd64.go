//go:build !purego

package kernels

import "unsafe"

// The tile kernels (AVX-512): eight weight rows against one token (decoding), one
// row against 16, 8 or 4 tokens (a prompt). Every output has the bits of the
// single-row kernel.

type tileKernel func(x *byte, rb int, y *byte, ys int, yd *float32, yds int, nb int, out *float32, os int)

// fastRows computes dst[r] for the rows of [lo, hi) it has a multi-row kernel for
// (one token), and returns the first row it left.
func (m *matMul) fastRows(lo, hi int) int {
	if !useAVX512 {
		return lo
	}
	var k tileKernel
	switch m.w.Type {
	case Q4_K:
		k = dotQ4KAVX512r8t1
	case Q6_K:
		k = dotQ6KAVX512r8t1
	default:
		return lo
	}
	nb := m.a.cols / qkK
	y := (*byte)(unsafe.Pointer(&m.a.q8k[0]))
	_ = m.a.q8k[nb-1]
	r := lo
	for ; r+8 <= hi; r += 8 {
		_ = m.w.Data[(r+8)*m.rb-1]
		_ = m.dst[r+7]
		k(&m.w.Data[r*m.rb], m.rb, y, 0, nil, 0, nb, &m.dst[r], 0)
	}
	return r
}

// fastTokens computes the outputs of row r for tokens [t0, t0+nt) if it has
// kernels for the row's type, and reports whether it did.
func (m *matMul) fastTokens(r, t0, nt int) bool {
	if !useAVX512 {
		return false
	}
	var k16, k8, k4 tileKernel
	var one func([]byte, []q8KBlock) float32
	switch m.w.Type {
	case Q4_K:
		k16, k8, k4, one = dotQ4KAVX512r1t16, dotQ4KAVX512r1t8, dotQ4KAVX512r1t4, dotQ4KRow
	case Q6_K:
		k16, k8, k4, one = dotQ6KAVX512r1t16, dotQ6KAVX512r1t8, dotQ6KAVX512r1t4, dotQ6KRow
	default:
		return false
	}
	a, rows := m.a, m.w.Rows
	nb := a.cols / qkK
	row := m.w.Data[r*m.rb : (r+1)*m.rb]
	_ = row[nb*m.w.Type.BlockBytes()-1]
	ys := nb * int(unsafe.Sizeof(q8KBlock{}))
	t, end := t0, t0+nt
	_ = a.q8k[end*nb-1]
	_ = a.ydT[(nb-1)*a.rows+end-1]
	_ = m.dst[(end-1)*rows+r]
	for _, g := range [...]struct {
		n int
		k tileKernel
	}{{16, k16}, {8, k8}, {4, k4}} {
		for ; t+g.n <= end; t += g.n {
			g.k(&row[0], 0, (*byte)(unsafe.Pointer(&a.q8k[t*nb])), ys, &a.ydT[t], 4*a.rows, nb, &m.dst[t*rows+r], rows)
		}
	}
	for ; t < end; t++ {
		m.dst[t*rows+r] = one(row, a.q8k[t*nb:(t+1)*nb])
	}
	return true
}
