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

// iq2AVX2Blk is the bytes of a block of the AVX2 panels (iq2OuterAVX2r16t4):
// the AVX-512 panels' 16 records with the values signed (v, not v+43), then
// the 16 rows' corrections −128·Σ_j s_j·Σv_j (the sum over group j's values)
// as int32: the kernel multiplies v by the token's quants plus 128.
const iq2AVX2Blk = iqPanelGroup*iq2OuterRec + 64

// byteSum8 is the sum of the 8 bytes of x.
func byteSum8(x uint64) int32 {
	x = x&0x00ff00ff00ff00ff + x>>8&0x00ff00ff00ff00ff
	return int32(x * 0x0001000100010001 >> 48)
}

// decodeIQ2OuterRowFast is decodeIQ2OuterRow, eight values at a time: a grid
// entry's bytes g (each ≤ 43) become 43+g or 43−g under its signs (no carry
// or borrow crosses a byte), stored as the two dwords of their chunks. The
// same bytes and scales.
func decodeIQ2OuterRowFast(typ Type, w []byte, dx []float32, row []byte, nb, i int) {
	decodeIQ2Row(typ, w, dx, row, nb, i, false)
}

// decodeIQ2PanelRowAVX2 writes the nb blocks of row into row slot i of the
// AVX2 panel w (block b at bytes b·iq2AVX2Blk): decodeIQ2OuterRow's records
// with v in place of v+43, and the row's correction of each block; f16(d) as
// decodeIQ2OuterRow.
func decodeIQ2PanelRowAVX2(typ Type, w []byte, dx []float32, row []byte, nb, i int) {
	decodeIQ2Row(typ, w, dx, row, nb, i, true)
}

// decodeIQ2Row is decodeIQ2OuterRowFast (avx2 false) and
// decodeIQ2PanelRowAVX2 (avx2 true; also IQ3_XXS, whose values, up to 62,
// the biased bytes of the other would not hold).
func decodeIQ2Row(typ Type, w []byte, dx []float32, row []byte, nb, i int, avx2 bool) {
	bb := typ.BlockBytes()
	blkBytes := iqPanelGroup * iq2OuterRec
	if avx2 {
		blkBytes = iq2AVX2Blk
	}
	_ = row[nb*bb-1]
	_ = w[nb*blkBytes-1]
	_ = dx[(nb-1)*iqPanelGroup+i]
	for b := 0; b < nb; b++ {
		blk := row[b*bb : (b+1)*bb : (b+1)*bb]
		dx[b*iqPanelGroup+i] = f16Table[le16(blk)]
		p := w[b*blkBytes : (b+1)*blkBytes]
		var corr int32
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
			case IQ3_XXS:
				s := 2*(binary.LittleEndian.Uint32(blk[66+4*ib:])>>28) + 1
				s0, s1 = s, s
			}
			binary.LittleEndian.PutUint32(p[(2*ib)*iq2OuterRec+qkK+4*i:], s0)
			binary.LittleEndian.PutUint32(p[(2*ib+1)*iq2OuterRec+qkK+4*i:], s1)
			var sg uint32
			switch typ {
			case IQ2_XXS:
				sg = binary.LittleEndian.Uint32(blk[2+8*ib+4:])
			case IQ3_XXS:
				sg = binary.LittleEndian.Uint32(blk[66+4*ib:])
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
				case IQ3_XXS: // two grid entries of 4 values under one sign byte
					x := sg >> (7 * l) & 127
					grid = uint64(iq3xxsGrid[blk[2+8*ib+2*l]]) | uint64(iq3xxsGrid[blk[3+8*ib+2*l]])<<32
					signs = uint8(x) | uint8(bits.OnesCount32(x)&1)<<7
				}
				m := iq2SignMask[signs]
				var u uint64
				if avx2 {
					// −g is ^g+1 in each byte (g ≥ 4: no carry crosses a byte).
					u = (grid ^ m) + m&0x0101010101010101
					s := s0
					if l >= 2 {
						s = s1
					}
					corr -= 128 * int32(s) * (byteSum8(grid&^m) - byteSum8(grid&m))
				} else {
					u = (iq2OuterBias8+grid)&^m | (iq2OuterBias8-grid)&m
				}
				// Values 32ib+8l+k: group 2ib+l/2, chunks 2(l%2) and 2(l%2)+1.
				o := (2*ib+l/2)*iq2OuterRec + 128*(l%2) + 4*i
				binary.LittleEndian.PutUint32(p[o:], uint32(u))
				binary.LittleEndian.PutUint32(p[o+64:], uint32(u>>32))
			}
		}
		if avx2 {
			binary.LittleEndian.PutUint32(p[iqPanelGroup*iq2OuterRec+4*i:], uint32(corr))
		}
	}
}
