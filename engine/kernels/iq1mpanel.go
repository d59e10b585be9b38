package kernels

import (
	"encoding/binary"
	"sync"
	"unsafe"
)

// IQ1_M's prompt byte panels (issue 32), in the style of IQ1_S's
// (iq1spanel.go): a group of iqPanelGroup weight rows is decoded once per
// MatMul into signed bytes 8·ls·grid (|v| ≤ 120), 256 per block, rows 2q and
// 2q+1 interleaved by sub-block, and a VNNI kernel (iq1mPanelAVX512r4t4)
// multiplies 4 rows by 4 tokens with VPDPBUSD, the tokens' quants made
// unsigned (q+128, acts.q8kU) and each lane's accumulator started at −128·Σv.
// The shifts' part Σ ls·delta·q, delta ±1 per group of 8 values, comes from the
// rows' 32 ±scales ls·delta a block (int16) and the tokens' sums of 8 quants
// (acts.q8kS8) by VPDPWSSD into the same accumulators, so each row-token's
// dwords add up to dotIQ1MBlock's 8·sumi1 + sumi2 exactly (below 2^24), and
// the float step is the int16 panels' (iqPanelSumFAVX512r4t4):
// sum += (f16(x.d)·y.d)·(float(block sum)·0.125). Against the int16 panels
// (ls·(8·grid+delta), 8 VPDPWSSD a block per row and token) it takes 4
// VPDPBUSD and 1 VPDPWSSD.

// iq1mPanelBuf is a worker's IQ1_M byte panel: for block b of slot i (s =
// b·iqPanelGroup+i), the values of sub-block j at w[(s&^1)·256 + 64j +
// 32(i&1)], the lanes' starts −128·Σv (8 int32) at c[s·8], the ±scales
// ls·delta of groups g < 16 at dl[(s&^1)·32 + 16(i&1) + g] and of groups
// 16+g at 32 words further, f16 scale at dx[s].
type iq1mPanelBuf struct {
	w  []int8
	c  []int32
	dl []int16
	dx []float32
}

// iq1mPanelBlockBytes is the bytes of one row's block in the panel: values,
// lane starts, ±scales and scale.
const iq1mPanelBlockBytes = qkK + 8*4 + 32*2 + 4

// iq1mBytePanels switches IQ1_M's prompts between the byte panels and the
// int16 panels (a var for the benchmarks).
var iq1mBytePanels = true

// usesIQ1MBytes reports whether a panel product of weights of type wt takes
// IQ1_M's byte panels.
func usesIQ1MBytes(wt Type) bool { return wt == IQ1_M && iq1mBytePanels }

var iq1mPanelBufs = sync.Pool{New: func() any { return new(iq1mPanelBuf) }}

// grow sizes the buffer for super groups of nb blocks.
func (p *iq1mPanelBuf) grow(super, nb int) {
	p.w = grow(p.w, super*nb*iqPanelGroup*qkK)
	p.c = grow(p.c, super*nb*iqPanelGroup*8)
	p.dl = grow(p.dl, super*nb*iqPanelGroup*32)
	p.dx = grow(p.dx, super*nb*iqPanelGroup)
}

// decodeIQ1MBytePanel writes the nb IQ1_M blocks of row into slot i of the
// group whose buffers start at w, c, dl and dx.
//
//go:norace
func decodeIQ1MBytePanel(w []int8, c []int32, dl []int16, dx []float32, row []byte, nb, i int) {
	_ = row[nb*56-1]
	for b := 0; b < nb; b++ {
		blk := row[b*56 : (b+1)*56]
		s := b*iqPanelGroup + i
		dx[s] = iq1MScale(blk)
		o := w[(s&^1)*qkK : (s&^1+2)*qkK]
		var lane [8]int32
		for ib := 0; ib < 8; ib++ {
			for l := 0; l < 4; l++ {
				grid, delta, ls := iq1MGroup(blk, ib, l)
				for j := 0; j < 8; j++ {
					v := 8 * ls * int32(int8(grid>>(8*j)))
					o[64*ib+32*(i&1)+8*l+j] = int8(v)
					lane[2*l+j/4] += v
				}
				g := 4*ib + l
				dl[(s&^1)*32+32*(g/16)+16*(i&1)+g%16] = int16(ls * delta)
			}
		}
		for k := range lane {
			c[s*8+k] = -128 * lane[k]
		}
	}
}

// iq1mPanelDotGeneric is iq1mPanelAVX512r4t4 for one row (slot i of the
// panel) and one token's blocks y: dotIQ1MRow from the panel's values. The
// tests check the decoder and the layout with it.
func iq1mPanelDotGeneric(p *iq1mPanelBuf, i int, y []q8KBlock) float32 {
	var sum float32
	for b := range y {
		s := b*iqPanelGroup + i
		o := p.w[(s&^1)*qkK : (s&^1+2)*qkK]
		var bsum int32
		for k := 0; k < 8; k++ {
			bsum += p.c[s*8+k]
		}
		for q := 0; q < qkK; q++ {
			bsum += (int32(y[b].qs[q]) + 128) * int32(o[q/32*64+32*(i&1)+q%32])
		}
		var s8 [32]int16
		sums8Q8K(s8[:], &y[b].qs)
		for g := 0; g < 32; g++ {
			bsum += int32(p.dl[(s&^1)*32+32*(g/16)+16*(i&1)+g%16]) * int32(s8[g])
		}
		sum += p.dx[s] * y[b].d * (float32(bsum) * iq1Delta)
	}
	return sum
}

// sums8Q8K writes the sums of a block's 32 groups of 8 quants.
func sums8Q8K(dst []int16, qs *[qkK]int8) {
	_ = dst[31]
	for g := 0; g < 32; g++ {
		var s int16
		for _, q := range qs[8*g : 8*g+8] {
			s += int16(q)
		}
		dst[g] = s
	}
}

// unsignSums8Q8K is unsignQ8K and sums8Q8K of a block in one pass, eight
// quants a step as one uint64: the bytes q+128, and their sum (two bytes a
// lane, then one multiply adding the four lanes into the top 16 bits) less
// 8·128.
func unsignSums8Q8K(dstU []uint8, dstS []int16, qs *[qkK]int8) {
	_, _ = dstU[qkK-1], dstS[31]
	src := unsafe.Slice((*byte)(unsafe.Pointer(&qs[0])), qkK)
	for g := 0; g < 32; g++ {
		u := binary.LittleEndian.Uint64(src[8*g:]) ^ 0x8080808080808080
		binary.LittleEndian.PutUint64(dstU[8*g:], u)
		p := u&0x00ff00ff00ff00ff + u>>8&0x00ff00ff00ff00ff
		dstS[g] = int16(p*0x0001000100010001>>48) - 8*128
	}
}
