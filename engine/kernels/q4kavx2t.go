package kernels

import "unsafe"

// acts.q8kA: the Q8_K activations in the layout of the AVX2 few-token Q4_K
// kernels (dotQ4KAVX2t2 … t9, q4kavx2t_amd64.go). Each block is q8k's with its
// quants reordered so that the kernels' one 4×4 dword transpose per weight block
// lines a token's quants up with the nibbles of every sub-block pair.

// permuteQ4KAVX2 writes a block's quants in q8kA's order: the 32 bytes at 64c+32h
// (c < 4, h < 2) hold, in dword i of their 16-byte lane L, the quants
// 64i+32h+16L+4c … +3 (sub-block 2i+h, quants 16L+4c … 16L+4c+3). So the bytes
// at 64c hold the quants of the even sub-blocks that the low nibbles of the
// transposed weights' register c multiply, those at 64c+32 the odd ones'.
func permuteQ4KAVX2(dst, qs *[qkK]int8) {
	d := (*[qkK / 4]uint32)(unsafe.Pointer(dst))
	q := (*[qkK / 4]uint32)(unsafe.Pointer(qs))
	for o, s := range q4kAVX2Perm {
		d[o] = q[s]
	}
}

// q4kAVX2Perm is permuteQ4KAVX2's order by dwords: dword o of the permuted
// block is dword q4kAVX2Perm[o] of the quants.
var q4kAVX2Perm = func() (p [qkK / 4]uint8) {
	for c := 0; c < 4; c++ {
		for h := 0; h < 2; h++ {
			for L := 0; L < 2; L++ {
				for i := 0; i < 4; i++ {
					p[(64*c+32*h+16*L+4*i)/4] = uint8((64*i + 32*h + 16*L + 4*c) / 4)
				}
			}
		}
	}
	return p
}()

// layoutQ4KAVX2 fills a.q8kA from a.q8k: the same blocks, quants permuted.
func (a *acts) layoutQ4KAVX2(nb, rows int) {
	a.q8kA = grow(a.q8kA, rows*nb)
	for i := range rows * nb {
		y := &a.q8k[i]
		a.q8kA[i].d, a.q8kA[i].bsums = y.d, y.bsums
		permuteQ4KAVX2(&a.q8kA[i].qs, &y.qs)
	}
}
