//go:build !purego

package kernels

import "unsafe"

// q4KX16 runs the packed Q4_K kernel of n ≤ 9 tokens (q4krepack.go): from 5
// tokens on, the kernels take the mins' bsums in pairs from bs (acts.bsT at the
// first token; gs its stride between pairs, in bytes).
func q4KX16(n int, x, y *byte, ys int, bs *int32, gs, nb int, out *float32, os int) {
	switch n {
	case 1:
		dotQ4KX16AVX512t1(x, y, ys, nb, out, os)
	case 2:
		dotQ4KX16AVX512t2(x, y, ys, nb, out, os)
	case 3:
		dotQ4KX16AVX512t3(x, y, ys, nb, out, os)
	case 4:
		dotQ4KX16AVX512t4(x, y, ys, nb, out, os)
	case 5:
		dotQ4KX16AVX512t5(x, y, ys, bs, gs, nb, out, os)
	case 6:
		dotQ4KX16AVX512t6(x, y, ys, bs, gs, nb, out, os)
	case 7:
		dotQ4KX16AVX512t7(x, y, ys, bs, gs, nb, out, os)
	case 8:
		dotQ4KX16AVX512t8(x, y, ys, bs, gs, nb, out, os)
	case 9:
		dotQ4KX16AVX512t9(x, y, ys, bs, gs, nb, out, os)
	default:
		panic("kernels: no packed Q4_K kernel of this many tokens")
	}
}

// PacksQ4K reports whether Q4_K matrices are worth packing (PackQ4K): whether
// the packed kernels run here (AVX-512 with VNNI).
func PacksQ4K() bool { return useAVX512 }

// packedRows computes the outputs of m's packed rows in [lo, hi) and returns
// the first row it left (min(hi, Packed)): groups of 16 rows through the
// packed kernels, up to 9 tokens at once (more in chunks of 8), a group only
// partly in [lo, hi) into a scratch first. Rows in blocks of about blockBytes,
// as rows does, when the tokens take more than one chunk.
func (m *matMul) packedRows(lo, hi int) int {
	end := min(hi, m.w.Packed)
	if !useAVX512 {
		m.packedRowsGeneric(lo, end)
		return end
	}
	a, rows := m.a, m.w.Rows
	nb := a.cols / qkK
	gb := 16 * m.rb
	ys := nb * int(unsafe.Sizeof(q8KBlock{}))
	_ = a.q8k[m.nTok*nb-1]
	_ = m.dst[(m.nTok-1)*rows+end-1]
	g0 := lo / 16 * 16
	block := end - g0
	if m.nTok > 9 {
		block = max(16, blockBytes/gb*16)
	}
	var tmp [9 * 16]float32
	for b0 := g0; b0 < end; b0 += block {
		b1 := min(end, b0+block)
		for t := 0; t < m.nTok; {
			n := m.nTok - t
			if n > 9 {
				n = 8
			}
			y := (*byte)(unsafe.Pointer(&a.q8k[t*nb]))
			var bs *int32
			if n >= 5 {
				_ = a.bsT[(4*nb-1)*a.yds+t+n-1]
				bs = &a.bsT[t]
			}
			gs := 4 * a.yds
			for g := b0; g < b1; g += 16 {
				_ = m.w.Data[(g/16+1)*gb-1]
				x := &m.w.Data[g/16*gb]
				if g >= lo && g+16 <= end {
					q4KX16(n, x, y, ys, bs, gs, nb, &m.dst[t*rows+g], rows)
					continue
				}
				q4KX16(n, x, y, ys, bs, gs, nb, &tmp[0], 16)
				for i := 0; i < n; i++ {
					for r := max(lo, g); r < min(end, g+16); r++ {
						m.dst[(t+i)*rows+r] = tmp[16*i+r-g]
					}
				}
			}
			t += n
		}
	}
	return end
}
