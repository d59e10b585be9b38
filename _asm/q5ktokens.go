package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// dotQ5KAVX512Tokens emits dotQ5KAVX512x8 or dotQ5KAVX512x16: one Q5_K row
// against T = 8 or 16 activation rows (stride bytes apart) with AVX-512BW and
// VNNI, for decoding steps of many sequences and prompts. Each pair of
// sub-blocks is unpacked once for the T tokens as the Q5_K tiles unpack it (64
// 5-bit quants per register: the nibbles by a word shift, the fifth bits from qh
// by q5kShiftBits), and each token keeps its own int32 lanes in a 512-bit
// register (exact in any order). At the block's end lanes k and k+8 are added
// (dotQ5KAVX2's lane k), converted, and added times y.d·f16(x.d) (one
// broadcast multiply, the same product in every lane) to the token's float
// lanes, kept on the stack, in one fused multiply-add; the mins go as in
// q5KMins, four tokens per xmm: msum (exact), converted, −(f16(x.dmin)·y.d)·msum
// fused into the token's scalar (the same rounding lane by lane), also on the
// stack. At the end the lanes are reduced as sum8
// and the scalar added: out[t] has the bits of dotQ5KAVX2 on token t alone (and
// of dotQ5KRowGeneric, llama.cpp's order), whatever T.
func dotQ5KAVX512Tokens(T int) {
	evex = true
	defer func() { evex = false }()
	name := fmt.Sprintf("dotQ5KAVX512x%d", T)
	TEXT(name, NOSPLIT, "func(x, y *byte, n, stride int, out *float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets out[t] = dotQ5KAVX2(x, y+t·stride, n) for t < %d with", name, T),
		"AVX-512BW and VNNI (one weight block unpacked for all the tokens; each",
		"token's float steps as there).")
	x, y, n := params3()
	stride := GP64()
	Load(Param("stride"), stride)
	toks := newRowSet(y, stride, T)

	local := AllocLocal(32 * T) // the float lanes
	summs := AllocLocal(4 * T)  // the mins' scalars
	z := YMM()
	VXORPS(z, z, z)
	for t := 0; t < T; t++ {
		VMOVUPS(z, local.Offset(32*t))
	}
	for t := 0; t < T; t += 8 {
		VMOVUPS(z, summs.Offset(4*t))
	}
	m4, shr4, ones := ZMM(), ZMM(), ZMM()
	VMOVDQU64(nibbleMask, m4)
	VMOVDQU64(q4kShiftHigh, shr4)
	VMOVDQU64(byteOnes, ones)

	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	u := q4KScales(x)
	// The mins, each twice (its sub-block's two bsums), as words; and
	// f16(x.dmin) for q5KMins' product.
	md := XMM()
	VPSHUFB(q4kMinPairs, u, md)
	mw := YMM()
	VPMOVZXBW(md, mw)
	g := GP32()
	MOVWLZX(Mem{Base: x, Disp: 2}, g)
	dmin := XMM()
	VMOVD(g, dmin)
	VCVTPH2PS(dmin, dmin)
	dminv := XMM()
	VBROADCASTSS(dmin, dminv)
	for g := 0; g < T; g += 4 {
		// Four tokens' msums at once: each token's eight products, folded
		// pairwise by unpacking (exact in int32, any order), to [a b c d].
		ms := make([]VecVirtual, 4)
		for i := range ms {
			ms[i] = YMM()
			VPMADDWD(toks.at(g+i).Offset(q8KBsums), mw, ms[i])
		}
		pair := func(a, b VecVirtual) VecVirtual {
			lo, hi := YMM(), YMM()
			VPUNPCKLDQ(b, a, lo) // a0 b0 a1 b1 | a4 b4 a5 b5
			VPUNPCKHDQ(b, a, hi) // a2 b2 a3 b3 | a6 b6 a7 b7
			VPADDD(hi, lo, lo)
			return lo
		}
		ab, cd := pair(ms[0], ms[1]), pair(ms[2], ms[3])
		lo, hi := YMM(), YMM()
		VPUNPCKLQDQ(cd, ab, lo)
		VPUNPCKHQDQ(cd, ab, hi)
		VPADDD(hi, lo, lo) // a b c d | a b c d (the two halves' parts)
		m := XMM()
		VEXTRACTI32X4(U8(1), lo, m)
		VPADDD(m, lo.AsX(), m)
		VCVTDQ2PS(m, m) // the four msums
		// The four y.d, times f16(x.dmin) lane by lane (q5KMins' VMULSS).
		dy := XMM()
		VMOVSS(toks.at(g), dy)
		for i := 1; i < 4; i++ {
			VINSERTPS(U8(0x10*i), toks.at(g+i), dy, dy)
		}
		VMULPS(dminv, dy, dy)
		sm := XMM()
		VMOVUPS(summs.Offset(4*g), sm)
		VFNMADD231PS(m, dy, sm) // summs −= dmin·msum, each rounded once
		VMOVUPS(sm, summs.Offset(4*g))
	}
	smw := YMM()
	VPMOVZXBW(u, smw)
	sc := ZMM()
	VSHUFI64X2(U8(0), smw.AsZ(), smw.AsZ(), sc) // the scales in all four lanes

	acc := make([]VecVirtual, T)
	for t := range acc {
		acc[t] = ZMM()
		VPXORD(acc[t], acc[t], acc[t])
	}
	for j := 0; j < 4; j++ {
		// As the Q5_K tiles: elements 64j..64j+63, the low nibbles (sub-block
		// 2j) in the low half, the high ones (2j+1) in the high half, each with
		// its fifth bit (bit 2j or 2j+1 of qh[l]) moved to bit 4.
		qq := ZMM()
		VBROADCASTI64X4(Mem{Base: x, Disp: 48 + 32*j}, qq)
		VPSRLVW(shr4, qq, qq)
		VPANDD(m4, qq, qq)
		hb := ZMM()
		VBROADCASTI64X4(Mem{Base: x, Disp: 16}, hb)
		VPSRLVW(q5kShiftBits.Offset(64*j), hb, hb)
		VPANDD(ones, hb, hb)
		VPSLLW(U8(4), hb, hb)
		VPORD(hb, qq, qq)
		s := ZMM()
		VPSHUFB(q4kShuf512.Offset(64*j), sc, s)
		for t := range acc {
			p := ZMM()
			VPMADDUBSW(toks.at(t).Offset(q8KQS+64*j), qq, p)
			raw("VPDPWSSD", s, p, acc[t])
		}
	}
	dv := XMM()
	t16 := GP32()
	MOVWLZX(Mem{Base: x}, t16)
	VMOVD(t16, dv)
	VCVTPH2PS(dv, dv)
	ddv := YMM()
	VBROADCASTSS(dv, ddv)
	addTokenLanes(acc, ddv, toks, local) // y.d·f16(x.d), as q5KLanes' VMULSS

	ADDQ(U32(q5KSize), x)
	toks.advance(q8KSize)
	DECQ(n)
	JMP(LabelRef("loop"))

	Label("done")
	sums := make([]VecVirtual, T)
	for t := range sums {
		fa := YMM()
		VMOVUPS(local.Offset(32*t), fa)
		r := hsum8(fa)
		VADDSS(summs.Offset(4*t), r, r)
		sums[t] = r
	}
	storeSums(sums)
}
