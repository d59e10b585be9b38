package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// decodeIQ1MPanelAVX512 emits the IQ1_M panel decoder (decodeIQ1MPanel): value
// q of sub-block ib is ls·(8·grid + delta), ls = 2·scale+1 of its 16 values
// (the low and high 16 words of the sub-block), delta = ±1 of its 8 (a mask
// from the four sign bits of the sub-block's qh word: PEXT, PDEP, times 255),
// so that the block's one integer sum is 8·sumi1 + sumi2 of dotIQ1MBlock; the
// f16 scale from the top nibbles of the four scale words.
func decodeIQ1MPanelAVX512() {
	evex = true
	defer func() { evex = false }()
	TEXT("decodeIQ1MPanelAVX512", NOSPLIT, "func(x *byte, nb int, w *int16, dx *float32, grid *byte)")
	Pragma("noescape")
	Doc("decodeIQ1MPanelAVX512 is decodeIQ3SPanelAVX512 for IQ1_M (values ls·(8·grid+delta)).")
	x := GP64()
	Load(Param("x"), x)
	n := Load(Param("nb"), GP64())
	w := Load(Param("w"), GP64())
	dx := Load(Param("dx"), GP64())
	grid := GP64()
	Load(Param("grid"), grid)
	perm := ZMM()
	VMOVDQU32(iqPanelPerm, perm)
	khi := K()
	ones, twos := ZMM(), ZMM()
	{
		g := GP32()
		MOVL(U32(0xffff0000), g)
		KMOVD(g, khi)
		MOVL(U32(1), g)
		VPBROADCASTW(g, ones)
		MOVL(U32(2), g)
		VPBROADCASTW(g, twos)
	}

	Label("decode_IQ1M")
	d16, t := GP64(), GP64()
	MOVWQZX(Mem{Base: x, Disp: 48}, d16)
	SHRQ(U8(12), d16)
	for k, sh := range []uint8{8, 4, 0} {
		MOVWQZX(Mem{Base: x, Disp: 50 + 2*k}, t)
		if sh != 0 {
			SHRQ(U8(sh), t)
		}
		ANDQ(U32(0xf0<<(4*k)), t)
		ORQ(t, d16)
	}
	d := XMM()
	VMOVD(d16.As32(), d)
	VCVTPH2PS(d, d)
	VMOVSS(d, Mem{Base: dx})
	for ib := 0; ib < 8; ib++ {
		g := gather8x(grid, func(l int) GPVirtual {
			r, t := GP64(), GP64()
			MOVBQZX(Mem{Base: x, Disp: 32 + 2*ib + l/2}, t)
			if l%2 == 1 {
				SHRQ(U8(4), t)
			}
			ANDQ(U8(7), t)
			SHLQ(U8(8), t)
			MOVBQZX(Mem{Base: x, Disp: 4*ib + l}, r)
			ORQ(t, r)
			return r
		})
		// ls of the low 16 values in words 0-15, of the high 16 in words 16-31.
		lo, hi := GP64(), GP64()
		MOVWQZX(Mem{Base: x, Disp: 48 + 2*(ib/2)}, lo)
		if ib%2 == 1 {
			SHRQ(U8(6), lo)
		}
		MOVQ(lo, hi)
		SHRQ(U8(3), hi)
		ANDQ(U8(7), lo)
		ANDQ(U8(7), hi)
		LEAQ(Mem{Base: lo, Index: lo, Scale: 1, Disp: 1}, lo)
		LEAQ(Mem{Base: hi, Index: hi, Scale: 1, Disp: 1}, hi)
		ls := ZMM()
		VPBROADCASTW(lo.As32(), ls)
		VPBROADCASTW(hi.As32(), khi, ls)
		// The words of the groups whose shift is negative (bits 3, 7, 11, 15).
		h, m := GP64(), GP64()
		MOVWQZX(Mem{Base: x, Disp: 32 + 2*ib}, h)
		MOVQ(U64(0x8888), m)
		PEXTQ(m, h, h)
		MOVQ(U64(0x01010101), m)
		PDEPQ(m, h, h)
		IMUL3Q(U32(255), h, h)
		neg := K()
		KMOVD(h.As32(), neg)
		v := ZMM()
		VPMOVSXBW(g, v)
		VPSLLW(U8(3), v, v)
		VPADDW(ones, v, v)      // 8·grid + 1
		VPSUBW(twos, v, neg, v) // 8·grid − 1 where negative
		VPMULLW(ls, v, v)
		VPERMD(v, perm, v)
		VMOVDQU64(v, Mem{Base: w, Disp: 64 * ib})
	}
	ADDQ(U32(56), x)
	ADDQ(U32(iqPanelGroup*iqPanelBlock), w)
	ADDQ(U8(4*iqPanelGroup), dx)
	DECQ(n)
	JNZ(LabelRef("decode_IQ1M"))
	VZEROUPPER()
	RET()
}
