package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// iq2AVX2Blk is the bytes of a block of the AVX2 panels: 16 records of
// iq2OuterRec bytes (signed values v where the AVX-512 panels have v+43; the
// rows' group scales), then the 16 rows' corrections −128·Σ_j s_j·Σv_j.
const iq2AVX2Blk = iqPanelGroup*iq2OuterRec + 64

// iq2OuterAVX2 emits iq2OuterAVX2r16t4: the IQ2 byte panels on AVX2, 16 rows
// (two registers of 8) by 4 tokens, from the AVX2 panels (iq2AVX2Blk:
// the values signed, a correction per row and block). There is no VPDPBUSD:
// each chunk of 4 values goes through VPMADDUBSW (the token's quants plus 128,
// unsigned ≤ 255, broadcast four at a time, by the panel's signed v, |v| ≤ 43:
// a pair's sum is at most 2·255·43 = 21930 in magnitude, so it never
// saturates) and VPMADDWD by the rows' group scale in both words of each
// dword (s | s<<16; s ≤ 31), which adds the pair and scales it: s·Σ v·(q+128)
// over the 4 values, exact. The block's sum starts at the row's correction
// −128·Σ_j s_j·Σv_j, so it is Σ_j s_j·Σ v·q, the reference's integer sum
// exactly (integer sums in any order); then the row kernels' float step,
// ((dx·dy)·float(isum))·factor added to a per-token accumulator kept on the
// stack (16 int32 accumulators and the operands fill the registers).
func iq2OuterAVX2() {
	const T = 4
	name := "iq2OuterAVX2r16t4"
	TEXT(name, NOSPLIT, "func(w, a *byte, as int, dx, dy *float32, dys, nb int, factor float32, out *float32, os int)")
	Pragma("noescape")
	Doc(name+" sets out[t·os/4+i] (i < 16, t < 4) to the dot product of the",
		"AVX2 panel rows i < 16 at w (block b at +5184·b, scales dx+64·b) and the",
		"token records t < 4 at a+320·t (block b at +as·b, scale dy+4·t+dys·b), nb blocks,",
		"in the IQ2 row kernels' order (AVX2: VPMADDUBSW, VPMADDWD by the scales).")
	w := Load(Param("w"), GP64())
	a := Load(Param("a"), GP64())
	as := Load(Param("as"), GP64())
	dx := Load(Param("dx"), GP64())
	dy := Load(Param("dy"), GP64())
	dys := Load(Param("dys"), GP64())
	n := Load(Param("nb"), GP64())
	local := AllocLocal(2 * T * 32) // float accumulators, token t half h at 32·(2t+h)
	{
		z := YMM()
		VXORPS(z, z, z)
		for k := 0; k < 2*T; k++ {
			VMOVUPS(z, local.Offset(32*k))
		}
	}
	k80 := YMM()
	{
		g := GP32()
		MOVL(U32(0x80808080), g)
		x := XMM()
		MOVD(g, x)
		VPBROADCASTD(x, k80)
	}

	Label(name + "_loop")
	var acc [T][2]VecVirtual
	for t := range acc {
		for h := range acc[t] {
			acc[t][h] = YMM()
			VMOVDQU(Mem{Base: w, Disp: iqPanelGroup*iq2OuterRec + 32*h}, acc[t][h])
		}
	}
	for j := 0; j < 16; j++ {
		sc := Mem{Base: w, Disp: iq2OuterRec*j + 256}
		// The scales in both words of their dwords.
		var s16 [2]VecVirtual
		for h := range s16 {
			s16[h] = YMM()
			tmp := YMM()
			VMOVDQU(sc.Offset(32*h), s16[h])
			VPSLLD(U8(16), s16[h], tmp)
			VPOR(tmp, s16[h], s16[h])
		}
		for c := 0; c < 4; c++ {
			for t := 0; t < T; t++ {
				q := YMM()
				VPBROADCASTD(Mem{Base: a, Disp: iq2OuterTok*t + 16*j + 4*c}, q)
				VPXOR(k80, q, q)
				for h := 0; h < 2; h++ {
					p := YMM()
					VPMADDUBSW(Mem{Base: w, Disp: iq2OuterRec*j + 64*c + 32*h}, q, p)
					VPMADDWD(s16[h], p, p)
					VPADDD(p, acc[t][h], acc[t][h])
				}
			}
		}
	}
	fx := YMM()
	{
		x := XMM()
		Load(Param("factor"), x)
		VBROADCASTSS(x, fx)
	}
	for t := 0; t < T; t++ {
		for h := 0; h < 2; h++ {
			f, dd := YMM(), YMM()
			VCVTDQ2PS(acc[t][h], f)
			VBROADCASTSS(Mem{Base: dy, Disp: 4 * t}, dd)
			VMULPS(Mem{Base: dx, Disp: 32 * h}, dd, dd) // f16(x.d)·y.d
			VMULPS(f, dd, dd)
			VMULPS(fx, dd, dd)
			VADDPS(local.Offset(32*(2*t+h)), dd, dd)
			VMOVUPS(dd, local.Offset(32*(2*t+h)))
		}
	}
	ADDQ(U32(iq2AVX2Blk), w)
	ADDQ(as, a)
	ADDQ(U8(4*iqPanelGroup), dx)
	ADDQ(dys, dy)
	DECQ(n)
	JNZ(LabelRef(name + "_loop"))
	out := Load(Param("out"), GP64())
	os := Load(Param("os"), GP64())
	for t := 0; t < T; t++ {
		for h := 0; h < 2; h++ {
			v := YMM()
			VMOVUPS(local.Offset(32*(2*t+h)), v)
			VMOVUPS(v, Mem{Base: out, Disp: 32 * h})
		}
		if t+1 < T {
			ADDQ(os, out)
		}
	}
	VZEROUPPER()
	RET()
}
