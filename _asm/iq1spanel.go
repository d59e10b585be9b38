package main

import (
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// iq1sPairIdx[p] spreads floats 2p and 2p+1 of 4 over the low and high 8 lanes.
var iq1sPairIdx [2]Mem

func iq1sPanelConstants() {
	for p := range iq1sPairIdx {
		var b []byte
		for l := 0; l < 16; l++ {
			b = append(b, byte(2*p+l/8), 0, 0, 0)
		}
		iq1sPairIdx[p] = rodata("iq1sPairIdx"+string(rune('0'+p)), b)
	}
}

// iq1sPanelAVX512r4t4 emits IQ1_S's byte-panel kernel
// (engine/kernels/iq1spanel.go) in ggml_vec_dot_iq1_s_q8_K's float order: 4
// decoded rows (bytes ls·grid, signed; rows 2q and 2q+1 interleaved by
// sub-block) by 4 tokens' unsigned quants q+128 (acts.q8kU), each token's 32
// quants of a sub-block broadcast to both halves of a register and met by one
// VPDPBUSD per pair of rows, into an accumulator started at the two rows'
// −128·Σ(ls·grid) of each lane: its dwords are then the 8 lanes (positions
// 4k..4k+3) of both rows, ggml's exact integer sums, converted and added by one
// fused multiply-add with y.d·f16(x.d). The shifts' sums Σ ls·delta·(bsum pair)
// of the 16 pairs come from four VPDPWSSD of the rows' ±scales and the
// tokens' bsums (acts.bsT), added by one fused multiply-add to 16 acc1, kept
// in out; at the end each pair's sum8 plus 0.125·acc1.
func iq1sPanelAVX512r4t4() {
	evex = true
	defer func() { evex = false }()
	const name = "iq1sPanelAVX512r4t4"
	TEXT(name, NOSPLIT, "func(w *byte, c, ls *int32, dx *float32, a *byte, ts int, bs *int32, dy *float32, dys, nb int, out *float32)")
	Pragma("noescape")
	Doc(name+" sets out[4·t+i] to dotIQ1SRowGeneric of the byte-panel rows i < 4 at w",
		"(block b at w + b·iqPanelGroup·256, lane starts c, ±scales ls and scales",
		"dx[b·iqPanelGroup+i]) and the unsigned quants of tokens t < 4 at a + t·ts",
		"(bsums pairs bs[(4b+p)·dys/4+t], scale dy[b·dys/4+t]) (AVX-512 VNNI); out[16] is its scratch.")
	w := Load(Param("w"), GP64())
	c := Load(Param("c"), GP64())
	ls := Load(Param("ls"), GP64())
	dx := Load(Param("dx"), GP64())
	a := Load(Param("a"), GP64())
	ts := Load(Param("ts"), GP64())
	bs := Load(Param("bs"), GP64())
	dy := Load(Param("dy"), GP64())
	dys := Load(Param("dys"), GP64())
	n := Load(Param("nb"), GP64())
	out := Load(Param("out"), GP64())
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
	{
		z := ZMM()
		VPXORD(z, z, z)
		VMOVUPS(z, Mem{Base: out}) // acc1
	}
	var facc [2][4]VecVirtual // row pair q, token t
	for q := range facc {
		for t := range facc[q] {
			facc[q][t] = ZMM()
			VPXORD(facc[q][t], facc[q][t], facc[q][t])
		}
	}

	Label(name + "_loop")
	{
		tokIdx, dyv, s := ZMM(), ZMM(), ZMM()
		VMOVDQU32(iqPanelTokIdx, tokIdx)
		dy4 := XMM()
		VMOVUPS(Mem{Base: dy}, dy4)
		VPERMPS(dy4.AsZ(), tokIdx, dyv)
		VPXORD(s, s, s)
		for p := 0; p < 4; p++ {
			bx, b, av := XMM(), ZMM(), ZMM()
			VMOVDQU32(Mem{Base: bs}, bx)
			ADDQ(dys, bs) // to sub-block pair p+1, the last to the next block
			VPERMD(bx.AsZ(), tokIdx, b)
			VBROADCASTI32X4(Mem{Base: ls, Disp: 4 * iqPanelGroup * p}, av)
			raw("VPDPWSSD", av, b, s)
		}
		dxv, a1 := ZMM(), ZMM()
		VBROADCASTF32X4(Mem{Base: dx}, dxv)
		VMULPS(dxv, dyv, dxv) // y.d·f16(x.d)
		VCVTDQ2PS(s, s)
		VMOVUPS(Mem{Base: out}, a1)
		VFMADD231PS(s, dxv, a1)
		VMOVUPS(a1, Mem{Base: out})
	}
	var I [2][4]VecVirtual
	for q := range I {
		for t := range I[q] {
			I[q][t] = ZMM()
			VMOVDQU32(Mem{Base: c, Disp: 64 * q}, I[q][t])
		}
	}
	for j := 0; j < 8; j++ {
		for t := 0; t < 4; t++ {
			u := ZMM()
			VBROADCASTI64X4(tok(t, 32*j), u)
			for q := range I {
				raw("VPDPBUSD", Mem{Base: w, Disp: 512*q + 64*j}, u, I[q][t])
			}
		}
	}
	for q := range I {
		dxq := ZMM()
		{
			dx4 := XMM()
			VMOVUPS(Mem{Base: dx}, dx4)
			VMOVDQU32(iq1sPairIdx[q], dxq)
			VPERMPS(dx4.AsZ(), dxq, dxq) // f16(x.d) of rows 2q and 2q+1 in the halves
		}
		for t := range I[q] {
			d := ZMM()
			VBROADCASTSS(Mem{Base: dy, Disp: 4 * t}, d)
			VMULPS(dxq, d, d) // y.d·f16(x.d)
			VCVTDQ2PS(I[q][t], I[q][t])
			VFMADD231PS(I[q][t], d, facc[q][t])
		}
	}
	ADDQ(U32(iqPanelGroup*iqPanelBlock/2), w)
	ADDQ(U32(iqPanelGroup*32), c)
	ADDQ(U32(iqPanelGroup*16), ls)
	ADDQ(U8(4*iqPanelGroup), dx)
	ADDQ(U32(256), a)
	ADDQ(dys, dy)
	DECQ(n)
	JNZ(LabelRef(name + "_loop"))

	eighth := XMM()
	{
		g := GP32()
		MOVL(U32(math.Float32bits(0.125)), g)
		VMOVD(g, eighth)
	}
	for q := range facc {
		for t := range facc[q] {
			for k := 0; k < 2; k++ {
				h := facc[q][t].AsY()
				if k == 1 {
					h = YMM()
					VEXTRACTF32X8(U8(1), facc[q][t], h)
				}
				s := hsum8(h)
				m := Mem{Base: out, Disp: 4 * (4*t + 2*q + k)}
				VFMADD231SS(m, eighth, s) // exact product: sum8 + 0.125·acc1
				VMOVSS(s, m)
			}
		}
	}
	VZEROUPPER()
	RET()
}

// decodeIQ1SBytesAVX512 emits the IQ1_S byte-panel decoder
// (decodeIQ1SBytePanel): per sub-block the four 8-byte grid entries (-1, 0, 1),
// times its scale ls = 2s+1 (ls broadcast, zeroed where the grid byte is 0 and
// negated where it is -1), stored 64 bytes apart (w points at the slot's half
// of its row pair); the lanes' starts −128·Σv from one VPDPBUSD of ones by the
// values per sub-block; the ±scales ls·delta of the eight sub-blocks, in pairs,
// iqPanelGroup dwords apart; the f16 scale.
func decodeIQ1SBytesAVX512() {
	evex = true
	defer func() { evex = false }()
	TEXT("decodeIQ1SBytesAVX512", NOSPLIT, "func(x *byte, nb int, w *byte, c, ls *int32, dx *float32, grid *byte)")
	Pragma("noescape")
	Doc("decodeIQ1SBytesAVX512 writes the nb IQ1_S blocks at x into a slot of the byte panel",
		"(decodeIQ1SBytePanel's values, lane starts, ±scales and scales) (AVX-512 VNNI).")
	x := GP64()
	Load(Param("x"), x)
	n := Load(Param("nb"), GP64())
	w := Load(Param("w"), GP64())
	c := Load(Param("c"), GP64())
	ls := Load(Param("ls"), GP64())
	dx := Load(Param("dx"), GP64())
	grid := GP64()
	Load(Param("grid"), grid)
	ones, zero, fourteen, oneW := YMM(), YMM(), XMM(), XMM()
	{
		g := GP32()
		MOVL(U32(0x01010101), g)
		VPBROADCASTD(g, ones)
		MOVL(U32(0x000e000e), g)
		VPBROADCASTD(g, fourteen)
		MOVL(U32(0x00010001), g)
		VPBROADCASTD(g, oneW)
	}
	VPXORD(zero, zero, zero)

	Label("decode_IQ1SB")
	{
		d16 := GP32()
		MOVWLZX(Mem{Base: x}, d16)
		d := XMM()
		VMOVD(d16, d)
		VCVTPH2PS(d, d)
		VMOVSS(d, Mem{Base: dx})
	}
	acc := YMM()
	VPXORD(acc, acc, acc)
	for ib := 0; ib < 8; ib++ {
		h := GP64()
		MOVWQZX(Mem{Base: x, Disp: 34 + 2*ib}, h)
		g := gather8x(grid, iq1sIndex(x, h, ib))
		SHRQ(U8(12), h)
		ANDQ(U8(7), h)
		LEAQ(Mem{Base: h, Index: h, Scale: 1, Disp: 1}, h)
		neg, nz := K(), K()
		VPMOVB2M(g, neg)
		VPTESTMB(g, g, nz)
		v := YMM()
		VPBROADCASTB_Z(h.As32(), nz, v) // ls, 0 where the grid byte is 0
		VPSUBB(v, zero, neg, v)
		VMOVDQU8(v, Mem{Base: w, Disp: 64 * ib})
		raw("VPDPBUSD", v, ones, acc)
	}
	VPSLLD(U8(7), acc, acc)
	VPSUBD(acc, zero, acc)
	VMOVDQU32(acc, Mem{Base: c})
	{
		qh := XMM()
		VMOVDQU32(Mem{Base: x, Disp: 34}, qh)
		l, m := XMM(), XMM()
		VPSRLW(U8(11), qh, l)
		VPANDD(fourteen, l, l)
		VPORD(oneW, l, l) // 2s+1
		VPSRAW(U8(15), qh, m)
		VPXORD(m, l, l)
		VPSUBW(m, l, l) // negated where bit 15 is set
		for p := 0; p < 4; p++ {
			if p == 0 {
				VMOVD(l, Mem{Base: ls})
			} else {
				VPEXTRD(U8(p), l, Mem{Base: ls, Disp: 4 * iqPanelGroup * p})
			}
		}
	}
	ADDQ(U32(50), x)
	ADDQ(U32(iqPanelGroup*256), w)
	ADDQ(U32(iqPanelGroup*32), c)
	ADDQ(U32(iqPanelGroup*16), ls)
	ADDQ(U8(4*iqPanelGroup), dx)
	DECQ(n)
	JNZ(LabelRef("decode_IQ1SB"))
	VZEROUPPER()
	RET()
}
