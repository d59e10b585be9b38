//go:build !purego

package kernels

import "unsafe"

// The tile kernels (AVX-512): eight weight rows against one token (decoding), one
// row against 16, 8 or 4 tokens (a prompt). Every output has the bits of the
// single-row kernel.

// q8Pair is a pair of Q8_0 activation blocks as the prompt tile kernels of Q8_0
// and Q4_0 read them (_asm/tile0.go): the 64 quants with the blocks' groups of 4
// interleaved (the even block's group i, then the odd block's), −8·Σ of each group,
// and the two scales; a last odd block's pair is padded with zeros. 128 bytes, so
// that the quants of an aligned array stay on one cache line.
type q8Pair struct {
	qs [2 * qk0]int8
	s  [16]int16
	d  [2]float32
	_  [6]float32
}

// preparePairs makes a.q8p from a.q8 (nb blocks per row: (nb+1)/2 pairs).
func (a *acts) preparePairs() {
	if !useAVX512 {
		return
	}
	nb := a.cols / qk0
	np := (nb + 1) / 2
	a.q8p = grow(a.q8p, a.rows*np)
	for t := 0; t < a.rows; t++ {
		q8PairsAVX512((*byte)(unsafe.Pointer(&a.q8[t*nb])), nb, (*byte)(unsafe.Pointer(&a.q8p[t*np])))
	}
}

type tile0Rows func(x *byte, rb int, y *byte, nb int, out *float32)

type tile0Tokens func(x *byte, y *byte, ys int, nb int, out *float32, os int)

type tileKernel func(x *byte, rb int, y *byte, ys int, yd *float32, yds int, nb int, out *float32, os int)

// fastRows computes dst[r] for the rows of [lo, hi) it has a multi-row kernel for
// (one token), and returns the first row it left.
func (m *matMul) fastRows(lo, hi int) int {
	if !useAVX512 {
		return lo
	}
	var k tileKernel
	var k0 tile0Rows
	switch m.w.Type {
	case Q8_0:
		k0 = dotQ8_0AVX512r8t1
	case Q4_0:
		k0 = dotQ4_0AVX512r8t1
	case Q4_K:
		k = dotQ4KAVX512r8t1
	case Q6_K:
		k = dotQ6KAVX512r8t1
	default:
		return lo
	}
	r := lo
	if k0 != nil {
		nb := m.a.cols / qk0
		y := (*byte)(unsafe.Pointer(&m.a.q8[0]))
		_ = m.a.q8[nb-1]
		for ; r+8 <= hi; r += 8 {
			_ = m.w.Data[(r+8)*m.rb-1]
			_ = m.dst[r+7]
			k0(&m.w.Data[r*m.rb], m.rb, y, nb, &m.dst[r])
		}
		return r
	}
	nb := m.a.cols / qkK
	y := (*byte)(unsafe.Pointer(&m.a.q8k[0]))
	_ = m.a.q8k[nb-1]
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
	case Q8_0:
		return m.fastTokens0(r, t0, nt, dotQ8_0AVX512r1t16, dotQ8_0AVX512r1t8, dotQ8_0AVX512r1t4, dotQ8_0Row)
	case Q4_0:
		return m.fastTokens0(r, t0, nt, dotQ4_0AVX512r1t16, dotQ4_0AVX512r1t8, dotQ4_0AVX512r1t4, dotQ4_0Row)
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

// fastTokens0 is fastTokens for Q8_0 and Q4_0 weights.
func (m *matMul) fastTokens0(r, t0, nt int, k16, k8, k4 tile0Tokens, one func([]byte, []q8Block) float32) bool {
	a, rows := m.a, m.w.Rows
	nb := a.cols / qk0
	np := (nb + 1) / 2
	row := m.w.Data[r*m.rb : (r+1)*m.rb]
	_ = row[nb*m.w.Type.BlockBytes()-1]
	ys := np * int(unsafe.Sizeof(q8Pair{}))
	t, end := t0, t0+nt
	_ = a.q8p[end*np-1]
	_ = m.dst[(end-1)*rows+r]
	for _, g := range [...]struct {
		n int
		k tile0Tokens
	}{{16, k16}, {8, k8}, {4, k4}} {
		for ; t+g.n <= end; t += g.n {
			g.k(&row[0], (*byte)(unsafe.Pointer(&a.q8p[t*np])), ys, nb, &m.dst[t*rows+r], rows)
		}
	}
	for ; t < end; t++ {
		m.dst[t*rows+r] = one(row, a.q8[t*nb:(t+1)*nb])
	}
	return true
}
