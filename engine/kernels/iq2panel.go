package kernels

import (
	"encoding/binary"
	"sync"
	"unsafe"
)

// Prompt panels of the IQ2 family (issue 32; _asm/iq2panel.go): as the
// lattice types' int16 panels (iqpanel.go), a group of iqPanelGroup weight
// rows is decoded once per MatMul, here into bytes with the 16 rows in the
// lanes, and a VNNI kernel multiplies 16 rows by 8 tokens (4 for fewer), one
// VPDPBUSD per 4 values of 16 rows and a token: a quarter of the int16
// panels' products instructions, and no lane sums. A group's block b is 16 records of
// iq2OuterRec bytes, record j holding group j (values 16j … 16j+15) of the 16
// rows: byte 64c+4i+k holds row i's value 16j+4c+k plus 43 (unsigned), bytes
// 256+4i … 259+4i row i's scale of the group. The tokens' Q8_K quants
// are taken as they are (VPDPBUSD's signed operand, broadcast four at a time),
// with −43·bsum of each group beside them (acts.q8kO), which starts the
// group's sum: Σ(v+43)·q − 43·Σq = Σ v·q exactly. Times the rows' scales and
// added up over the groups it is the block's integer sum of the reference,
// and the float step is the row kernel's: the reference's bits.

const (
	iq2OuterRec  = 320 // bytes of a (block, group) record of 16 rows
	iq2OuterTok  = 320 // bytes of a token's block in acts.q8kO
	iq2OuterBias = 43  // the largest |grid value| of the IQ2 types
)

// decodeIQ2OuterRow writes the nb blocks of row (of type typ) into row slot i
// of the panel w (block b at bytes b·iqPanelGroup·iq2OuterRec)
// and their f16 scales into dx[b·iqPanelGroup+i]: the AVX-512 decoders'
// reference.
func decodeIQ2OuterRow(typ Type, w []byte, dx []float32, row []byte, nb, i int) {
	bb := typ.BlockBytes()
	_ = row[nb*bb-1]
	for b := 0; b < nb; b++ {
		blk := row[b*bb : (b+1)*bb]
		var v [qkK]int8
		var ls [16]int32
		iq2Values(typ, blk, &v, &ls)
		dx[b*iqPanelGroup+i] = f16Table[le16(blk)]
		p := w[b*iqPanelGroup*iq2OuterRec : (b+1)*iqPanelGroup*iq2OuterRec]
		for q, x := range v {
			j, c, k := q/16, q%16/4, q%4
			p[j*iq2OuterRec+64*c+4*i+k] = byte(int32(x) + iq2OuterBias)
		}
		for j, s := range ls {
			binary.LittleEndian.PutUint32(p[j*iq2OuterRec+qkK+4*i:], uint32(s))
		}
	}
}

// iq2OuterActs fills a.q8kO from a.q8k: token t's block b at bytes
// (b·rows+t)·iq2OuterTok, its 256 quants as they are, then −43·bsums as 16
// int32.
//
//go:norace
func (a *acts) iq2OuterActs(nb, rows int) {
	a.q8kO = grow(a.q8kO, nb*rows*iq2OuterTok)
	for t := 0; t < rows; t++ {
		for b := 0; b < nb; b++ {
			o := a.q8kO[(b*rows+t)*iq2OuterTok : (b*rows+t+1)*iq2OuterTok]
			y := &a.q8k[t*nb+b]
			copy(o[:qkK], unsafe.Slice((*byte)(unsafe.Pointer(&y.qs[0])), qkK))
			for j, s := range y.bsums {
				binary.LittleEndian.PutUint32(o[qkK+4*j:], uint32(-iq2OuterBias*int32(s)))
			}
		}
	}
}

// iq2OuterDotGeneric is iq2OuterAVX512r16t8 for one row (slot i of the panel
// w, scales dx) and one token t of rows (the records ao, scales ydT with
// stride yds): per group −43·bsum plus the products, times the row's scale,
// added up, then sum += ((dx·dy)·float(isum))·factor.
func iq2OuterDotGeneric(w []byte, dx []float32, i int, ao []byte, ydT []float32, yds, rows, t, nb int, factor float32) float32 {
	var sum float32
	for b := 0; b < nb; b++ {
		p := w[b*iqPanelGroup*iq2OuterRec:]
		y := ao[(b*rows+t)*iq2OuterTok:]
		var isum int32
		for j := 0; j < 16; j++ {
			g := int32(binary.LittleEndian.Uint32(y[qkK+4*j:]))
			for c := 0; c < 4; c++ {
				for k := 0; k < 4; k++ {
					g += int32(p[j*iq2OuterRec+64*c+4*i+k]) * int32(int8(y[16*j+4*c+k]))
				}
			}
			isum += g * int32(binary.LittleEndian.Uint32(p[j*iq2OuterRec+qkK+4*i:]))
		}
		k := b*iqPanelGroup + i
		sum += float32(float32(dx[k]*ydT[b*yds+t]*float32(isum)) * factor)
	}
	return sum
}

// iq2PanelType reports whether weights of type t take the byte panels.
func iq2PanelType(t Type) bool { return t == IQ2_XXS || t == IQ2_XS || t == IQ2_S }

// iq2Values writes the signed values of an IQ2_XXS, IQ2_XS, IQ2_S or IQ3_XXS
// block and the integer scales of its 16 groups of 16: the factors of the
// reference's integer sums.
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
		case IQ3_XXS:
			s := int32(2*(le32(blk[66+4*ib:])>>28) + 1)
			sc = [2]int32{s, s}
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
			case IQ3_XXS:
				g := blk[2+8*ib:]
				grid = uint64(iq3xxsGrid[g[2*l]]) | uint64(iq3xxsGrid[g[2*l+1]])<<32
				signs = iqSigns(le32(blk[66+4*ib:]) >> (7 * l))
			}
			for j := 0; j < 8; j++ {
				v[32*ib+8*l+j] = int8(signed(gridByte64(grid, j), signs, j))
			}
		}
	}
}

// iq2PanelBuf is a worker's panel.
type iq2PanelBuf struct {
	w  []byte
	dx []float32
}

var iq2PanelBufs = sync.Pool{New: func() any { return new(iq2PanelBuf) }}
