package kernels

import (
	"encoding/binary"
	"sync"
)

// IQ3_S byte panels for prompts (issue 32): the int16 panels (iqpanel.go) take
// 8 VPDPWSSD a block and row-token pair, which bound IQ3_S's prefill on Zen4
// (512-bit VNNI at half Zen5's rate). Here a group of iqPanelGroup rows is
// decoded once per MatMul into signed bytes grid × sign (|v| ≤ 15), and the
// tokens' Q8_K quants are bytes q+128 in the same order (acts.q8kB), so that
// VPDPBUSD sums four products a dword; VPACKSSDW packs two chunks' sums into
// words and VPDPWSSD multiplies them by their sub-blocks' scales into the
// lanes (_asm/iq3spanel.go): 4 VPDPBUSD and 2 VPDPWSSD a block and pair. The
// bias 128·Σ sc·v of the unsigned quants is a row's constant (the corr, which
// starts each accumulator), so each lane of dotIQ3SRowGeneric's 8 is its exact
// integer sum and the float steps are the row kernel's: the same bits.
//
// A row's block takes iq3sBPSlot bytes: 4 chunks of 64 signed values, chunk c
// holding sub-blocks 2c and 2c+1 with their dwords interleaved (dword 2m:
// values 4m..4m+3 of sub-block 2c, dword 2m+1: of 2c+1); at iq3sBPCorr 16
// dwords, minus the kernel's sums for quants all 0 (bytes 128); at
// iq3sBPScale, per half h, the words (sc_4h, sc_4h+1, sc_4h, sc_4h+1,
// sc_4h+2, sc_4h+3, sc_4h+2, sc_4h+3) four times. Lane 2L+e of a block is
// dwords 4L+e and 4L+2+e of a pair's accumulator.
const (
	iq3sBPSlot  = 448
	iq3sBPCorr  = 256
	iq3sBPScale = 320
)

// iq3sBytePanels switches IQ3_S's prompts between the byte panels and the
// int16 panels (a var for the benchmarks and tests).
var iq3sBytePanels = true

// useIQ3SBytes reports whether a panel product of weights of type wt takes
// the byte panels.
func useIQ3SBytes(wt Type) bool { return wt == IQ3_S && iq3sBytePanels }

// panelQ8K fills the panels' activations for weights of type wt: q8kB for
// IQ3_S's byte panels, q8kW (widenQ8K) for the others.
func (a *acts) panelQ8K(wt Type, nb, rows int) {
	if !useIQ3SBytes(wt) {
		a.widenQ8K(nb, rows)
		return
	}
	a.q8kB = grow(a.q8kB, nb*rows*qkK)
	for t := 0; t < rows; t++ {
		for b := 0; b < nb; b++ {
			iq3sBytesQ8K(a.q8kB[(b*rows+t)*qkK:(b*rows+t+1)*qkK], &a.q8k[t*nb+b].qs)
		}
	}
}

// iq3sBytePos is the byte of value q (< 64) of a chunk's two sub-blocks.
func iq3sBytePos(q int) int {
	s, m, j := q/32, q%32/4, q%4
	return 8*m + 4*s + j
}

// iq3sBytesQ8K writes a block's quants as bytes q+128 in the byte panels' order.
func iq3sBytesQ8K(dst []byte, qs *[qkK]int8) {
	_ = dst[qkK-1]
	for q := 0; q < qkK; q++ {
		dst[q&^63+iq3sBytePos(q&63)] = byte(qs[q]) ^ 0x80
	}
}

// decodeIQ3SBytePanel writes the nb IQ3_S blocks of row into slot i of the
// byte panel w (block b at (b·iqPanelGroup+i)·iq3sBPSlot) and their scales
// into dx[b·iqPanelGroup+i]: decodeIQ3SBytesAVX512's reference.
func decodeIQ3SBytePanel(w []byte, dx []float32, row []byte, nb, i int) {
	_ = row[nb*110-1]
	for b := 0; b < nb; b++ {
		blk := row[b*110 : (b+1)*110]
		dx[b*iqPanelGroup+i] = f16Table[le16(blk)]
		o := w[(b*iqPanelGroup+i)*iq3sBPSlot : (b*iqPanelGroup+i+1)*iq3sBPSlot]
		var sc [8]int16
		for ib := 0; ib < 8; ib++ {
			sc[ib] = 2*int16(blk[106+ib/2]>>(4*(ib%2))&0xf) + 1
			qh := uint32(blk[66+ib])
			for l := 0; l < 4; l++ {
				signs := blk[74+4*ib+l]
				g1 := iq3sGrid[uint32(blk[2+8*ib+2*l])|(qh<<(8-2*l))&256]
				g2 := iq3sGrid[uint32(blk[2+8*ib+2*l+1])|(qh<<(7-2*l))&256]
				for j := 0; j < 4; j++ {
					q := 32*ib + 8*l + j
					o[q&^63+iq3sBytePos(q&63)] = byte(int8(signed(gridByte32(g1, j), signs, j)))
					q += 4
					o[q&^63+iq3sBytePos(q&63)] = byte(int8(signed(gridByte32(g2, j), signs, j+4)))
				}
			}
		}
		for h := 0; h < 2; h++ {
			s := o[iq3sBPScale+64*h : iq3sBPScale+64*h+64]
			for r := 0; r < 4; r++ {
				for k, v := range [8]int16{sc[4*h], sc[4*h+1], sc[4*h], sc[4*h+1], sc[4*h+2], sc[4*h+3], sc[4*h+2], sc[4*h+3]} {
					s[16*r+2*k], s[16*r+2*k+1] = byte(v), byte(v>>8)
				}
			}
		}
		var zero [qkK]byte
		for q := range zero {
			zero[q] = 128
		}
		acc := iq3sBPSums(o, zero[:])
		for k, v := range acc {
			binary.LittleEndian.PutUint32(o[iq3sBPCorr+4*k:], uint32(-v))
		}
	}
}

// iq3sBPSums is the kernel's integer part for one row's block o (without its
// corr) and one token's bytes a: the 16 dwords of VPDPBUSD, VPACKSSDW and
// VPDPWSSD over the two halves.
func iq3sBPSums(o, a []byte) (acc [16]int32) {
	for h := 0; h < 2; h++ {
		var d [2][16]int32
		for j := 0; j < 2; j++ {
			c := 2*h + j
			for q := 0; q < 64; q++ {
				d[j][q/4] += int32(a[64*c+q]) * int32(int8(o[64*c+q]))
			}
		}
		s := o[iq3sBPScale+64*h:]
		for L := 0; L < 4; L++ {
			// words of lane L: d[0][4L..4L+3] then d[1][4L..4L+3]
			var p [8]int32
			for k := 0; k < 4; k++ {
				p[k], p[4+k] = int32(int16(d[0][4*L+k])), int32(int16(d[1][4*L+k]))
			}
			for r := 0; r < 4; r++ {
				w0 := int32(int16(uint16(s[16*L+4*r]) | uint16(s[16*L+4*r+1])<<8))
				w1 := int32(int16(uint16(s[16*L+4*r+2]) | uint16(s[16*L+4*r+3])<<8))
				acc[4*L+r] += p[2*r]*w0 + p[2*r+1]*w1
			}
		}
	}
	return acc
}

// iq3sBPDotGeneric is iq3sBytePanelAVX512r4t4 for one row (slot i of the
// panel w, scales dx) and one token t of rows (the bytes ab, their scales ydT
// with stride yds): the lanes' integer sums, then the row kernel's float
// steps. The tests check the decoders and layouts with it.
func iq3sBPDotGeneric(w []byte, dx []float32, i int, ab []byte, ydT []float32, yds, rows, t, nb int) float32 {
	var acc [8]float32
	for b := 0; b < nb; b++ {
		o := w[(b*iqPanelGroup+i)*iq3sBPSlot:][:iq3sBPSlot]
		s := iq3sBPSums(o, ab[(b*rows+t)*qkK:][:qkK])
		var lane [8]int32
		for L := 0; L < 4; L++ {
			for e := 0; e < 2; e++ {
				lane[2*L+e] = int32(le32(o[iq3sBPCorr+4*(4*L+e):])) + s[4*L+e] +
					int32(le32(o[iq3sBPCorr+4*(4*L+2+e):])) + s[4*L+2+e]
			}
		}
		d := dx[b*iqPanelGroup+i] * ydT[b*yds+t]
		for k := range acc {
			acc[k] = fmaf(d, float32(lane[k]), acc[k])
		}
	}
	return sum8(&acc)
}

// iq3sBPBuf is a worker's IQ3_S byte panel.
type iq3sBPBuf struct {
	w  []byte
	dx []float32
}

var iq3sBPBufs = sync.Pool{New: func() any { return new(iq3sBPBuf) }}
