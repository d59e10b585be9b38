package kernels

import (
	"encoding/binary"
	"math/bits"
)

// iq2SignMask[s] has byte m all ones where bit m of s is set: the negated
// values of a grid entry under its sign byte.
var iq2SignMask = func() (t [256]uint64) {
	for s := range t {
		for m := 0; m < 8; m++ {
			if s>>m&1 != 0 {
				t[s] |= 0xff << (8 * m)
			}
		}
	}
	return
}()

// iq2OuterBias8 is iq2OuterBias in every byte.
const iq2OuterBias8 = 0x0101010101010101 * iq2OuterBias

// decodeIQ2OuterRowFast is decodeIQ2OuterRow, eight values at a time: a grid
// entry's bytes g (each ≤ 43) become 43+g or 43−g under its signs (no carry
// or borrow crosses a byte), stored as the two dwords of their chunks. The
// same bytes and scales.
func decodeIQ2OuterRowFast(typ Type, w []byte, dx []float32, row []byte, nb, i int) {
	bb := typ.BlockBytes()
	_ = row[nb*bb-1]
	_ = w[nb*iqPanelGroup*iq2OuterRec-1]
	_ = dx[(nb-1)*iqPanelGroup+i]
	for b := 0; b < nb; b++ {
		blk := row[b*bb : (b+1)*bb : (b+1)*bb]
		dx[b*iqPanelGroup+i] = f16Table[le16(blk)]
		p := w[b*iqPanelGroup*iq2OuterRec : (b+1)*iqPanelGroup*iq2OuterRec]
		for ib := 0; ib < 8; ib++ {
			var s0, s1 uint32
			switch typ {
			case IQ2_XXS:
				s := 2*(binary.LittleEndian.Uint32(blk[2+8*ib+4:])>>28) + 1
				s0, s1 = s, s
			case IQ2_XS:
				s0, s1 = 2*uint32(blk[66+ib]&0xf)+1, 2*uint32(blk[66+ib]>>4)+1
			case IQ2_S:
				s0, s1 = 2*uint32(blk[74+ib]&0xf)+1, 2*uint32(blk[74+ib]>>4)+1
			}
			binary.LittleEndian.PutUint32(p[(2*ib)*iq2OuterRec+qkK+4*i:], s0)
			binary.LittleEndian.PutUint32(p[(2*ib+1)*iq2OuterRec+qkK+4*i:], s1)
			var sg uint32
			if typ == IQ2_XXS {
				sg = binary.LittleEndian.Uint32(blk[2+8*ib+4:])
			}
			for l := 0; l < 4; l++ {
				var grid uint64
				var signs uint8
				switch typ {
				case IQ2_XXS:
					x := sg >> (7 * l) & 127
					grid, signs = iq2xxsGrid[blk[2+8*ib+l]], uint8(x)|uint8(bits.OnesCount32(x)&1)<<7
				case IQ2_XS:
					q := uint32(blk[2+2*(4*ib+l)]) | uint32(blk[3+2*(4*ib+l)])<<8
					x := q >> 9
					grid, signs = iq2xsGrid[q&511], uint8(x)|uint8(bits.OnesCount32(x)&1)<<7
				case IQ2_S:
					grid, signs = iq2sGrid[iq2SIndex(blk, ib, l)], blk[34+4*ib+l]
				}
				m := iq2SignMask[signs]
				u := (iq2OuterBias8+grid)&^m | (iq2OuterBias8-grid)&m
				// Values 32ib+8l+k: group 2ib+l/2, chunks 2(l%2) and 2(l%2)+1.
				o := (2*ib+l/2)*iq2OuterRec + 128*(l%2) + 4*i
				binary.LittleEndian.PutUint32(p[o:], uint32(u))
				binary.LittleEndian.PutUint32(p[o+64:], uint32(u>>32))
			}
		}
	}
}
