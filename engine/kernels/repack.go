package kernels

import (
	"encoding/binary"
	"sync"
)

// Repacking for prompts. Q5_0 and IQ4_NL blocks meet the same activations as Q8_0
// (Q8_0 blocks, vec_dot_type Q8_0) and their dot products have the same form: one
// integer sum of 32 products of int8-sized values, times f16(d)·y.d, blocks summed
// in order. A block of either type is therefore exactly a Q8_0 block (the same d,
// the 32 values as int8: q−16 for Q5_0, the table's level for IQ4_NL), and the
// Q8_0 kernels give the type's reference bits (TestRepackQ8_0MatchesReference).
// MatMul uses this for batches of tokens where the Q8_0 outer-product kernels
// exist: each group of 16 weight rows is unpacked once into a scratch buffer and
// then meets every token of the batch, so the unpacking's cost is shared by all
// of them. One token (decoding) keeps the type's own row kernel.

// repacksToQ8_0 reports whether t's blocks repack into Q8_0 blocks.
func repacksToQ8_0(t Type) bool { return t == Q5_0 || t == IQ4_NL }

// repackRowQ8_0 writes the nb blocks of row (type t, repacksToQ8_0) to dst as nb
// Q8_0 blocks (34 bytes each).
func repackRowQ8_0(dst []byte, t Type, row []byte, nb int) {
	switch t {
	case Q5_0:
		// Eight values at a time: the nibble, and 0xF0 where the value's fifth
		// bit is clear; that is q−16 as int8 (q < 16: q|0xF0; q ≥ 16: q&0xF).
		_, _ = dst[nb*34-1], row[nb*22-1]
		const nib = 0x0f0f0f0f0f0f0f0f
		for b := 0; b < nb; b++ {
			src, out := row[b*22:b*22+22], dst[b*34:b*34+34]
			out[0], out[1] = src[0], src[1]
			qh := binary.LittleEndian.Uint32(src[2:6])
			lo, hi := binary.LittleEndian.Uint64(src[6:14]), binary.LittleEndian.Uint64(src[14:22])
			binary.LittleEndian.PutUint64(out[2:10], lo&nib|q5Spread[qh&0xff])
			binary.LittleEndian.PutUint64(out[10:18], hi&nib|q5Spread[qh>>8&0xff])
			binary.LittleEndian.PutUint64(out[18:26], lo>>4&nib|q5Spread[qh>>16&0xff])
			binary.LittleEndian.PutUint64(out[26:34], hi>>4&nib|q5Spread[qh>>24])
		}
	case IQ4_NL:
		_, _ = dst[nb*34-1], row[nb*18-1]
		for b := 0; b < nb; b++ {
			src, out := row[b*18:b*18+18], dst[b*34:b*34+34]
			out[0], out[1] = src[0], src[1]
			q := out[2:34]
			for j, v := range src[2:18] {
				q[j] = byte(kvaluesIQ4NL[v&0xf])
				q[j+16] = byte(kvaluesIQ4NL[v>>4])
			}
		}
	default:
		panic("kernels: no Q8_0 repacking of " + t.String())
	}
}

// repackBufs holds the scratch rows of the goroutines running repacked products.
var repackBufs = sync.Pool{New: func() any { return new([]byte) }}

// q5Spread[b] has byte i 0xF0 where bit i of b is clear, 0 where it is set.
var q5Spread = func() (t [256]uint64) {
	for b := range t {
		for i := 0; i < 8; i++ {
			if b>>i&1 == 0 {
				t[b] |= 0xF0 << (8 * i)
			}
		}
	}
	return t
}()
