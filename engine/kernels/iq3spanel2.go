package kernels

import "encoding/binary"

// IQ3_S byte panels on AVX2 (issue 32: on an AVX2-only CPU the four-token row
// kernels took IQ3_S's prompts at 0.31× llama.cpp's speed, decoding every
// block's grid and signs once per four tokens). A group of iqPanelGroup rows
// is decoded once per MatMul into signed bytes grid × sign (|v| ≤ 15), and
// the tokens' Q8_K quants are bytes q+128 in the same order (acts.q8kB, in
// this order where usesIQ3SAVX2Panel), so that VPMADDUBSW takes them
// (_asm/iq3spanel2.go, 4 rows by 3 tokens a call).
//
// A row's block takes iq3sAVX2Slot bytes: 4 chunks of 64 values, chunk c
// holding sub-blocks 2c and 2c+1 as two 32-byte registers, register p's dword
// m holding values 4m+2p, 4m+2p+1 of sub-block 2c then of 2c+1
// (iq3sAVX2Pos); at iq3sAVX2Scale per chunk the words (sc_2c, sc_2c+1) eight
// times; at iq3sAVX2Corr 8 dwords, lane k's −128·Σ_ib sc_ib·Σ_j v[32ib+4k+j]
// (the bias of the unsigned quants). A chunk's VPMADDUBSW pair, VPADDW and
// VPMADDWD by the scales give dword m = lane m's part of those two
// sub-blocks, so each lane of dotIQ3SRowGeneric's 8 is its exact integer sum
// and the float steps are the row kernel's: the same bits.
const (
	iq3sAVX2Slot  = 416
	iq3sAVX2Scale = 256
	iq3sAVX2Corr  = 384
)

// iq3sPanelsAVX2 is false to take IQ3_S's prompts on AVX2 through the
// four-token row kernels instead (the benchmarks' comparison).
var iq3sPanelsAVX2 = true

// iq3sAVX2Pos is the byte of value q (< 64) of a chunk's two sub-blocks.
func iq3sAVX2Pos(q int) int {
	s, m, j := q/32, q%32/4, q%4
	return 32*(j>>1) + 4*m + 2*s + j&1
}

// iq3sAVX2Q8K fills acts.q8kB in the AVX2 panels' order: block b of token t
// at (b·rows+t)·qkK, the quants as bytes q+128.
func (a *acts) iq3sAVX2Q8K(nb, rows int) {
	a.q8kB = grow(a.q8kB, nb*rows*qkK)
	for t := 0; t < rows; t++ {
		for b := 0; b < nb; b++ {
			dst := a.q8kB[(b*rows+t)*qkK : (b*rows+t+1)*qkK]
			qs := &a.q8k[t*nb+b].qs
			for q := 0; q < qkK; q++ {
				dst[q&^63+iq3sAVX2Pos(q&63)] = byte(qs[q]) ^ 0x80
			}
		}
	}
}

// decodeIQ3SPanelRowAVX2 writes the nb IQ3_S blocks of row into slot i of the
// AVX2 byte panel w (block b at (b·iqPanelGroup+i)·iq3sAVX2Slot) and their
// scales into dx[b·iqPanelGroup+i]: decodeIQ3SPanelRowAVX2Ref's bytes, a
// grid entry at a time (iq3sSign), the words of a lane's dword for both
// sub-blocks of a chunk put together and written 8 bytes at a time.
func decodeIQ3SPanelRowAVX2(w []byte, dx []float32, row []byte, nb, i int) {
	_ = row[nb*110-1]
	_ = w[((nb-1)*iqPanelGroup+i+1)*iq3sAVX2Slot-1]
	_ = dx[(nb-1)*iqPanelGroup+i]
	for b := 0; b < nb; b++ {
		blk := (*[110]byte)(row[b*110 : (b+1)*110])
		dx[b*iqPanelGroup+i] = f16Table[uint16(blk[0])|uint16(blk[1])<<8]
		o := (*[iq3sAVX2Slot]byte)(w[(b*iqPanelGroup+i)*iq3sAVX2Slot:])
		var corr [8]int32
		for ch := 0; ch < 4; ch++ {
			scA := 2*int32(blk[106+ch]&0xf) + 1
			scB := 2*int32(blk[106+ch]>>4) + 1
			for l := 0; l < 4; l++ {
				// Entries 2l and 2l+1 of sub-blocks A = 2ch and B = 2ch+1.
				qhA, qhB := uint32(blk[66+2*ch]), uint32(blk[67+2*ch])
				mA, mB := iq2SignMask[blk[74+8*ch+l]], iq2SignMask[blk[78+8*ch+l]]
				a0, sa0 := iq3sSign(iq3sGrid[uint32(blk[2+16*ch+2*l])|(qhA<<(8-2*l))&256], uint32(mA))
				a1, sa1 := iq3sSign(iq3sGrid[uint32(blk[3+16*ch+2*l])|(qhA<<(7-2*l))&256], uint32(mA>>32))
				b0, sb0 := iq3sSign(iq3sGrid[uint32(blk[10+16*ch+2*l])|(qhB<<(8-2*l))&256], uint32(mB))
				b1, sb1 := iq3sSign(iq3sGrid[uint32(blk[11+16*ch+2*l])|(qhB<<(7-2*l))&256], uint32(mB>>32))
				corr[2*l] -= 128 * (scA*sa0 + scB*sb0)
				corr[2*l+1] -= 128 * (scA*sa1 + scB*sb1)
				u0 := uint64(a0&0xffff) | uint64(b0&0xffff)<<16 | uint64(a1&0xffff)<<32 | uint64(b1&0xffff)<<48
				u1 := uint64(a0>>16) | uint64(b0>>16)<<16 | uint64(a1>>16)<<32 | uint64(b1>>16)<<48
				binary.LittleEndian.PutUint64(o[64*ch+8*l:], u0)
				binary.LittleEndian.PutUint64(o[64*ch+32+8*l:], u1)
			}
			u := uint64(scA|scB<<16) * 0x0000000100000001
			for k := 0; k < 4; k++ {
				binary.LittleEndian.PutUint64(o[iq3sAVX2Scale+32*ch+8*k:], u)
			}
		}
		for k, v := range corr {
			binary.LittleEndian.PutUint32(o[iq3sAVX2Corr+4*k:], uint32(v))
		}
	}
}

// iq3sSign is the four values of the grid entry g under the sign mask mk
// (bytes −g as ^g+1, no carry crossing a byte: g is 1-15) and their sum
// (Σ g − 2·Σ g under the signs; the four bytes add up in the top one).
func iq3sSign(g, mk uint32) (uint32, int32) {
	return (g ^ mk) + mk&0x01010101, int32((g*0x01010101)>>24) - 2*int32(((g&mk)*0x01010101)>>24)
}

// decodeIQ3SPanelRowAVX2Ref is decodeIQ3SPanelRowAVX2 value by value (its
// test's reference).
func decodeIQ3SPanelRowAVX2Ref(w []byte, dx []float32, row []byte, nb, i int) {
	_ = row[nb*110-1]
	_ = w[((nb-1)*iqPanelGroup+i+1)*iq3sAVX2Slot-1]
	_ = dx[(nb-1)*iqPanelGroup+i]
	for b := 0; b < nb; b++ {
		blk := row[b*110 : (b+1)*110 : (b+1)*110]
		dx[b*iqPanelGroup+i] = f16Table[le16(blk)]
		o := w[(b*iqPanelGroup+i)*iq3sAVX2Slot : (b*iqPanelGroup+i+1)*iq3sAVX2Slot]
		var corr [8]int32
		for ib := 0; ib < 8; ib++ {
			sc := 2*int32(blk[106+ib/2]>>(4*(ib%2))&0xf) + 1
			qh := uint32(blk[66+ib])
			for l := 0; l < 4; l++ {
				signs := blk[74+4*ib+l]
				g1 := iq3sGrid[uint32(blk[2+8*ib+2*l])|(qh<<(8-2*l))&256]
				g2 := iq3sGrid[uint32(blk[2+8*ib+2*l+1])|(qh<<(7-2*l))&256]
				var s1, s2 int32
				for j := 0; j < 4; j++ {
					v1 := signed(gridByte32(g1, j), signs, j)
					v2 := signed(gridByte32(g2, j), signs, j+4)
					s1, s2 = s1+v1, s2+v2
					q := 32*ib + 8*l + j
					o[q&^63+iq3sAVX2Pos(q&63)] = byte(int8(v1))
					q += 4
					o[q&^63+iq3sAVX2Pos(q&63)] = byte(int8(v2))
				}
				corr[2*l] -= 128 * sc * s1
				corr[2*l+1] -= 128 * sc * s2
			}
			for m := 0; m < 8; m++ {
				binary.LittleEndian.PutUint16(o[iq3sAVX2Scale+32*(ib/2)+4*m+2*(ib%2):], uint16(sc))
			}
		}
		for k, v := range corr {
			binary.LittleEndian.PutUint32(o[iq3sAVX2Corr+4*k:], uint32(v))
		}
	}
}

// iq3sAVX2DotGeneric is iq3sPanelAVX2r4t3 for one row (slot i of the panel
// w, scales dx) and one token t of rows (the bytes ab, their scales ydT with
// stride yds): the kernel's integer steps, then the row kernel's float steps.
func iq3sAVX2DotGeneric(w []byte, dx []float32, i int, ab []byte, ydT []float32, yds, rows, t, nb int) float32 {
	var acc [8]float32
	for b := 0; b < nb; b++ {
		o := w[(b*iqPanelGroup+i)*iq3sAVX2Slot:][:iq3sAVX2Slot]
		y := ab[(b*rows+t)*qkK:][:qkK]
		var lane [8]int32
		for m := range lane {
			lane[m] = int32(binary.LittleEndian.Uint32(o[iq3sAVX2Corr+4*m:]))
		}
		for c := 0; c < 4; c++ {
			for m := 0; m < 8; m++ {
				for s := 0; s < 2; s++ {
					var sum int32
					for p := 0; p < 2; p++ {
						for e := 0; e < 2; e++ {
							k := 64*c + 32*p + 4*m + 2*s + e
							sum += int32(int8(o[k])) * int32(y[k])
						}
					}
					sc := int32(int16(binary.LittleEndian.Uint16(o[iq3sAVX2Scale+32*c+4*m+2*s:])))
					lane[m] += sc * sum
				}
			}
		}
		d := dx[b*iqPanelGroup+i] * ydT[b*yds+t]
		for k := range acc {
			acc[k] = fmaf(d, float32(lane[k]), acc[k])
		}
	}
	return sum8(&acc)
}
