package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/ir"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// q4kPairScales gathers, from q4KScales' bytes, the even sub-blocks' scales
// twice each (bytes 0-7) and the odd ones' (bytes 8-15): once widened to words,
// the words VPMADDWD takes against dotQ4KAVX2T's sums of the even and odd
// sub-blocks.
var q4kPairScales Mem

func q4KAVX2TConstants() {
	q4kPairScales = rodata("q4kPairScales", []byte{0, 0, 2, 2, 4, 4, 6, 6, 1, 1, 3, 3, 5, 5, 7, 7})
}

// dotQ4KAVX2T emits dotQ4KAVX2t<T> (T = 2 … 9): one Q4_K row against T
// activation rows in the transposed layout of acts.q8kA (permuteQ4KAVX2:
// q8KBlocks whose quants are reordered, d and bsums as in q8k; stride bytes
// apart), on AVX2, for a speculative verification step's few tokens and for
// prompts. The weight block's four 32-byte groups of nibbles go through a 4×4
// dword transpose in each 128-bit lane (8 unpacks, once for the T tokens), so
// that register P_c holds in dword i of lane L the bytes 16L+4c … 16L+4c+3 of
// group i: its low nibbles are quants of sub-block 2i, its high ones of 2i+1,
// in every P_c at the same place. So the four products (VPMADDUBSW) of a
// token's low nibbles can be added as words before one VPMADDWD by the even
// sub-blocks' scales (|4·2·15·128| < 2^15: exact), and the same for the high
// nibbles: 8 VPMADDUBSW, 6 VPADDW, 2 VPMADDWD and a VPADDD per token and
// block, against 8, 0, 8 and 8 in dotQ4KAVX2x8. The integer sums isum and
// msum are exact (any order gives them), and each token's float steps are the
// reference's, lane by lane: d = f16(x.d)·y.d, dmin = f16(x.dmin)·y.d,
// sum += d·float32(isum) − dmin·float32(msum) (VHSUBPS of the two rounded
// products: one rounding, as VSUBPS). So out[t] has the bits of dotQ4KAVX2 on
// token t alone (and of the Go reference), whatever T.
//
// Stack: each pair of tokens' [isum, msum, isum, msum] (16 bytes, read back
// 16 bytes at a time), the float
// sums (32 bytes per 8 tokens, in the lane order of VHSUBPS), the scale and
// mins words. Only Y0-Y15 (VEX: AVX2 CPUs have no others): avo takes X16 and
// up when more are live, so the mins' words wait on the stack.
func dotQ4KAVX2T(T int) {
	name := fmt.Sprintf("dotQ4KAVX2t%d", T)
	TEXT(name, NOSPLIT, "func(x, y *byte, n, stride int, out *float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets out[t] = dotQ4KAVX2(x, token t, n) for t < %d, the tokens'", name, T),
		"blocks in acts.q8kA's layout at y, stride bytes apart (weight block unpacked once).")
	x, y, n := GP64(), GP64(), GP64()
	Load(Param("x"), x)
	Load(Param("y"), y)
	Load(Param("n"), n)
	stride := GP64()
	Load(Param("stride"), stride)
	toks := newRowSet(y, stride, T)

	quads := (T + 3) / 4
	octs := (quads + 1) / 2
	ints := AllocLocal(32 * quads) // pair p's [i, m, i, m] at 16p
	sums := AllocLocal(32 * octs)
	scw := AllocLocal(96) // even sub-blocks' scale words, the odd ones', the mins'
	z := YMM()
	VXORPS(z, z, z)
	for o := 0; o < octs; o++ {
		VMOVUPS(z, sums.Offset(32*o))
	}
	for q := 0; q < quads; q++ {
		VMOVDQU(z, ints.Offset(32*q))
	}

	// The loop's start on a 32-byte boundary (a precaution: its effect was
	// within the loaded machine's noise).
	Instruction(&ir.Instruction{Opcode: "PCALIGN", Operands: []Op{Imm(32)}})
	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	u := q4KScales(x)
	sb := XMM()
	VPSHUFB(q4kPairScales, u, sb)
	sw := YMM()
	VPMOVZXBW(sb, sw)
	se, so := YMM(), YMM()
	VPERMQ(U8(0x44), sw, se)
	VPERMQ(U8(0xee), sw, so)
	VMOVDQU(se, scw)
	VMOVDQU(so, scw.Offset(32))
	md := XMM()
	VPSHUFB(q4kMinPairs, u, md) // each min twice, for the two bsums of its sub-block
	mw := YMM()
	VPMOVZXBW(md, mw)
	VMOVDQU(mw, scw.Offset(64)) // on the stack: with 9 tokens a register short

	// The 4×4 dword transpose in each lane, then the nibbles.
	qr := make([]VecVirtual, 4)
	for i := range qr {
		qr[i] = YMM()
		VMOVDQU(Mem{Base: x, Disp: 16 + 32*i}, qr[i])
	}
	t0, t1, t2, t3 := YMM(), YMM(), YMM(), YMM()
	VPUNPCKLDQ(qr[1], qr[0], t0)
	VPUNPCKHDQ(qr[1], qr[0], t1)
	VPUNPCKLDQ(qr[3], qr[2], t2)
	VPUNPCKHDQ(qr[3], qr[2], t3)
	P := []VecVirtual{YMM(), YMM(), YMM(), YMM()}
	VPUNPCKLQDQ(t2, t0, P[0])
	VPUNPCKHQDQ(t2, t0, P[1])
	VPUNPCKLQDQ(t3, t1, P[2])
	VPUNPCKHQDQ(t3, t1, P[3])
	lo, hi := make([]VecVirtual, 4), make([]VecVirtual, 4)
	for c := range P {
		lo[c], hi[c] = YMM(), YMM()
		VPSRLW(U8(4), P[c], hi[c])
		VPAND(nibbleMask, hi[c], hi[c])
		VPAND(nibbleMask, P[c], lo[c])
	}

	// Each token: its isum lanes and msum lanes folded together; a pair's
	// [isum, msum] twice-folded to an xmm on the stack.
	var pend VecVirtual
	for t := 0; t < T; t++ {
		yt := toks.at(t)
		var acc VecVirtual
		for h, w := range [][]VecVirtual{lo, hi} {
			s := YMM()
			VPMADDUBSW(yt.Offset(q8KQS+32*h), w[0], s)
			for c := 1; c < 4; c++ {
				p := YMM()
				VPMADDUBSW(yt.Offset(q8KQS+64*c+32*h), w[c], p)
				VPADDW(p, s, s)
			}
			VPMADDWD(scw.Offset(32*h), s, s)
			if h == 0 {
				acc = s
			} else {
				VPADDD(s, acc, acc)
			}
		}
		m := YMM()
		VMOVDQU(yt.Offset(q8KBsums), m)
		VPMADDWD(scw.Offset(64), m, m)
		// Unpacks and adds (one µop each) rather than VPHADDD.
		v, vh := YMM(), YMM()
		VPUNPCKLDQ(m, acc, v)
		VPUNPCKHDQ(m, acc, vh)
		VPADDD(vh, v, v) // [i0+i2 m0+m2 i1+i3 m1+m3 | the same of 4-7]
		if t%2 == 0 && t+1 < T {
			pend = v
			continue
		}
		a := v
		if t%2 == 1 {
			a = pend
		}
		w, wh := YMM(), YMM()
		VPUNPCKLQDQ(v, a, w)
		VPUNPCKHQDQ(v, a, wh)
		VPADDD(wh, w, w) // [i m i' m' | …] of tokens t-1 and t (or t twice)
		hx := XMM()
		VEXTRACTI128(U8(1), w, hx)
		VPADDD(hx, w.AsX(), hx)
		VMOVDQU(hx, ints.Offset(16*(t/2)))
	}

	// The float steps, four tokens a ymm: [d dmin d dmin …]·[y.d twice per
	// token], times the converted sums, and VHSUBPS of two quads' products.
	g := GP32()
	MOVL(Mem{Base: x}, g)
	dd := XMM()
	VMOVD(g, dd)
	VCVTPH2PS(dd, dd) // d dmin
	ddm := YMM()
	VBROADCASTSD(dd, ddm)
	prods := make([]VecVirtual, quads)
	for q := 0; q < quads; q++ {
		ydx := XMM()
		VMOVSS(toks.at(4*q), ydx)
		for i := 1; i < 4 && 4*q+i < T; i++ {
			VINSERTPS(U8(i<<4), toks.at(4*q+i), ydx, ydx)
		}
		l, h := XMM(), XMM()
		VUNPCKLPS(ydx, ydx, l)
		VUNPCKHPS(ydx, ydx, h)
		yd := YMM()
		VINSERTF128(U8(1), h, l.AsY(), yd)
		VMULPS(yd, ddm, yd) // d·y.d, dmin·y.d
		// The two pairs' xmm as stored (a 32-byte load of two 16-byte stores
		// would miss store forwarding).
		iv := YMM()
		VMOVDQU(ints.Offset(32*q), iv.AsX())
		VINSERTI128(U8(1), ints.Offset(32*q+16), iv, iv)
		f := YMM()
		VCVTDQ2PS(iv, f)
		VMULPS(f, yd, yd)
		prods[q] = yd
	}
	for o := 0; o < octs; o++ {
		a, b := prods[2*o], prods[2*o]
		if 2*o+1 < quads {
			b = prods[2*o+1]
		}
		df := YMM()
		VHSUBPS(b, a, df)
		VADDPS(sums.Offset(32*o), df, df)
		VMOVUPS(df, sums.Offset(32*o))
	}

	ADDQ(U32(q4KSize), x)
	toks.advance(q8KSize)
	DECQ(n)
	JMP(LabelRef("loop"))

	Label("done")
	out := GP64()
	Load(Param("out"), out)
	for t := 0; t < T; t++ {
		// Token t of quad q (pair t/2 in lane (t/2)%2, first or second of it):
		// VHSUBPS put quad 2o's pair results at lane positions 0-1, 2o+1's at 2-3.
		q := t / 4
		o, L, k := q/2, (t/2)%2, 2*(q%2)+t%2
		r := GP32()
		MOVL(sums.Offset(32*o+16*L+4*k), r)
		MOVL(r, Mem{Base: out, Disp: 4 * t})
	}
	VZEROUPPER()
	RET()
}
