//go:build !purego

package kernels

// iq1mWGrid is the table of IQ1_M's AVX2 row kernels (dotIQ1MAVX2 and its two-
// and four-token forms, _asm/iq1m2.go): entry i (the 8 low bits of a group's
// grid index from qs, and above them its 4 bits of qh: the index's top 3 bits
// and the shift's sign) holds the 8 bytes 8·grid + delta of the group's
// weights, delta -1 where the sign bit (bit 11) is set, else +1; so
// Σ ls·w·q over a block is dotIQ1MBlock's 8·sumi1 + sumi2.
var iq1mWGrid = func() (t [4096]uint64) {
	for i := range t {
		g := iq1sGrid[i&2047]
		delta := int8(1)
		if i&2048 != 0 {
			delta = -1
		}
		var e uint64
		for j := 0; j < 8; j++ {
			w := 8*int8(g>>(8*j)) + delta
			e |= uint64(uint8(w)) << (8 * j)
		}
		t[i] = e
	}
	return
}()
