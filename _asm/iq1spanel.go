package main

import (
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// iq1sPairIdx[p] spreads lanes 8p and 8p+4 (tokens 2p and 2p+1 of iqPanelTokIdx's
// spread) over the low and high 8 lanes.
var iq1sPairIdx [2]Mem

func iq1sPanelConstants() {
	for p := range iq1sPairIdx {
		var b []byte
		for l := 0; l < 16; l++ {
			b = append(b, byte(4*(2*p+l/8)), 0, 0, 0)
		}
		iq1sPairIdx[p] = rodata("iq1sPairIdx"+string(rune('0'+p)), b)
	}
}

// iq1sPanelAVX512r2t4 emits IQ1_S's byte-panel kernel (engine/kernels/iq1spanel.go)
// in ggml_vec_dot_iq1_s_q8_K's float order: 2 decoded rows (bytes ls·grid,
// signed) by 4 tokens' Q8_K quants read from their q8KBlocks and made unsigned
// (q+128), one VPDPBUSD per 64 values; a row-token pair's 16 dwords folded to
// the 8 lanes of positions 4k..4k+3 (dwords k and 8+k) minus the row's
// 128·Σ(ls·grid) of each lane, so every lane is ggml's exact integer sum; two
// tokens' lanes a register, converted and added by one fused multiply-add with
// y.d·f16(x.d). The shifts' sums Σ ls·delta·(bsum pair) of the 16 pairs come from
// four VPDPWSSD of the rows' ±scales and the tokens' bsums (acts.bsT), added
// by one fused multiply-add to 16 acc1 (4 rows: those of rows 2 and 3 unused);
// at the end each pair's sum8 plus 0.125·acc1. (Four rows a call failed avo's
// register allocation.)
func iq1sPanelAVX512r2t4() {
	evex = true
	defer func() { evex = false }()
	const name = "iq1sPanelAVX512r2t4"
	TEXT(name, NOSPLIT, "func(w *byte, c, ls *int32, dx *float32, a *byte, ts int, bs *int32, dy *float32, dys, nb int, out *float32)")
	Pragma("noescape")
	Doc(name+" sets out[4·t+i] to dotIQ1SRowGeneric of the byte-panel rows i < 2 at w",
		"(block b at w + b·iqPanelGroup·256 + 256·i, lane corrections c, ±scales ls",
		"of 4 rows, scales dx[b·iqPanelGroup+i] of 4 rows) and the q8KBlocks of tokens",
		"t < 4 at a + t·ts",
		"(bsums pairs bs[(4b+p)·dys/4+t], scale dy[b·dys/4+t]) (AVX-512 VNNI).")
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
	tokIdx, acc1, x80 := ZMM(), ZMM(), ZMM()
	VMOVDQU32(iqPanelTokIdx, tokIdx)
	VPXORD(acc1, acc1, acc1)
	{
		g := GP32()
		MOVL(U32(0x80808080), g)
		VPBROADCASTD(g, x80)
	}
	var facc [2][2]VecVirtual
	for r := range facc {
		for p := range facc[r] {
			facc[r][p] = ZMM()
			VPXORD(facc[r][p], facc[r][p], facc[r][p])
		}
	}

	Label(name + "_loop")
	dyv := ZMM()
	{
		dy4 := XMM()
		VMOVUPS(Mem{Base: dy}, dy4)
		VPERMPS(dy4.AsZ(), tokIdx, dyv)
	}
	{
		s := ZMM()
		VPXORD(s, s, s)
		for p := 0; p < 4; p++ {
			bx, b, av := XMM(), ZMM(), ZMM()
			VMOVDQU32(Mem{Base: bs}, bx)
			ADDQ(dys, bs) // to sub-block pair p+1, the last to the next block
			VPERMD(bx.AsZ(), tokIdx, b)
			VBROADCASTI32X4(Mem{Base: ls, Disp: 4 * iqPanelGroup * p}, av)
			raw("VPDPWSSD", av, b, s)
		}
		dxv := ZMM()
		VBROADCASTF32X4(Mem{Base: dx}, dxv)
		VMULPS(dxv, dyv, dxv) // y.d·f16(x.d)
		VCVTDQ2PS(s, s)
		VFMADD231PS(s, dxv, acc1)
	}
	for p := 0; p < 2; p++ {
		yp := ZMM()
		VMOVDQU32(iq1sPairIdx[p], yp)
		VPERMPS(dyv, yp, yp)
		{
			const rh = 0
			var I [2][2]VecVirtual
			for k := 0; k < 2; k++ {
				var u [4]VecVirtual
				for j := range u {
					u[j] = ZMM()
					VPXORD(tok(2*p+k, q8KQS+64*j), x80, u[j])
				}
				for rr := range I {
					r := 2*rh + rr
					I[rr][k] = ZMM()
					VPXORD(I[rr][k], I[rr][k], I[rr][k])
					for j := 0; j < 4; j++ {
						raw("VPDPBUSD", Mem{Base: w, Disp: iqPanelBlock/2*r + 64*j}, u[j], I[rr][k])
					}
				}
			}
			for rr := range I {
				r := 2*rh + rr
				lo, hi := ZMM(), ZMM()
				VSHUFI64X2(U8(0x44), I[rr][1], I[rr][0], lo)
				VSHUFI64X2(U8(0xee), I[rr][1], I[rr][0], hi)
				VPADDD(hi, lo, lo)
				VPSUBD(Mem{Base: c, Disp: 64 * r}, lo, lo)
				VCVTDQ2PS(lo, lo)
				d := ZMM()
				VBROADCASTSS(Mem{Base: dx, Disp: 4 * r}, d)
				VMULPS(d, yp, d) // y.d·f16(x.d)
				VFMADD231PS(lo, d, facc[r][p])
			}
		}
	}
	ADDQ(U32(iqPanelGroup*iqPanelBlock/2), w)
	ADDQ(U32(iqPanelGroup*64), c)
	ADDQ(U32(iqPanelGroup*16), ls)
	ADDQ(U8(4*iqPanelGroup), dx)
	ADDQ(U32(q8KSize), a)
	ADDQ(dys, dy)
	DECQ(n)
	JNZ(LabelRef(name + "_loop"))

	out := Load(Param("out"), GP64())
	VMOVUPS(acc1, Mem{Base: out})
	eighth := XMM()
	{
		g := GP32()
		MOVL(U32(math.Float32bits(0.125)), g)
		VMOVD(g, eighth)
	}
	for r := 0; r < 2; r++ {
		for p := 0; p < 2; p++ {
			for k := 0; k < 2; k++ {
				h := facc[r][p].AsY()
				if k == 1 {
					h = YMM()
					VEXTRACTF32X8(U8(1), facc[r][p], h)
				}
				s := hsum8(h)
				m := Mem{Base: out, Disp: 4 * (4*(2*p+k) + r)}
				VFMADD231SS(m, eighth, s) // exact product: sum8 + 0.125·acc1
				VMOVSS(s, m)
			}
		}
	}
	VZEROUPPER()
	RET()
}
