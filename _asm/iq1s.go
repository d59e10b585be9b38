package main

import (
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// dotIQ1SAVX2 emits the IQ1_S kernel in ggml_vec_dot_iq1_s_q8_K's float order
// (dotIQ1SRowGeneric): per 32 weights the low 8 bits of four 11-bit grid
// indices at 2+4ib and the uint16 at 34+2ib (the indices' top 3 bits, the 3-bit
// scale, the shift's sign); the grid's bytes are -1, 0 or 1, so VPSIGNB gives
// the products, VPMADDUBSW with ones their pair sums and VPMADDWD with the
// scale the 8 int32 lanes of positions 4k..4k+3. Per block and token the lanes
// go to 8 float lanes by one fused multiply-add with y.d·f16(x.d); the shifts'
// sum Σ ls·delta·(bsum pair) (one VPMADDWD with the eight groups' ±scales, each
// in two words) to a scalar acc1 by another (kept in out[t] with two or four
// tokens: AVX2 has too few registers); at the end sum8 of the lanes plus
// 0.125·acc1.
func dotIQ1SAVX2(tokens int) {
	x, y, n, grid := iq1Header("IQ1S", tokens)
	ys := tokenRows(y, tokens)
	facc := make([]VecVirtual, tokens)
	for t := range facc {
		facc[t] = YMM()
		VXORPS(facc[t], facc[t], facc[t])
	}
	var acc1 VecVirtual
	var out GPVirtual
	if tokens == 1 {
		acc1 = XMM()
		VXORPS(acc1, acc1, acc1)
	} else {
		out = GP64()
		Load(Param("out"), out)
		z := GP32()
		XORL(z, z)
		for t := range ys {
			MOVL(z, Mem{Base: out, Disp: 4 * t})
		}
	}
	onesB := YMM()
	VMOVDQU(byteOnes, onesB)

	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	acc := make([]VecVirtual, tokens)
	for t := range acc {
		acc[t] = YMM()
		VPXOR(acc[t], acc[t], acc[t])
	}
	for ib := 0; ib < 8; ib++ {
		h := GP64()
		MOVWQZX(Mem{Base: x, Disp: 34 + 2*ib}, h)
		g := gather8(grid, iq1sIndex(x, h, ib))
		SHRQ(U8(12), h)
		ANDQ(U8(7), h)
		LEAQ(Mem{Base: h, Index: h, Scale: 1, Disp: 1}, h)
		sc := YMM()
		VMOVD(h.As32(), sc.AsX())
		VPBROADCASTW(sc.AsX(), sc)
		for t, yt := range ys {
			q := YMM()
			VMOVDQU(Mem{Base: yt, Disp: q8KQS + 32*ib}, q)
			VPSIGNB(g, q, q)
			p := YMM()
			VPMADDUBSW(q, onesB, p)
			VPMADDWD(sc, p, p)
			VPADDD(p, acc[t], acc[t])
		}
	}
	// The eight groups' ±scales 2s+1 (negated where bit 15 is set), each in
	// both words of a dword: the multipliers of the bsums' pairs.
	c := YMM()
	{
		qh := XMM()
		VMOVDQU(Mem{Base: x, Disp: 34}, qh)
		ls, m, f := XMM(), XMM(), XMM()
		VPCMPEQW(f, f, f)
		VPSRLW(U8(13), f, f)
		VPSLLW(U8(1), f, f) // 14 in every word
		VPSRLW(U8(11), qh, ls)
		VPAND(f, ls, ls)
		VPOR(ones16, ls, ls)
		VPSRAW(U8(15), qh, m)
		VPXOR(m, ls, ls)
		VPSUBW(m, ls, ls)
		t := YMM()
		VPMOVZXWD(ls, c)
		VPSLLD(U8(16), c, t)
		VPOR(t, c, c)
	}
	dx := XMM()
	{
		g := GP32()
		MOVWLZX(Mem{Base: x}, g)
		VMOVD(g, dx)
		VCVTPH2PS(dx, dx)
	}
	for t, yt := range ys {
		d := XMM()
		VMULSS(Mem{Base: yt}, dx, d) // y.d·f16(x.d)
		dv := YMM()
		VBROADCASTSS(d, dv)
		VCVTDQ2PS(acc[t], acc[t])
		VFMADD231PS(acc[t], dv, facc[t])
		p := YMM()
		VPMADDWD(Mem{Base: yt, Disp: q8KBsums}, c, p)
		s := hsumInt(p)
		if tokens == 1 {
			VFMADD231SS(s, d, acc1)
		} else {
			a := XMM()
			VMOVSS(Mem{Base: out, Disp: 4 * t}, a)
			VFMADD231SS(s, d, a)
			VMOVSS(a, Mem{Base: out, Disp: 4 * t})
		}
		ADDQ(U32(q8KSize), yt)
	}
	ADDQ(U32(50), x)
	DECQ(n)
	JMP(LabelRef("loop"))

	Label("done")
	eighth := XMM()
	{
		g := GP32()
		MOVL(U32(math.Float32bits(0.125)), g)
		VMOVD(g, eighth)
	}
	for t := range facc {
		s := hsum8(facc[t])
		if tokens == 1 {
			VFMADD231SS(acc1, eighth, s) // exact product: sum8 + 0.125·acc1
			VZEROUPPER()
			Store(s, ReturnIndex(0))
			RET()
			return
		}
		a := XMM()
		VMOVSS(Mem{Base: out, Disp: 4 * t}, a)
		VFMADD231SS(a, eighth, s)
		VMOVSS(s, Mem{Base: out, Disp: 4 * t})
	}
	VZEROUPPER()
	RET()
}

// iq1sIndex returns the index function of the four grid entries of IQ1_S
// sub-block ib of the block at x, h holding its qh word: the low 8 bits from
// qs, the top 3 from h.
func iq1sIndex(x, h GPVirtual, ib int) func(l int) GPVirtual {
	return func(l int) GPVirtual {
		r, t := GP64(), GP64()
		MOVQ(h, t)
		if l > 0 {
			SHRQ(U8(3*l), t)
		}
		ANDQ(U8(7), t)
		SHLQ(U8(8), t)
		MOVBQZX(Mem{Base: x, Disp: 2 + 4*ib + l}, r)
		ORQ(t, r)
		return r
	}
}
