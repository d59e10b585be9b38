package kernels

import "sync"

// IQ1_S's prompt panels (issue 32), in ggml_vec_dot_iq1_s_q8_K's order
// (dotIQ1SRowGeneric): a group of iqPanelGroup weight rows is decoded once per
// MatMul into signed bytes ls·grid (|v| ≤ 15), 256 per block in order, and a
// VNNI kernel (iq1sPanelAVX512r2t4) multiplies 2 rows by 4 tokens with
// VPDPBUSD, the tokens' quants made unsigned (q+128) and each lane's
// 128·Σv subtracted again, so every lane is the row kernel's exact integer
// sum; the shifts' sums come from the rows' ±scales and the tokens' bsums
// (acts.bsT). Half the multiply-add instructions of the int16 panels.

// iq1sPanelBuf is a worker's IQ1_S byte panel: for block b of slot i, the
// values at w[(b·iqPanelGroup+i)·256], the lanes' corrections 128·Σv (8 int32,
// twice) at c[(b·iqPanelGroup+i)·16], the ±scales ls·delta of sub-blocks 2p
// and 2p+1 (int16 pair) at ls[(4b+p)·iqPanelGroup+i], f16(x.d) at
// dx[b·iqPanelGroup+i].
type iq1sPanelBuf struct {
	w  []int8
	c  []int32
	ls []int32
	dx []float32
}

var iq1sPanelBufs = sync.Pool{New: func() any { return new(iq1sPanelBuf) }}

// grow sizes the buffer for super groups of nb blocks (ls and dx with 2 more
// entries, which the kernel reads, and ignores, for the last slots' pairs).
func (p *iq1sPanelBuf) grow(super, nb int) {
	p.w = grow(p.w, super*nb*iqPanelGroup*qkK)
	p.c = grow(p.c, super*nb*iqPanelGroup*16)
	p.ls = grow(p.ls, super*nb*iqPanelGroup*4+2)
	p.dx = grow(p.dx, super*nb*iqPanelGroup+2)
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
		o := w[s*qkK : (s+1)*qkK]
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
					o[32*ib+8*g+j] = int8(v)
					lane[2*g+j/4] += v
				}
			}
		}
		for k := range lane {
			c[s*16+k], c[s*16+8+k] = 128*lane[k], 128*lane[k]
		}
		for p := 0; p < 4; p++ {
			ls[(4*b+p)*iqPanelGroup+i] = int32(uint32(uint16(lsd[2*p])) | uint32(uint16(lsd[2*p+1]))<<16)
		}
	}
}

// iq1sPanelDotGeneric is iq1sPanelAVX512r2t4 for one row (slot i of the
// panel) and one token's blocks y: dotIQ1SRowGeneric from the panel's values.
// The tests check the decoder and the layout with it.
func iq1sPanelDotGeneric(p *iq1sPanelBuf, i int, y []q8KBlock) float32 {
	var acc [8]float32
	var acc1 float32
	for b := range y {
		s := b*iqPanelGroup + i
		o := p.w[s*qkK : (s+1)*qkK]
		var lane [8]int32
		for q := 0; q < qkK; q++ {
			lane[q%32/4] += (int32(y[b].qs[q]) + 128) * int32(o[q])
		}
		for k := range lane {
			lane[k] -= p.c[s*16+k]
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
