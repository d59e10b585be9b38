//go:build !purego

package kernels

import "unsafe"

// q4KX16 are the packed Q4_K kernels by token count (q4krepack.go).
var q4KX16 = [10]func(x *byte, y *byte, ys int, nb int, out *float32, os int){
	1: dotQ4KX16AVX512t1, 2: dotQ4KX16AVX512t2, 3: dotQ4KX16AVX512t3, 4: dotQ4KX16AVX512t4, 5: dotQ4KX16AVX512t5,
	6: dotQ4KX16AVX512t6, 7: dotQ4KX16AVX512t7, 8: dotQ4KX16AVX512t8, 9: dotQ4KX16AVX512t9,
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
			k := q4KX16[n]
			y := (*byte)(unsafe.Pointer(&a.q8k[t*nb]))
			for g := b0; g < b1; g += 16 {
				_ = m.w.Data[(g/16+1)*gb-1]
				x := &m.w.Data[g/16*gb]
				if g >= lo && g+16 <= end {
					k(x, y, ys, nb, &m.dst[t*rows+g], rows)
					continue
				}
				k(x, y, ys, nb, &tmp[0], 16)
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
