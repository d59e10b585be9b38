package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// tq2PanelBlock is the bytes of one row's block in a TQ2_0 byte panel: its 256
// quants q (0-3), in order.
const tq2PanelBlock = 256

// decodeTQ2_0BytesAVX512 emits the TQ2_0 byte-panel decoder (decodeTQ2Panel):
// value 128n+32k+l is qs[32n+l]>>2k & 3, so the block's 256 bytes are the two
// 32-byte halves of qs shifted by 0, 2, 4 and 6 and masked; the f16 scale after
// the quants.
func decodeTQ2_0BytesAVX512() {
	evex = true
	defer func() { evex = false }()
	TEXT("decodeTQ2_0BytesAVX512", NOSPLIT, "func(x *byte, nb int, w *byte, dx *float32)")
	Pragma("noescape")
	Doc("decodeTQ2_0BytesAVX512 writes the nb TQ2_0 blocks at x as bytes q (0-3), block b at",
		"w + b·iqPanelGroup·256, and their f16 scales at dx[b·iqPanelGroup] (AVX-512).")
	x := Load(Param("x"), GP64())
	n := Load(Param("nb"), GP64())
	w := Load(Param("w"), GP64())
	dx := Load(Param("dx"), GP64())
	three := YMM()
	{
		g := GP32()
		MOVL(U32(0x03030303), g)
		VPBROADCASTD(g, three)
	}

	Label("decode_TQ2_0B")
	d16 := GP32()
	MOVWLZX(Mem{Base: x, Disp: 64}, d16)
	d := XMM()
	VMOVD(d16, d)
	VCVTPH2PS(d, d)
	VMOVSS(d, Mem{Base: dx})
	for h := 0; h < 2; h++ {
		q := YMM()
		VMOVDQU8(Mem{Base: x, Disp: 32 * h}, q)
		for k := 0; k < 4; k++ {
			v := YMM()
			if k == 0 {
				VPANDD(three, q, v)
			} else {
				VPSRLW(U8(2*k), q, v)
				VPANDD(three, v, v)
			}
			VMOVDQU8(v, Mem{Base: w, Disp: 128*h + 32*k})
		}
	}
	ADDQ(U32(66), x)
	ADDQ(U32(iqPanelGroup*tq2PanelBlock), w)
	ADDQ(U8(4*iqPanelGroup), dx)
	DECQ(n)
	JNZ(LabelRef("decode_TQ2_0B"))
	VZEROUPPER()
	RET()
}

// tq2PanelAVX512r4t4 emits the TQ2_0 byte-panel kernel: 4 decoded rows (bytes
// q, 0-3) by 4 tokens' Q8_K quants straight from their q8KBlocks, one
// VPDPBUSD (unsigned q by signed quant) per 64 values, each row-token
// accumulator started at minus the token's bsums (widened to dwords), so that
// its dwords add up to dotTQ2_0Block's Σ(q−1)·y exactly; then per block, as
// that reference, sum += float(isum)·(f16(x.d)·y.d), 16 pairs a register.
func tq2PanelAVX512r4t4() {
	evex = true
	defer func() { evex = false }()
	const name = "tq2PanelAVX512r4t4"
	TEXT(name, NOSPLIT, "func(w, a *byte, ts int, dx, dy *float32, dys, nb int, out *float32)")
	Pragma("noescape")
	Doc(name+" sets out[4·t+i] to dotTQ2_0Row of the byte-panel rows i < 4 at w",
		"(block b at w + b·iqPanelGroup·256 + 256·i, scale dx[b·iqPanelGroup+i]) and the",
		"q8KBlocks of tokens t < 4 at a + t·ts (scale dy[b·dys/4+t]) (AVX-512 VNNI).")
	w := Load(Param("w"), GP64())
	a := Load(Param("a"), GP64())
	ts := Load(Param("ts"), GP64())
	dx := Load(Param("dx"), GP64())
	dy := Load(Param("dy"), GP64())
	dys := Load(Param("dys"), GP64())
	n := Load(Param("nb"), GP64())
	ts3 := GP64()
	LEAQ(Mem{Base: ts, Index: ts, Scale: 2}, ts3)
	tok := func(t, disp int) Mem {
		switch t {
		case 0:
			return Mem{Base: a, Disp: disp}
		case 1:
			return Mem{Base: a, Index: ts, Scale: 1, Disp: disp}
		case 2:
			return Mem{Base: a, Index: ts, Scale: 2, Disp: disp}
		}
		return Mem{Base: a, Index: ts3, Scale: 1, Disp: disp}
	}
	tokIdx, facc, zero := ZMM(), ZMM(), ZMM()
	VMOVDQU32(iqPanelTokIdx, tokIdx)
	VPXORD(facc, facc, facc)
	VPXORD(zero, zero, zero)

	Label(name + "_loop")
	var acc [4][4]VecVirtual
	for t := 0; t < 4; t++ {
		nbs := ZMM()
		VPMOVSXWD(tok(t, q8KBsums), nbs)
		VPSUBD(nbs, zero, nbs)
		for i := 0; i < 4; i++ {
			acc[i][t] = ZMM()
			VMOVDQA64(nbs, acc[i][t])
		}
	}
	for c := 0; c < 4; c++ {
		var wv, av [4]VecVirtual
		for i := range wv {
			wv[i] = ZMM()
			VMOVDQU64(Mem{Base: w, Disp: tq2PanelBlock*i + 64*c}, wv[i])
		}
		for t := range av {
			av[t] = ZMM()
			VMOVDQU64(tok(t, q8KQS+64*c), av[t])
		}
		for i := range acc {
			for t := range acc[i] {
				raw("VPDPBUSD", av[t], wv[i], acc[i][t])
			}
		}
	}
	sums := iqPanelLaneSums(acc)
	VCVTDQ2PS(sums, sums)
	dxv, dy4, dyv := ZMM(), XMM(), ZMM()
	VBROADCASTF32X4(Mem{Base: dx}, dxv)
	VMOVUPS(Mem{Base: dy}, dy4)
	VPERMPS(dy4.AsZ(), tokIdx, dyv)
	VMULPS(dyv, dxv, dxv) // f16(x.d)·y.d
	VMULPS(sums, dxv, dxv)
	VADDPS(dxv, facc, facc)
	ADDQ(U32(iqPanelGroup*tq2PanelBlock), w)
	ADDQ(U32(q8KSize), a)
	ADDQ(U8(4*iqPanelGroup), dx)
	ADDQ(dys, dy)
	DECQ(n)
	JNZ(LabelRef(name + "_loop"))
	out := Load(Param("out"), GP64())
	VMOVUPS(facc, Mem{Base: out})
	VZEROUPPER()
	RET()
}
