package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
)

const iq4XSSize = 136 // IQ4_XS: d f16, scales_h uint16, scales_l [4]byte, qs [128]byte

// dotIQ4XSAVX2 emits the IQ4_XS kernel for AVX2: per 32 weights the 16 index
// bytes split into nibbles, the levels looked up with VPSHUFB (IQ4_NL's table),
// multiplied with the activations by the sign trick turned round (|y| times
// x·sign(y): exact for every int8 y, −128 included, as Q8_K's range is) and the
// pairs' sums with the sub-block's scale ls−32 (VPMADDWD); the block's exact
// integer sum, then the reference's float steps sum += (f16(x.d)·y.d)·isum.
func dotIQ4XSAVX2() {
	TEXT("dotIQ4XSAVX2", NOSPLIT, "func(x, y *byte, n int) float32")
	Pragma("noescape")
	Doc("dotIQ4XSAVX2 is the dot product of n IQ4_XS blocks at x with n q8KBlocks at y.")
	x, y, n := params3()
	m4, tbl := YMM(), YMM()
	VMOVDQU(nibbleMask, m4)
	VMOVDQU(iq4nlTable, tbl)
	sum := XMM()
	VXORPS(sum, sum, sum)

	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	sh := GP32()
	MOVWLZX(Mem{Base: x, Disp: 2}, sh)
	acc := YMM()
	VPXOR(acc, acc, acc)
	for ib := 0; ib < 8; ib++ {
		// ls = (low nibble ib%2 of scales_l[ib/2] | bits 2ib..2ib+1 of
		// scales_h << 4) − 32, as int16 in every lane.
		l, h := GP32(), GP32()
		MOVBLZX(Mem{Base: x, Disp: 4 + ib/2}, l)
		if ib%2 == 1 {
			SHRL(U8(4), l)
		}
		ANDL(U32(0xf), l)
		MOVL(sh, h)
		if ib > 0 {
			SHRL(U8(2*ib), h)
		}
		ANDL(U32(3), h)
		SHLL(U8(4), h)
		ORL(h, l)
		SUBL(U32(32), l)
		sv := YMM()
		VMOVD(l, sv.AsX())
		VPBROADCASTW(sv.AsX(), sv)

		t, th := XMM(), XMM()
		VMOVDQU(Mem{Base: x, Disp: 8 + 16*ib}, t)
		VPSRLW(U8(4), t, th)
		q := YMM()
		VINSERTI128(U8(1), th, t.AsY(), q)
		VPAND(m4, q, q) // elements 0-15 the low nibbles, 16-31 the high
		qx := YMM()
		VPSHUFB(q, tbl, qx)
		qy := YMM()
		VMOVDQU(Mem{Base: y, Disp: q8KQS + 32*ib}, qy)
		ay := YMM()
		VPABSB(qy, ay)      // |y|, unsigned: 128 too
		VPSIGNB(qy, qx, qx) // x·sign(y): the levels are within ±127
		p := YMM()
		VPMADDUBSW(qx, ay, p)
		VPMADDWD(sv, p, p)
		VPADDD(p, acc, acc)
	}
	hi := XMM()
	VEXTRACTI128(U8(1), acc, hi)
	VPADDD(acc.AsX(), hi, hi)
	VPHADDD(hi, hi, hi)
	VPHADDD(hi, hi, hi)
	f := XMM()
	VCVTDQ2PS(hi, f)
	g := GP32()
	MOVWLZX(Mem{Base: x}, g)
	d := XMM()
	VMOVD(g, d)
	VCVTPH2PS(d, d)
	VMULSS(Mem{Base: y}, d, d) // f16(x.d)·y.d
	VMULSS(f, d, d)            // ·isum
	VADDSS(d, sum, sum)
	ADDQ(U32(iq4XSSize), x)
	ADDQ(U32(q8KSize), y)
	DECQ(n)
	JMP(LabelRef("loop"))

	Label("done")
	VZEROUPPER()
	Store(sum, ReturnIndex(0))
	RET()
}
