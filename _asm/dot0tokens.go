package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// dot0AVX2TokenCounts are the token counts of the AVX2 Q8_0, Q4_0 and Q5_0
// multi-token kernels (prompts without AVX-512's outer-product tiles).
var dot0AVX2TokenCounts = []int{4, 2}

// dot0AVX2Tokens emits dot<typ>AVX2t<T> (typ Q8_0, Q4_0 or Q5_0): one row of
// nb blocks against T tokens' q8Blocks (y, y+ys, …), out[t·os/4] =
// dot<typ>AVX2 of the row with token t. Each weight block is decoded once for
// the T tokens, to its signed values s (Q8_0's bytes, Q4_0's q−8, Q5_0's q−16
// with the fifth bit) and |s|; a token's exact isum is then Σ |s|·(y·sign(s))
// (VPSIGNB, VPMADDUBSW, VPMADDWD: exact while y > −128, which quantActQ8_0
// never makes), and its float steps are dot0AVX2's in its order: four blocks
// at a time, d = f16(x.d)·y.d, then the four steps into the token's sum in
// block order (blockStepsSS; Q4_0 fused), the last nb%4 blocks one at a time.
// The isums are exact integers whatever the order of their additions, so each
// output has the one-token kernel's bits.
func dot0AVX2Tokens(typ string, T int) {
	name := fmt.Sprintf("dot%sAVX2t%d", typ, T)
	TEXT(name, NOSPLIT, "func(x *byte, y *byte, ys int, nb int, out *float32, os int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets out[t·os/4] = dot%sAVX2(x, y + t·ys, nb) for t < %d (each weight", name, typ, T),
		"block decoded once for the tokens).")
	xs := map[string]int{"Q8_0": q80Size, "Q4_0": q40Size, "Q5_0": q50Size}[typ]
	x, y, ys, n := GP64(), GP64(), GP64(), GP64()
	Load(Param("x"), x)
	Load(Param("y"), y)
	Load(Param("ys"), ys)
	Load(Param("nb"), n)
	// Token t's blocks are at base[t/3] + ys·(t%3): y and y+3ys.
	y3 := GP64()
	LEAQ(Mem{Base: y, Index: ys, Scale: 2}, y3)
	ADDQ(ys, y3)
	tok := func(t, disp int) Mem {
		base := y
		if t >= 3 {
			base = y3
		}
		switch t % 3 {
		case 1:
			return Mem{Base: base, Index: ys, Scale: 1, Disp: disp}
		case 2:
			return Mem{Base: base, Index: ys, Scale: 2, Disp: disp}
		}
		return Mem{Base: base, Disp: disp}
	}
	signs := AllocLocal(4 * 32) // the decoded blocks' signed values
	sums := AllocLocal(4 * T)   // the tokens' running sums
	zero := XMM()
	VXORPS(zero, zero, zero)
	for t := 0; t < T; t++ {
		VMOVSS(zero, sums.Offset(4*t))
	}
	ones := YMM()
	VMOVDQU(ones16, ones)

	// decode sets abs to |s| of block b and stores s at signs + 32·slot.
	decode := func(b, slot int, abs VecVirtual) {
		s := YMM()
		switch typ {
		case "Q8_0":
			VMOVDQU(Mem{Base: x, Disp: b*xs + 2}, s)
		default:
			qsOff := 2
			if typ == "Q5_0" {
				qsOff = 6
			}
			m4 := YMM()
			VMOVDQU(nibbleMask, m4)
			t, th := XMM(), XMM()
			VMOVDQU(Mem{Base: x, Disp: b*xs + qsOff}, t)
			VPSRLW(U8(4), t, th)
			VINSERTI128(U8(1), th, t.AsY(), s)
			VPAND(m4, s, s) // elements 0-15 the low nibbles, 16-31 the high
			k := eights
			if typ == "Q5_0" {
				h := YMM()
				VPBROADCASTD(Mem{Base: x, Disp: b*xs + 2}, h)
				VPSHUFB(q5Spread, h, h)
				VPAND(q5Bits, h, h)
				VPCMPEQB(q5Bits, h, h)
				VPAND(bit4Mask, h, h)
				VPOR(h, s, s)
				k = sixteens
			}
			VPSUBB(k, s, s)
		}
		VPABSB(s, abs)
		VMOVDQU(s, signs.Offset(32*slot))
	}
	// lanes returns 8 int32 whose sum is token t's isum of block b (decoded
	// into slot with |s| in abs).
	lanes := func(t, b, slot int, abs VecVirtual) VecVirtual {
		p := YMM()
		VMOVDQU(tok(t, b*q8Size+q8QS), p)
		VPSIGNB(signs.Offset(32*slot), p, p)
		VPMADDUBSW(p, abs, p)
		VPMADDWD(ones, p, p)
		return p
	}

	Label("quad")
	CMPQ(n, U8(4))
	JL(LabelRef("one"))
	var abs [4]VecVirtual
	for b := range abs {
		abs[b] = YMM()
		decode(b, b, abs[b])
	}
	g := GP32()
	xh := XMM()
	for b := 0; b < 4; b++ {
		MOVWLZX(Mem{Base: x, Disp: b * xs}, g)
		if b == 0 {
			VMOVD(g, xh)
		} else {
			VPINSRW(U8(b), g, xh, xh)
		}
	}
	dx := XMM()
	VCVTPH2PS(xh, dx) // the 4 blocks' f16(x.d)
	for t := 0; t < T; t++ {
		var l [4]VecVirtual
		for b := range l {
			l[b] = lanes(t, b, b, abs[b])
		}
		p01, p23 := YMM(), YMM()
		VPHADDD(l[1], l[0], p01)
		VPHADDD(l[3], l[2], p23)
		VPHADDD(p23, p01, p01) // per 128 bits: the 4 blocks' sums of that half
		hi := XMM()
		VEXTRACTI128(U8(1), p01, hi)
		VPADDD(p01.AsX(), hi, hi)
		f := XMM()
		VCVTDQ2PS(hi, f)
		yd := XMM()
		VMOVSS(tok(t, 0), yd)
		for b := 1; b < 4; b++ {
			VINSERTPS(U8(b<<4), tok(t, b*q8Size), yd, yd)
		}
		d := XMM()
		VMULPS(yd, dx, d) // f16(x.d)·y.d
		sum := XMM()
		VMOVSS(sums.Offset(4*t), sum)
		blockStepsSS(typ, f, d, sum, 4)
		VMOVSS(sum, sums.Offset(4*t))
	}
	ADDQ(U32(4*xs), x)
	ADDQ(U32(4*q8Size), y)
	ADDQ(U32(4*q8Size), y3)
	SUBQ(U8(4), n)
	JMP(LabelRef("quad"))

	Label("one")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	a := YMM()
	decode(0, 0, a)
	MOVWLZX(Mem{Base: x}, g)
	db := XMM()
	VMOVD(g, db)
	VCVTPH2PS(db, db) // f16(x.d)
	for t := 0; t < T; t++ {
		lb := lanes(t, 0, 0, a)
		h := XMM()
		VEXTRACTI128(U8(1), lb, h)
		VPADDD(lb.AsX(), h, h)
		VPHADDD(h, h, h)
		VPHADDD(h, h, h)
		fb := XMM()
		VCVTDQ2PS(h, fb)
		d := XMM()
		VMULSS(tok(t, 0), db, d) // f16(x.d)·y.d
		sum := XMM()
		VMOVSS(sums.Offset(4*t), sum)
		blockStepSS(typ, fb, d, sum)
		VMOVSS(sum, sums.Offset(4*t))
	}
	ADDQ(U8(xs), x)
	ADDQ(U8(q8Size), y)
	ADDQ(U8(q8Size), y3)
	DECQ(n)
	JMP(LabelRef("one"))

	Label("done")
	out, os := GP64(), GP64()
	Load(Param("out"), out)
	Load(Param("os"), os)
	for t := 0; t < T; t++ {
		s := XMM()
		VMOVSS(sums.Offset(4*t), s)
		VMOVSS(s, Mem{Base: out})
		if t+1 < T {
			ADDQ(os, out)
		}
	}
	VZEROUPPER()
	RET()
}
