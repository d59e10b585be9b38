package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// iq2OuterAVX2 emits iq2OuterAVX2r16t4: the IQ2 byte panels (iq2panel.go's
// layout, unchanged) on AVX2, 16 rows (two registers of 8) by 4 tokens. There
// is no VPDPBUSD: each chunk of 4 values goes through VPMADDUBSW (the panel's
// unsigned u = v+43 ≤ 86 by the token's signed quants, broadcast four at a
// time: a pair's sum is at most 2·86·128 = 22016 in magnitude, so it never
// saturates) and VPMADDWD by the rows' group scale in both words of each
// dword (s | s<<16; s ≤ 31), which adds the pair and scales it: the dword is
// s·Σ(u·q) over the 4 values, exact. The −43·bsum of each group (kept with
// the quants) times the scale (VPMULLD) makes each group's term s·Σ v·q, so the
// block's int32 sum is the reference's exactly (integer sums in any order);
// then the row kernels' float step, ((dx·dy)·float(isum))·factor added to a
// per-token accumulator kept on the stack (16 int32 accumulators and the
// operands fill the 16 registers).
func iq2OuterAVX2() {
	const T = 4
	name := "iq2OuterAVX2r16t4"
	TEXT(name, NOSPLIT, "func(w, a *byte, as int, dx, dy *float32, dys, nb int, factor float32, out *float32, os int)")
	Pragma("noescape")
	Doc(name+" sets out[t·os/4+i] (i < 16, t < 4) to the dot product of the",
		"outer-product panel rows i < 16 at w (block b at +5120·b, scales dx+64·b) and the",
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

	Label(name + "_loop")
	var acc [T][2]VecVirtual
	for t := range acc {
		for h := range acc[t] {
			acc[t][h] = YMM()
			VPXOR(acc[t][h], acc[t][h], acc[t][h])
		}
	}
	for j := 0; j < 16; j++ {
		sc := Mem{Base: w, Disp: iq2OuterRec*j + 256}
		// The group's −43·bsum times the rows' scales.
		for t := 0; t < T; t++ {
			g, p := YMM(), YMM()
			VPBROADCASTD(Mem{Base: a, Disp: iq2OuterTok*t + 256 + 4*j}, g)
			VPMULLD(sc, g, p)
			VPADDD(p, acc[t][0], acc[t][0])
			VPMULLD(sc.Offset(32), g, g)
			VPADDD(g, acc[t][1], acc[t][1])
		}
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
			var wv [2]VecVirtual
			for h := range wv {
				wv[h] = YMM()
				VMOVDQU(Mem{Base: w, Disp: iq2OuterRec*j + 64*c + 32*h}, wv[h])
			}
			for t := 0; t < T; t++ {
				q := YMM()
				VPBROADCASTD(Mem{Base: a, Disp: iq2OuterTok*t + 16*j + 4*c}, q)
				for h := range wv {
					p := YMM()
					VPMADDUBSW(q, wv[h], p)
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
	ADDQ(U32(iqPanelGroup*iq2OuterRec), w)
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
