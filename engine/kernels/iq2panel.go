package kernels

import (
	"encoding/binary"
	"sync"
	"unsafe"
)

// Byte panels of the IQ2 family for prompts (issue 32): as the lattice types'
// int16 panels (iqpanel.go), a group of iqPanelGroup weight rows is decoded
// once per MatMul, here into signed bytes v = grid × sign (|v| ≤ 43) with the
// scales 2s+1 of their 16 groups of 16 values as dwords beside them, and the
// tokens' Q8_K quants are stored once as unsigned bytes q+128 (acts.q8kU) in
// the same order. A VNNI kernel (iq2PanelAVX512r4t4, _asm/iq2panel.go)
// multiplies 4 rows by 4 tokens, one VPDPBUSD per 64 values: half the
// products' instructions of the int16 panels.
//
// A block's 256 values are 4 chunks of 64 bytes: byte 64c+4j+k holds value
// 16j+4c+k, so dword j of a chunk's products is in group j. A row-token
// accumulator's dword j is then Σ (q+128)·v over group j; times the group's
// scale and added up, with the row's correction −128·Σ scale·v, it is the
// block's integer sum Σ scale·v·q of dotIQ2XXSBlock (dotIQ2XSBlock,
// dotIQ2SBlock) exactly, and the float step is the row kernel's, so every
// output has the reference's bits.

// iq2PanelBlock is the bytes of one row's decoded block: 256 values, then the
// 16 scales as little-endian int32.
const iq2PanelBlock = 320

// iq2PanelType reports whether weights of type t take the byte panels.
func iq2PanelType(t Type) bool { return t == IQ2_XXS || t == IQ2_XS || t == IQ2_S }

// iq2PanelPos is the byte of value q (< 256) in a block of the byte panels.
func iq2PanelPos(q int) int { return 64*(q%16/4) + 4*(q/16) + q%4 }

// iq2Values writes the signed values of an IQ2_XXS, IQ2_XS or IQ2_S block and
// the integer scales of its 16 groups of 16: the factors of the reference's
// integer sums.
func iq2Values(typ Type, blk []byte, v *[qkK]int8, ls *[16]int32) {
	for ib := 0; ib < 8; ib++ {
		var sc [2]int32
		switch typ {
		case IQ2_XXS:
			s := int32(2*(le32(blk[2+8*ib+4:])>>28) + 1)
			sc = [2]int32{s, s}
		case IQ2_XS:
			sc = [2]int32{int32(2*(blk[66+ib]&0xf) + 1), int32(2*(blk[66+ib]>>4) + 1)}
		case IQ2_S:
			sc = [2]int32{int32(2*(blk[74+ib]&0xf) + 1), int32(2*(blk[74+ib]>>4) + 1)}
		}
		ls[2*ib], ls[2*ib+1] = sc[0], sc[1]
		for l := 0; l < 4; l++ {
			var grid uint64
			var signs uint8
			switch typ {
			case IQ2_XXS:
				g := blk[2+8*ib : 2+8*ib+8]
				grid, signs = iq2xxsGrid[g[l]], iqSigns(le32(g[4:])>>(7*l))
			case IQ2_XS:
				q := le16(blk[2+2*(4*ib+l):])
				grid, signs = iq2xsGrid[q&511], iqSigns(uint32(q>>9))
			case IQ2_S:
				grid, signs = iq2sGrid[iq2SIndex(blk, ib, l)], blk[34+4*ib+l]
			}
			for j := 0; j < 8; j++ {
				v[32*ib+8*l+j] = int8(signed(gridByte64(grid, j), signs, j))
			}
		}
	}
}

// decodeIQ2PanelRow writes the nb blocks of row (of type typ) into slot i of
// the byte panel w (block b at bytes (b·iqPanelGroup+i)·iq2PanelBlock), their
// f16 scales into dx and their corrections into corr (both at
// b·iqPanelGroup+i): the AVX-512 decoders' reference.
func decodeIQ2PanelRow(typ Type, w []byte, dx []float32, corr []int32, row []byte, nb, i int) {
	bb := typ.BlockBytes()
	_ = row[nb*bb-1]
	for b := 0; b < nb; b++ {
		blk := row[b*bb : (b+1)*bb]
		var v [qkK]int8
		var ls [16]int32
		iq2Values(typ, blk, &v, &ls)
		k := b*iqPanelGroup + i
		dx[k] = f16Table[le16(blk)]
		o := w[k*iq2PanelBlock : (k+1)*iq2PanelBlock]
		var c int32
		for q, x := range v {
			o[iq2PanelPos(q)] = byte(x)
			c += ls[q/16] * int32(x)
		}
		for j, s := range ls {
			binary.LittleEndian.PutUint32(o[qkK+4*j:], uint32(s))
		}
		corr[k] = -128 * c
	}
}

// iq2Acts fills a.q8kU from a.q8k: block b of token t at bytes (b·rows+t)·256,
// quants q+128 in the byte panels' order.
//
//go:norace
func (a *acts) iq2Acts(nb, rows int) {
	a.q8kU = grow(a.q8kU, nb*rows*qkK)
	for t := 0; t < rows; t++ {
		for b := 0; b < nb; b++ {
			o := a.q8kU[(b*rows+t)*qkK : (b*rows+t+1)*qkK]
			qs := &a.q8k[t*nb+b].qs
			q := unsafe.Slice((*byte)(unsafe.Pointer(&qs[0])), qkK)
			for j := 0; j < 16; j++ {
				for c := 0; c < 4; c++ {
					v := binary.LittleEndian.Uint32(q[16*j+4*c:])
					binary.LittleEndian.PutUint32(o[64*c+4*j:], v^0x80808080)
				}
			}
		}
	}
}

// iq2PanelDotGeneric is iq2PanelAVX512r4t4 for one row (slot i of the panel
// w, scales dx, corrections corr) and one token t of rows (the bytes au, their
// scales ydT with stride yds): per block the groups' sums times their scales
// plus the correction, then sum += ((dx·dy)·float(isum))·factor. The tests
// check the decoders and layouts with it.
func iq2PanelDotGeneric(w []byte, dx []float32, corr []int32, i int, au []byte, ydT []float32, yds, rows, t, nb int, factor float32) float32 {
	var sum float32
	for b := 0; b < nb; b++ {
		k := b*iqPanelGroup + i
		wb := w[k*iq2PanelBlock : (k+1)*iq2PanelBlock]
		ab := au[(b*rows+t)*qkK:]
		isum := corr[k]
		for j := 0; j < 16; j++ {
			var g int32
			for c := 0; c < 4; c++ {
				for e := 64*c + 4*j; e < 64*c+4*j+4; e++ {
					g += int32(ab[e]) * int32(int8(wb[e]))
				}
			}
			isum += g * int32(le32(wb[qkK+4*j:]))
		}
		sum += float32(float32(dx[k]*ydT[b*yds+t]*float32(isum)) * factor)
	}
	return sum
}

// iq2PanelBuf is a worker's byte panel.
type iq2PanelBuf struct {
	w    []byte
	dx   []float32
	corr []int32
}

var iq2PanelBufs = sync.Pool{New: func() any { return new(iq2PanelBuf) }}
