package kernels

import "sync"

// IQ1_S's prompt panels (issue 32), in ggml_vec_dot_iq1_s_q8_K's order
// (dotIQ1SRowGeneric): a group of iqPanelGroup weight rows is decoded once per
// MatMul into signed bytes ls·grid (|v| ≤ 15), 256 per block in order, and a
// VNNI kernel (iq1sPanelAVX512r4t4) multiplies 4 rows by 4 tokens with
// VPDPBUSD, the tokens' quants made unsigned (q+128, acts.q8kU) and each
// lane's accumulator started at −128·Σv, so every lane is the row kernel's
// exact integer sum; the shifts' sums come from the rows' ±scales and the
// tokens' bsums (acts.bsT). Half the multiply-add instructions of the int16
// panels, and no folding of lanes: rows 2q and 2q+1 are interleaved by
// sub-block, so one VPDPBUSD gives both rows' 8 lanes.

// iq1sPanelBuf is a worker's IQ1_S byte panel: for block b of slot i, the
// values of sub-block j at w[(b·iqPanelGroup+i&^1)·256 + 64j + 32(i&1)], the
// lanes' starts −128·Σv (8 int32) at c[(b·iqPanelGroup+i)·8], the ±scales ls·delta of sub-blocks 2p
// and 2p+1 (int16 pair) at ls[(4b+p)·iqPanelGroup+i], f16(x.d) at
// dx[b·iqPanelGroup+i].
type iq1sPanelBuf struct {
	w  []int8
	c  []int32
	ls []int32
	dx []float32
}

// iq1sPanelBlockBytes is the bytes of one row's block in the panel: values,
// lane starts, ±scales and scale.
const iq1sPanelBlockBytes = qkK + 8*4 + 4*4 + 4

var iq1sPanelBufs = sync.Pool{New: func() any { return new(iq1sPanelBuf) }}

// grow sizes the buffer for super groups of nb blocks.
func (p *iq1sPanelBuf) grow(super, nb int) {
	p.w = grow(p.w, super*nb*iqPanelGroup*qkK)
	p.c = grow(p.c, super*nb*iqPanelGroup*8)
	p.ls = grow(p.ls, super*nb*iqPanelGroup*4)
	p.dx = grow(p.dx, super*nb*iqPanelGroup)
}

// decodeIQ1SBytePanel writes the nb IQ1_S blocks of row into slot i of the
// group whose buffers start at w, c, ls and dx.
//
//go:norace
func decodeIQ1SBytePanel(w []int8, c, ls []int32, dx []float32, row []byte, nb, i int) {
	_ = row[nb*50-1]
	for b := 0; b < nb; b++ {
		blk := row[b*50 : (b+1)*50]
		s := b*iqPanelGroup + i
		dx[s] = f16Table[le16(blk)]
		o := w[(s&^1)*qkK : (s&^1+2)*qkK]
		var lane [8]int32
		var lsd [8]int16
		for ib := 0; ib < 8; ib++ {
			h := uint32(le16(blk[34+2*ib:]))
			l := int32(2*(h>>12&7) + 1)
			lsd[ib] = int16(l)
			if h&0x8000 != 0 {
				lsd[ib] = -int16(l)
			}
			for g := 0; g < 4; g++ {
				grid := iq1Grid(uint32(blk[2+4*ib+g]) | (h>>(3*g)&7)<<8)
				for j := 0; j < 8; j++ {
					v := l * int32(int8(grid>>(8*j)))
					o[64*ib+32*(i&1)+8*g+j] = int8(v)
					lane[2*g+j/4] += v
				}
			}
		}
		for k := range lane {
			c[s*8+k] = -128 * lane[k]
		}
		for p := 0; p < 4; p++ {
			ls[(4*b+p)*iqPanelGroup+i] = int32(uint32(uint16(lsd[2*p])) | uint32(uint16(lsd[2*p+1]))<<16)
		}
	}
}

// iq1sPanelDotGeneric is iq1sPanelAVX512r4t4 for one row (slot i of the
// panel) and one token's blocks y: dotIQ1SRowGeneric from the panel's values.
// The tests check the decoder and the layout with it.
func iq1sPanelDotGeneric(p *iq1sPanelBuf, i int, y []q8KBlock) float32 {
	var acc [8]float32
	var acc1 float32
	for b := range y {
		s := b*iqPanelGroup + i
		o := p.w[(s&^1)*qkK : (s&^1+2)*qkK]
		var lane [8]int32
		copy(lane[:], p.c[s*8:s*8+8])
		for q := 0; q < qkK; q++ {
			lane[q%32/4] += (int32(y[b].qs[q]) + 128) * int32(o[q/32*64+32*(i&1)+q%32])
		}
		var sumi1 int32
		for pp := 0; pp < 4; pp++ {
			v := uint32(p.ls[(4*b+pp)*iqPanelGroup+i])
			bs := &y[b].bsums
			sumi1 += int32(int16(v)) * (int32(bs[4*pp]) + int32(bs[4*pp+1]))
			sumi1 += int32(int16(v>>16)) * (int32(bs[4*pp+2]) + int32(bs[4*pp+3]))
		}
		d := y[b].d * p.dx[s]
		for k := range acc {
			acc[k] = fmaf(d, float32(lane[k]), acc[k])
		}
		acc1 = fmaf(d, float32(sumi1), acc1)
	}
	return sum8(&acc) + iq1Delta*acc1
}

// unsignQ8K writes a block's quants plus 128 as bytes.
func unsignQ8K(dst []uint8, qs *[qkK]int8) {
	_ = dst[qkK-1]
	for i, q := range qs {
		dst[i] = uint8(q) ^ 0x80
	}
}
