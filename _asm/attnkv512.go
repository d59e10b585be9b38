package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// accumKVGroup512 emits accumKVGroup's AVX-512 form (attnAccumGroup<nq><typ>AVX512,
// nq = 1..4): the same arguments and layout, each position's V row dequantized
// (d·q) a whole block (32 values, two zmm) at a time and up to two blocks per pass
// over the positions, each head's e_j taken as a broadcast memory operand. Every
// accumulator lane gets the operations of attnAccum…AVX2 (a new maximum: acc·e_j +
// d·q; otherwise acc + (d·q)·e_j; each rounded on its own), position by position,
// hence its bits. The quantized K's scores come from the outer-product tiles
// (dot0Outer, 16 positions as 16 rows); engine/kernels' attend_kv_amd64.go.
func accumKVGroup512(typ string, nq int) {
	evex = true
	defer func() { evex = false }()
	name := fmt.Sprintf("attnAccumGroup%d%sAVX512", nq, typ)
	TEXT(name, NOSPLIT, "func(acc *float32, v *byte, nb, n, stride int, e *float32, mask *uint64, sum *float32)")
	Pragma("noescape")
	Doc(name + " is attnAccumGroup" + fmt.Sprintf("%d%sAVX2 (%d heads) on AVX-512, with its bits.", nq, typ, nq))
	acc := Load(Param("acc"), GP64())
	v := Load(Param("v"), GP64())
	nb := Load(Param("nb"), GP64())
	n := Load(Param("n"), GP64())
	sb := Load(Param("stride"), GP64())
	e := Load(Param("e"), GP64())
	mp := Load(Param("mask"), GP64())
	sump := Load(Param("sum"), GP64())

	// The sums first, each head's positions in order: sum·e_j + 1 where the
	// maximum rose, sum + e_j elsewhere.
	one := XMM()
	VMOVSS(expfConsts.Offset(ecOne), one)
	j, mk := GP64(), GP64()
	for g := 0; g < nq; g++ {
		sum := XMM()
		VMOVSS(Mem{Base: sump, Disp: 4 * g}, sum)
		MOVQ(Mem{Base: mp, Disp: 8 * g}, mk)
		XORQ(j, j)
		l := fmt.Sprintf("sum%d", g)
		Label(l)
		CMPQ(j, n)
		JGE(LabelRef(l + "done"))
		BTQ(j, mk)
		JCS(LabelRef(l + "new"))
		VADDSS(Mem{Base: e, Index: j, Scale: 4, Disp: kvGroupEStride * g}, sum, sum)
		INCQ(j)
		JMP(LabelRef(l))
		Label(l + "new")
		VMULSS(Mem{Base: e, Index: j, Scale: 4, Disp: kvGroupEStride * g}, sum, sum)
		VADDSS(one, sum, sum)
		INCQ(j)
		JMP(LabelRef(l))
		Label(l + "done")
		VMOVSS(sum, Mem{Base: sump, Disp: 4 * g})
	}

	var m4, e8 VecVirtual
	if typ == "Q4_0" {
		m4, e8 = XMM(), XMM()
		VMOVDQU32(nibbleMask, m4)
		VMOVDQU32(eights, e8)
	}
	bs := map[string]int{"Q8_0": q80Size, "Q4_0": q40Size}[typ]
	vp, any := GP64(), GP64()
	// pass takes bp blocks of every head's accumulator through the positions.
	pass := func(bp int) {
		pl := fmt.Sprintf("pass%d", bp)
		a := make([][]VecVirtual, nq) // a[g][2·b + i]: head g, block b, half i
		for g := range a {
			a[g] = make([]VecVirtual, 2*bp)
			for i := range a[g] {
				a[g][i] = ZMM()
				VMOVUPS(Mem{Base: acc, Disp: kvGroupAccStride*g + 64*i}, a[g][i])
			}
		}
		MOVQ(v, vp)
		XORQ(j, j)
		MOVQ(Mem{Base: mp}, any)
		for g := 1; g < nq; g++ {
			ORQ(Mem{Base: mp, Disp: 8 * g}, any)
		}
		Label(pl)
		CMPQ(j, n)
		JGE(LabelRef(pl + "done"))
		q := make([]VecVirtual, 2*bp) // position j's bp blocks, d·q
		for b := 0; b < bp; b++ {
			hd, d := YMM(), ZMM()
			VPBROADCASTW(Mem{Base: vp, Disp: bs * b}, hd)
			VCVTPH2PS(hd, d)
			q[2*b], q[2*b+1] = ZMM(), ZMM()
			if typ == "Q8_0" {
				VPMOVSXBD(Mem{Base: vp, Disp: bs*b + 2}, q[2*b])
				VPMOVSXBD(Mem{Base: vp, Disp: bs*b + 18}, q[2*b+1])
			} else {
				raw, hi := XMM(), XMM()
				VMOVDQU32(Mem{Base: vp, Disp: bs*b + 2}, raw)
				VPSRLW(U8(4), raw, hi)
				VPANDD(m4, raw, raw)
				VPANDD(m4, hi, hi)
				VPSUBB(e8, raw, raw) // q − 8, as int8: values 0..15
				VPSUBB(e8, hi, hi)   // 16..31
				VPMOVSXBD(raw, q[2*b])
				VPMOVSXBD(hi, q[2*b+1])
			}
			for i := 2 * b; i < 2*b+2; i++ {
				VCVTDQ2PS(q[i], q[i])
				VMULPS(d, q[i], q[i]) // d·q
			}
		}
		SHRQ(U8(1), any)
		JCS(LabelRef(pl + "slow"))
		for g := 0; g < nq; g++ {
			ej := Mem{Base: e, Index: j, Scale: 4, Disp: kvGroupEStride * g}
			for i := range q {
				t := ZMM()
				VMULPS_BCST(ej, q[i], t) // ·e_j
				VADDPS(t, a[g][i], a[g][i])
			}
		}
		Label(pl + "next")
		ADDQ(sb, vp)
		INCQ(j)
		JMP(LabelRef(pl))
		// Some head's maximum rose at j: each head by its own mask bit.
		Label(pl + "slow")
		for g := 0; g < nq; g++ {
			gl := fmt.Sprintf("%sh%d", pl, g)
			ej := Mem{Base: e, Index: j, Scale: 4, Disp: kvGroupEStride * g}
			MOVQ(Mem{Base: mp, Disp: 8 * g}, mk)
			BTQ(j, mk)
			JCS(LabelRef(gl + "new"))
			for i := range q {
				t := ZMM()
				VMULPS_BCST(ej, q[i], t)
				VADDPS(t, a[g][i], a[g][i])
			}
			JMP(LabelRef(gl + "done"))
			Label(gl + "new")
			for i := range q {
				VMULPS_BCST(ej, a[g][i], a[g][i])
				VADDPS(q[i], a[g][i], a[g][i])
			}
			Label(gl + "done")
		}
		JMP(LabelRef(pl + "next"))
		Label(pl + "done")
		for g := range a {
			for i := range a[g] {
				VMOVUPS(a[g][i], Mem{Base: acc, Disp: kvGroupAccStride*g + 64*i})
			}
		}
		ADDQ(U32(128*bp), acc)
		ADDQ(U8(bs*bp), v)
		SUBQ(U8(bp), nb)
	}
	Label("blocks")
	CMPQ(nb, U8(2))
	JL(LabelRef("last"))
	pass(2)
	JMP(LabelRef("blocks"))
	Label("last")
	TESTQ(nb, nb)
	JZ(LabelRef("done"))
	pass(1)
	Label("done")
	VZEROUPPER()
	RET()
}

// scaleRows512 emits scaleRowsAVX512: rows rows of n float32s (n a multiple of 16),
// ld floats apart, each multiplied by scale (one rounding each: the Go loop's
// bits), for kvGroup512.chunk's scores.
func scaleRows512() {
	evex = true
	defer func() { evex = false }()
	TEXT("scaleRowsAVX512", NOSPLIT, "func(s *float32, n, rows, ld int, scale float32)")
	Pragma("noescape")
	Doc("scaleRowsAVX512 multiplies s[r·ld + i] by scale for r < rows, i < n (n a multiple of 16).")
	s := Load(Param("s"), GP64())
	n := Load(Param("n"), GP64())
	rows := Load(Param("rows"), GP64())
	ld := Load(Param("ld"), GP64())
	SHLQ(U8(2), ld)
	sc := ZMM()
	VBROADCASTSS(NewParamAddr("scale", 32), sc)
	Label("row")
	TESTQ(rows, rows)
	JZ(LabelRef("done"))
	p, i := GP64(), GP64()
	MOVQ(s, p)
	MOVQ(n, i)
	Label("vec")
	TESTQ(i, i)
	JZ(LabelRef("rowdone"))
	x := ZMM()
	VMULPS(Mem{Base: p}, sc, x)
	VMOVUPS(x, Mem{Base: p})
	ADDQ(U8(64), p)
	SUBQ(U8(16), i)
	JMP(LabelRef("vec"))
	Label("rowdone")
	ADDQ(ld, s)
	DECQ(rows)
	JMP(LabelRef("row"))
	Label("done")
	VZEROUPPER()
	RET()
}
