package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// AVX2 kernels of one IQ4_NL or IQ4_XS row against 4 or 8 tokens (issue 32:
// prompts on AVX2 machines, which have no outer-product tiles): each block's
// levels are looked up once for the tokens, each token's integer sums are
// the row kernel's (exact), and the float steps run with one lane per token
// in the row kernel's order (IQ4_NL fused, IQ4_XS not), so every output has
// the one-token kernel's bits.

// iq4TokenSums reduces the eight-dword sums p[t] of T (4 or 8) tokens to one
// vector of T dwords in token order (an xmm for 4, a ymm for 8).
func iq4TokenSums(p []VecVirtual) VecVirtual {
	quad := func(p []VecVirtual) VecVirtual {
		a, b := YMM(), YMM()
		VPHADDD(p[1], p[0], a)
		VPHADDD(p[3], p[2], b)
		VPHADDD(b, a, a) // per 128 bits: the four tokens' sums of that half
		return a
	}
	lo := quad(p[:4])
	if len(p) == 4 {
		hi := XMM()
		VEXTRACTI128(U8(1), lo, hi)
		VPADDD(lo.AsX(), hi, hi)
		return hi
	}
	hi := quad(p[4:])
	a, b := YMM(), YMM()
	VPERM2I128(U8(0x20), hi, lo, a) // the low halves: tokens 0-3, 4-7
	VPERM2I128(U8(0x31), hi, lo, b) // the high halves
	VPADDD(a, b, a)
	return a
}

// iq4TokenD returns f16(x.d)·y_t.d for the T tokens (row(t, 0) is token t's
// block), in a vector like iq4TokenSums'.
func iq4TokenD(x GPVirtual, row func(t, disp int) Mem, T int) VecVirtual {
	g := GP32()
	MOVWLZX(Mem{Base: x}, g)
	xd := XMM()
	VMOVD(g, xd)
	VCVTPH2PS(xd, xd)
	yd := func(t0 int) VecVirtual {
		v := XMM()
		VMOVSS(row(t0, 0), v)
		for t := 1; t < 4; t++ {
			VINSERTPS(U8(t<<4), row(t0+t, 0), v, v)
		}
		return v
	}
	lo := yd(0)
	if T == 4 {
		VBROADCASTSS(xd, xd)
		VMULPS(lo, xd, lo)
		return lo
	}
	hi := yd(4)
	y := YMM()
	VINSERTF128(U8(1), hi, lo.AsY(), y)
	xb := YMM()
	VBROADCASTSS(xd, xb)
	VMULPS(y, xb, y)
	return y
}

// iq4TokenVec is a vector of T float32 (an xmm for 4, a ymm for 8).
func iq4TokenVec(T int) VecVirtual {
	if T == 4 {
		return XMM()
	}
	return YMM()
}

// iq4TokenParams loads x, n, out and the token rows' addressing (tokenRows8).
func iq4TokenParams() (x, n GPVirtual, row func(t, disp int) Mem, advance func(int)) {
	x, y, n := params3()
	row, advance = tokenRows8(y)
	return
}

// iq4Levels returns the 32 signed levels of the 16 bytes at m (low nibbles
// then high) and, if abs, their absolute values.
func iq4Levels(m Mem, m4, tbl VecVirtual, abs bool) (qx, ax VecVirtual) {
	t, th := XMM(), XMM()
	VMOVDQU(m, t)
	VPSRLW(U8(4), t, th)
	q := YMM()
	VINSERTI128(U8(1), th, t.AsY(), q)
	VPAND(m4, q, q)
	qx = YMM()
	if abs {
		ax = YMM()
	}
	VPSHUFB(q, tbl, qx)
	if abs {
		VPABSB(qx, ax)
	}
	return
}

// iq4TokenProduct returns the pair sums |x|·(y·sign(x)) of 32 bytes of token
// row m (int16, exact: |x|, |y| ≤ 127).
func iq4TokenProduct(m Mem, qx, ax VecVirtual) VecVirtual {
	qy, p := YMM(), YMM()
	VMOVDQU(m, qy)
	VPSIGNB(qx, qy, qy)
	VPMADDUBSW(qy, ax, p)
	return p
}

// iq4StoreTokens stores the T sums of sum to out.
func iq4StoreTokens(sum VecVirtual) {
	out := GP64()
	Load(Param("out"), out)
	VMOVUPS(sum, Mem{Base: out})
	VZEROUPPER()
	RET()
}

// dotIQ4NLAVX2Tokens emits dotIQ4_NLAVX2x{T}: dotIQ4_NLAVX2's blocks, each
// looked up once for T tokens.
func dotIQ4NLAVX2Tokens(T int) {
	name := fmt.Sprintf("dotIQ4_NLAVX2x%d", T)
	TEXT(name, NOSPLIT, "func(x, y *byte, n, stride int, out *float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets out[t] = dotIQ4_NLAVX2(x, y+t·stride, n) for t < %d.", name, T))
	x, n, row, advance := iq4TokenParams()
	ones, m4, tbl := YMM(), YMM(), YMM()
	VMOVDQU(ones16, ones)
	VMOVDQU(nibbleMask, m4)
	VMOVDQU(iq4nlTable, tbl)
	sum := iq4TokenVec(T)
	VXORPS(sum, sum, sum)

	Label(name + "_loop")
	TESTQ(n, n)
	JZ(LabelRef(name + "_done"))
	qx, ax := iq4Levels(Mem{Base: x, Disp: 2}, m4, tbl, true)
	p := make([]VecVirtual, T)
	for t := range p {
		p[t] = iq4TokenProduct(row(t, q8QS), qx, ax)
		VPMADDWD(ones, p[t], p[t])
	}
	f := iq4TokenSums(p)
	VCVTDQ2PS(f, f)
	d := iq4TokenD(x, row, T)
	VFMADD231PS(f, d, sum) // sum = fma(isum, f16(x.d)·y.d, sum), per token
	ADDQ(U8(q40Size), x)
	advance(q8Size)
	DECQ(n)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_done")
	iq4StoreTokens(sum)
}

// dotIQ4XSAVX2Tokens emits dotIQ4XSAVX2x{T}: dotIQ4XSAVX2's blocks, each
// group's scale and levels found once for T tokens.
func dotIQ4XSAVX2Tokens(T int) {
	name := fmt.Sprintf("dotIQ4XSAVX2x%d", T)
	TEXT(name, NOSPLIT, "func(x, y *byte, n, stride int, out *float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets out[t] = dotIQ4XSAVX2(x, y+t·stride, n) for t < %d.", name, T))
	x, n, row, advance := iq4TokenParams()
	m4, tbl := YMM(), YMM()
	VMOVDQU(nibbleMask, m4)
	VMOVDQU(iq4nlTable, tbl)
	sum := iq4TokenVec(T)
	VXORPS(sum, sum, sum)

	Label(name + "_loop")
	TESTQ(n, n)
	JZ(LabelRef(name + "_done"))
	sh := GP32()
	MOVWLZX(Mem{Base: x, Disp: 2}, sh)
	acc := make([]VecVirtual, T)
	for t := range acc {
		acc[t] = YMM()
		VPXOR(acc[t], acc[t], acc[t])
	}
	for ib := 0; ib < 8; ib++ {
		// ls = (low nibble ib%2 of scales_l[ib/2] | bits 2ib..2ib+1 of
		// scales_h << 4) − 32, as int16 in every lane (dotIQ4XSAVX2's).
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
		qx, _ := iq4Levels(Mem{Base: x, Disp: 8 + 16*ib}, m4, tbl, false)
		for t := range acc {
			// |y| and x·sign(y), as dotIQ4XSAVX2 (y = −128 too: the
			// K-quant kernels take the whole int8 range).
			qy, ay, p := YMM(), YMM(), YMM()
			VMOVDQU(row(t, q8KQS+32*ib), qy)
			VPABSB(qy, ay)
			VPSIGNB(qy, qx, qy)
			VPMADDUBSW(qy, ay, p)
			VPMADDWD(sv, p, p)
			VPADDD(p, acc[t], acc[t])
		}
	}
	f := iq4TokenSums(acc)
	VCVTDQ2PS(f, f)
	d := iq4TokenD(x, row, T)
	VMULPS(f, d, d) // (f16(x.d)·y.d)·isum
	VADDPS(d, sum, sum)
	ADDQ(U32(iq4XSSize), x)
	advance(q8KSize)
	DECQ(n)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_done")
	iq4StoreTokens(sum)
}
