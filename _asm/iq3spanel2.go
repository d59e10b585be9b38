package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// IQ3_S byte panels on AVX2 (engine/kernels/iq3spanel2.go): a row's block is
// iq3sAVX2Slot bytes: 256 signed bytes grid × sign (|v| ≤ 15) in four chunks
// of 64, chunk c holding sub-blocks A = 2c and B = 2c+1 as two registers:
// register p, dword m is (A's values 4m+2p, 4m+2p+1, B's values 4m+2p,
// 4m+2p+1); then per chunk the scale words (sc_A, sc_B) eight times (32
// bytes); then 8 dwords, lane k's corr −128·Σ_ib sc_ib·Σ_j v[32ib+4k+j]. The
// tokens' quants are bytes q+128 in the same order.
const (
	iq3sAVX2Slot  = 416 // bytes of one row's block
	iq3sAVX2Scale = 256 // offset of the scale words
	iq3sAVX2Corr  = 384 // offset of the corr dwords
)

// iq3sPanelAVX2 emits iq3sPanelAVX2r4t3: 4 rows by 3 tokens of the AVX2 byte
// panels. A chunk's two registers go through VPMADDUBSW (the quants q+128,
// unsigned, by the signed v: a word is a pair's sum, |·| ≤ 2·255·15 = 7650),
// VPADDW (a dword then holds A's and B's four-value sums of lane m, each
// |·| ≤ 15300) and VPMADDWD by (sc_A, sc_B): lane m's sc_A·ΣA + sc_B·ΣB,
// added to the pair's accumulator, which starts at the row's corr. So each
// of the 8 dwords is dotIQ3SRowGeneric's lane exactly (integer sums in any
// order), and the float step is the row kernel's: d = dx·dy, then
// acc = fma(d, float(lane), acc), acc kept on the stack; at the end sum8's
// order, ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)). 5 vector operations a
// chunk and pair: 12 accumulators, 2 quants and 2 temporaries fill Y0–Y15.
func iq3sPanelAVX2() {
	const R, T = 4, 3
	name := "iq3sPanelAVX2r4t3"
	TEXT(name, NOSPLIT, "func(w, a *byte, as int, dx, dy *float32, dys, nb int, out *float32, os int)")
	Pragma("noescape")
	Doc(name+" sets out[t·os/4+i] (i < 4, t < 3) to dotIQ3SRowGeneric of the AVX2",
		"byte-panel rows i at w+416·i (block b at +16·416·b, scales dx+4·i+64·b) and the",
		"tokens t at a+256·t (block b at +as·b, scales dy+4·t+dys·b), nb blocks (AVX2).")
	w := Load(Param("w"), GP64())
	a := Load(Param("a"), GP64())
	as := Load(Param("as"), GP64())
	dx := Load(Param("dx"), GP64())
	dy := Load(Param("dy"), GP64())
	dys := Load(Param("dys"), GP64())
	n := Load(Param("nb"), GP64())

	facc := AllocLocal(R * T * 32)
	fmem := func(i, t int) Mem { return facc.Offset(32 * (i*T + t)) }
	{
		z := YMM()
		VXORPS(z, z, z)
		for i := 0; i < R; i++ {
			for t := 0; t < T; t++ {
				VMOVUPS(z, fmem(i, t))
			}
		}
	}

	Label(name + "_loop")
	var acc [R][T]VecVirtual
	for i := 0; i < R; i++ {
		for t := 0; t < T; t++ {
			acc[i][t] = YMM()
			VMOVDQU(Mem{Base: w, Disp: iq3sAVX2Slot*i + iq3sAVX2Corr}, acc[i][t])
		}
	}
	for c := 0; c < 4; c++ {
		for t := 0; t < T; t++ {
			q0, q1 := YMM(), YMM()
			VMOVDQU(Mem{Base: a, Disp: 256*t + 64*c}, q0)
			VMOVDQU(Mem{Base: a, Disp: 256*t + 64*c + 32}, q1)
			for i := 0; i < R; i++ {
				p0, p1 := YMM(), YMM()
				VPMADDUBSW(Mem{Base: w, Disp: iq3sAVX2Slot*i + 64*c}, q0, p0)
				VPMADDUBSW(Mem{Base: w, Disp: iq3sAVX2Slot*i + 64*c + 32}, q1, p1)
				VPADDW(p1, p0, p0)
				VPMADDWD(Mem{Base: w, Disp: iq3sAVX2Slot*i + iq3sAVX2Scale + 32*c}, p0, p0)
				VPADDD(p0, acc[i][t], acc[i][t])
			}
		}
	}
	for t := 0; t < T; t++ {
		dyv := YMM()
		VBROADCASTSS(Mem{Base: dy, Disp: 4 * t}, dyv)
		for i := 0; i < R; i++ {
			d := YMM()
			VBROADCASTSS(Mem{Base: dx, Disp: 4 * i}, d)
			VMULPS(dyv, d, d) // f16(x.d)·y.d
			z := acc[i][t]
			VCVTDQ2PS(z, z)
			VFMADD213PS(fmem(i, t), d, z) // z = d·z + acc, one rounding
			VMOVUPS(z, fmem(i, t))
		}
	}
	ADDQ(U32(iqPanelGroup*iq3sAVX2Slot), w)
	ADDQ(as, a)
	ADDQ(U8(4*iqPanelGroup), dx)
	ADDQ(dys, dy)
	DECQ(n)
	JNZ(LabelRef(name + "_loop"))

	// sum8: ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)).
	out := Load(Param("out"), GP64())
	os := Load(Param("os"), GP64())
	for t := 0; t < T; t++ {
		for i := 0; i < R; i++ {
			v := YMM()
			VMOVUPS(fmem(i, t), v)
			hi := XMM()
			VEXTRACTF128(U8(1), v, hi)
			x := v.AsX()
			VADDPS(hi, x, x) // a0+a4, a1+a5, a2+a6, a3+a7
			VMOVHLPS(x, x, hi)
			VADDPS(hi, x, x) // (a0+a4)+(a2+a6), (a1+a5)+(a3+a7)
			VMOVSHDUP(x, hi)
			VADDSS(hi, x, x)
			VMOVSS(x, Mem{Base: out, Disp: 4 * i})
		}
		if t+1 < T {
			ADDQ(os, out)
		}
	}
	VZEROUPPER()
	RET()
}
