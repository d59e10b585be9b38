package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// accumKV emits the V accumulation of attention over a quantized KV cache
// (engine/kernels' AttendBlocksKV): acc[i] += (d·q_i)·vs over nb blocks of a Q8_0
// or Q4_0 row, 8 values at a time; each product and the sum rounded on its own,
// as accumQ8_0Generic / accumQ4_0Generic (no fused multiply-add).
func accumKV(typ string) {
	name := "accum" + typ + "AVX2"
	TEXT(name, NOSPLIT, "func(acc *float32, v *byte, nb int, vs float32)")
	Pragma("noescape")
	Doc(name+" adds vs times the "+typ+" row of nb blocks at v (dequantized as ggml's",
		"dequantize_row: d·q) to acc[0:32·nb], each product and sum rounded on its own.")
	acc := Load(Param("acc"), GP64())
	v := Load(Param("v"), GP64())
	nb := Load(Param("nb"), GP64())
	vs := YMM()
	VBROADCASTSS(NewParamAddr("vs", 24), vs)
	var m4, e8 VecVirtual
	if typ == "Q4_0" {
		m4, e8 = XMM(), XMM()
		VMOVDQU(nibbleMask, m4)
		VMOVDQU(eights, e8)
	}
	Label("block")
	TESTQ(nb, nb)
	JZ(LabelRef("done"))
	g := GP32()
	MOVWLZX(Mem{Base: v}, g)
	h, d := XMM(), YMM()
	VMOVD(g, h)
	VCVTPH2PS(h, h)
	VBROADCASTSS(h, d)
	// eight groups' int8 quants as four sign-extended int32 vectors of 8 each
	add := func(q VecVirtual, off int) {
		f := YMM()
		VCVTDQ2PS(q, f)
		VMULPS(d, f, f)  // d·q
		VMULPS(vs, f, f) // ·vs
		VADDPS(Mem{Base: acc, Disp: off}, f, f)
		VMOVUPS(f, Mem{Base: acc, Disp: off})
	}
	if typ == "Q8_0" {
		for i := 0; i < 4; i++ {
			q := YMM()
			VPMOVSXBD(Mem{Base: v, Disp: 2 + 8*i}, q)
			add(q, 32*i)
		}
		ADDQ(U8(q80Size), v)
	} else {
		raw, lo, hi := XMM(), XMM(), XMM()
		VMOVDQU(Mem{Base: v, Disp: 2}, raw)
		VPAND(m4, raw, lo)
		VPSRLW(U8(4), raw, hi)
		VPAND(m4, hi, hi)
		VPSUBB(e8, lo, lo) // q − 8, as int8
		VPSUBB(e8, hi, hi)
		for i, src := range []VecVirtual{lo, hi} { // values 0..15 (low nibbles), 16..31
			q0, q1, up := YMM(), YMM(), XMM()
			VPMOVSXBD(src, q0)
			VPSRLDQ(U8(8), src, up)
			VPMOVSXBD(up, q1)
			add(q0, 64*i)
			add(q1, 64*i+32)
		}
		ADDQ(U8(q40Size), v)
	}
	ADDQ(U32(128), acc)
	DECQ(nb)
	JMP(LabelRef("block"))
	Label("done")
	VZEROUPPER()
	RET()
}

// accumKVChunk emits the accumulator step of attention over a chunk of n positions
// of a quantized V cache (AttendBlocksKV's chunked path): e_j and bit j of mask come
// from attnExpF16; a position that raised the maximum first scales the accumulator
// by e_j and adds its row (d·q) as it is, any other adds (d·q)·e_j; *sum takes
// sum·e_j + 1 or sum + e_j. The operations of kvState.span's loop, position by
// position, a block (32 values) of the accumulator at a time in registers.
func accumKVChunk(typ string) {
	name := "attnAccum" + typ + "AVX2"
	TEXT(name, NOSPLIT, "func(acc *float32, v *byte, nb, n, stride int, e *float32, mask uint64, sum *float32)")
	Pragma("noescape")
	Doc(name+" adds the n positions of a chunk to the accumulator acc (32·nb float32s)",
		"and to *sum: position j's V row is nb "+typ+" blocks at v + j·stride (bytes), e_j and",
		"bit j of mask come from attnExpF16.")
	acc := Load(Param("acc"), GP64())
	v := Load(Param("v"), GP64())
	nb := Load(Param("nb"), GP64())
	n := Load(Param("n"), GP64())
	sb := Load(Param("stride"), GP64())
	e := Load(Param("e"), GP64())
	mask := Load(Param("mask"), GP64())
	sump := Load(Param("sum"), GP64())

	sum, one := XMM(), XMM()
	VMOVSS(Mem{Base: sump}, sum)
	VMOVSS(expfConsts.Offset(ecOne), one)
	j := GP64()
	XORQ(j, j)
	Label("sum")
	CMPQ(j, n)
	JGE(LabelRef("sumdone"))
	BTQ(j, mask)
	JCS(LabelRef("sumnew"))
	VADDSS(Mem{Base: e, Index: j, Scale: 4}, sum, sum)
	INCQ(j)
	JMP(LabelRef("sum"))
	Label("sumnew")
	VMULSS(Mem{Base: e, Index: j, Scale: 4}, sum, sum)
	VADDSS(one, sum, sum)
	INCQ(j)
	JMP(LabelRef("sum"))
	Label("sumdone")
	VMOVSS(sum, Mem{Base: sump})

	var m4, e8 VecVirtual
	if typ == "Q4_0" {
		m4, e8 = XMM(), XMM()
		VMOVDQU(nibbleMask, m4)
		VMOVDQU(eights, e8)
	}
	bs := map[string]int{"Q8_0": q80Size, "Q4_0": q40Size}[typ]
	Label("block")
	TESTQ(nb, nb)
	JZ(LabelRef("done"))
	a := make([]VecVirtual, 4)
	for i := range a {
		a[i] = YMM()
		VMOVUPS(Mem{Base: acc, Disp: 32 * i}, a[i])
	}
	vp := GP64()
	MOVQ(v, vp)
	XORQ(j, j)
	// rows loads position j's block as four vectors of 8 float32 d·q.
	rows := func() [4]VecVirtual {
		g := GP32()
		MOVWLZX(Mem{Base: vp}, g)
		h, d := XMM(), YMM()
		VMOVD(g, h)
		VCVTPH2PS(h, h)
		VBROADCASTSS(h, d)
		var q [4]VecVirtual
		if typ == "Q8_0" {
			for i := range q {
				q[i] = YMM()
				VPMOVSXBD(Mem{Base: vp, Disp: 2 + 8*i}, q[i])
			}
		} else {
			raw, lo, hi := XMM(), XMM(), XMM()
			VMOVDQU(Mem{Base: vp, Disp: 2}, raw)
			VPAND(m4, raw, lo)
			VPSRLW(U8(4), raw, hi)
			VPAND(m4, hi, hi)
			VPSUBB(e8, lo, lo)
			VPSUBB(e8, hi, hi)
			for i, src := range []VecVirtual{lo, hi} {
				up := XMM()
				q[2*i], q[2*i+1] = YMM(), YMM()
				VPMOVSXBD(src, q[2*i])
				VPSRLDQ(U8(8), src, up)
				VPMOVSXBD(up, q[2*i+1])
			}
		}
		for i := range q {
			VCVTDQ2PS(q[i], q[i])
			VMULPS(d, q[i], q[i]) // d·q
		}
		return q
	}
	Label("pos")
	CMPQ(j, n)
	JGE(LabelRef("posdone"))
	ej := YMM()
	VBROADCASTSS(Mem{Base: e, Index: j, Scale: 4}, ej)
	BTQ(j, mask)
	JCS(LabelRef("new"))
	q := rows()
	for i := range a {
		VMULPS(ej, q[i], q[i]) // ·e_j
		VADDPS(q[i], a[i], a[i])
	}
	Label("next")
	ADDQ(sb, vp)
	INCQ(j)
	JMP(LabelRef("pos"))
	Label("new")
	for i := range a {
		VMULPS(ej, a[i], a[i])
	}
	q = rows()
	for i := range a {
		VADDPS(q[i], a[i], a[i])
	}
	JMP(LabelRef("next"))
	Label("posdone")
	for i := range a {
		VMOVUPS(a[i], Mem{Base: acc, Disp: 32 * i})
	}
	ADDQ(U8(128), acc)
	ADDQ(U8(bs), v)
	DECQ(nb)
	JMP(LabelRef("block"))
	Label("done")
	VZEROUPPER()
	RET()
}

// attnScoresKV emits the scores of a chunk of m positions over a Q8_0 or Q4_0 K
// cache: s_j = (the dot0AVX2 sum of position j's nb blocks at k + j·stride with the
// query's q8Blocks at q)·scale, each block's float steps and its addition to the
// sum in block order as the "one" path of dot0AVX2 (hence dotQ8_0RowGeneric's /
// dotQ4_0RowGeneric's bits).
func attnScoresKV(typ string) {
	name := "attnScores" + typ + "AVX2"
	TEXT(name, NOSPLIT, "func(k *byte, q *byte, nb, m, stride int, scale float32, s *float32)")
	Pragma("noescape")
	Doc(name+" sets s[j] = dot(the nb "+typ+" blocks at k + j·stride, the nb q8Blocks at q)·scale",
		"for j < m, the sums as dot"+typ+"AVX2's.")
	k := Load(Param("k"), GP64())
	q := Load(Param("q"), GP64())
	nb := Load(Param("nb"), GP64())
	m := Load(Param("m"), GP64())
	sb := Load(Param("stride"), GP64())
	sp := Load(Param("s"), GP64())
	scale := XMM()
	VMOVSS(NewParamAddr("scale", 40), scale)
	xs := map[string]int{"Q8_0": q80Size, "Q4_0": q40Size}[typ]
	ones, m4, e8 := YMM(), YMM(), YMM()
	VMOVDQU(ones16, ones)
	if typ == "Q4_0" {
		VMOVDQU(nibbleMask, m4)
		VMOVDQU(eights, e8)
	}
	Label("pos")
	TESTQ(m, m)
	JZ(LabelRef("done"))
	x, y, b := GP64(), GP64(), GP64()
	MOVQ(k, x)
	MOVQ(q, y)
	MOVQ(nb, b)
	sum := XMM()
	VXORPS(sum, sum, sum)
	// Two blocks at a time: their lane sums reduced together, their float steps
	// side by side, then the two additions to sum in block order (dot0AVX2's quad
	// path, for pairs).
	Label("pair")
	CMPQ(b, U8(2))
	JL(LabelRef("block"))
	l0 := dot0Lanes(typ, x, y, 0, xs, ones, m4, e8)
	l1 := dot0Lanes(typ, x, y, 1, xs, ones, m4, e8)
	VPHADDD(l1, l0, l0) // per 128 bits: block 0's two pair sums, then block 1's
	ph := XMM()
	VEXTRACTI128(U8(1), l0, ph)
	VPADDD(l0.AsX(), ph, ph)
	VPHADDD(ph, ph, ph) // isum0, isum1, isum0, isum1
	pf := XMM()
	VCVTDQ2PS(ph, pf)
	pg := GP32()
	pd := XMM()
	MOVWLZX(Mem{Base: x}, pg)
	VMOVD(pg, pd)
	MOVWLZX(Mem{Base: x, Disp: xs}, pg)
	VPINSRW(U8(1), pg, pd, pd)
	VCVTPH2PS(pd, pd)
	py := XMM()
	VMOVSS(Mem{Base: y}, py)
	VINSERTPS(U8(1<<4), Mem{Base: y, Disp: q8Size}, py, py)
	VMULPS(py, pd, pd) // f16(x.d)·y.d
	blockStepsSS(typ, pf, pd, sum, 2)
	ADDQ(U8(2*xs), x)
	ADDQ(U8(2*q8Size), y)
	SUBQ(U8(2), b)
	JMP(LabelRef("pair"))

	Label("block")
	TESTQ(b, b)
	JZ(LabelRef("blockdone"))
	lb := dot0Lanes(typ, x, y, 0, xs, ones, m4, e8)
	h := XMM()
	VEXTRACTI128(U8(1), lb, h)
	VPADDD(lb.AsX(), h, h)
	VPHADDD(h, h, h)
	VPHADDD(h, h, h)
	fb := XMM()
	VCVTDQ2PS(h, fb)
	g := GP32()
	MOVWLZX(Mem{Base: x}, g)
	db := XMM()
	VMOVD(g, db)
	VCVTPH2PS(db, db)
	VMULSS(Mem{Base: y}, db, db)
	blockStepSS(typ, fb, db, sum)
	ADDQ(U8(xs), x)
	ADDQ(U8(q8Size), y)
	DECQ(b)
	JMP(LabelRef("block"))
	Label("blockdone")
	VMULSS(scale, sum, sum)
	VMOVSS(sum, Mem{Base: sp})
	ADDQ(U8(4), sp)
	ADDQ(sb, k)
	DECQ(m)
	JMP(LabelRef("pos"))
	Label("done")
	VZEROUPPER()
	RET()
}

// kvGroupAccStride and kvGroupEStride are the byte distances between the
// accumulators (attnStackHD float32s) and between the softmax factors (attnChunk
// float32s) of the heads of engine/kernels' kvGroup.
const (
	kvGroupAccStride = 256 * 4
	kvGroupEStride   = 64 * 4
)

// accumKVGroup emits accumKVChunk for nq heads over the same chunk of a quantized V
// cache (a GQA group's heads in AttendBlocksTileKV): each position's row is
// dequantized (d·q) once, half a block (16 values) at a time, and added to each
// head's accumulator with that head's e_j and mask bit, the operations
// attnAccum…AVX2 gives each head on its own (hence its bits). acc holds the heads'
// accumulators kvGroupAccStride bytes apart, e their factors kvGroupEStride bytes
// apart, mask and sum one uint64 and one float32 per head.
func accumKVGroup(typ string, nq int) {
	name := fmt.Sprintf("attnAccumGroup%d%sAVX2", nq, typ)
	TEXT(name, NOSPLIT, "func(acc *float32, v *byte, nb, n, stride int, e *float32, mask *uint64, sum *float32)")
	Pragma("noescape")
	Doc(name+" is attnAccum"+typ+fmt.Sprintf("AVX2 for %d heads over the same n positions", nq),
		"(V rows of nb blocks at v + j·stride): head g's accumulator at acc + g·1024 bytes, its",
		"e_j at e + g·256 bytes, its mask and sum at mask[g] and sum[g].")
	acc := Load(Param("acc"), GP64())
	v := Load(Param("v"), GP64())
	nb := Load(Param("nb"), GP64())
	n := Load(Param("n"), GP64())
	sb := Load(Param("stride"), GP64())
	e := Load(Param("e"), GP64())
	mp := Load(Param("mask"), GP64())
	sump := Load(Param("sum"), GP64())

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
		VMOVDQU(nibbleMask, m4)
		VMOVDQU(eights, e8)
	}
	bs := map[string]int{"Q8_0": q80Size, "Q4_0": q40Size}[typ]
	vp, any := GP64(), GP64()
	Label("block")
	TESTQ(nb, nb)
	JZ(LabelRef("done"))
	for h := 0; h < 2; h++ {
		a := make([][2]VecVirtual, nq)
		for g := range a {
			for i := range a[g] {
				a[g][i] = YMM()
				VMOVUPS(Mem{Base: acc, Disp: kvGroupAccStride*g + 64*h + 32*i}, a[g][i])
			}
		}
		MOVQ(v, vp)
		XORQ(j, j)
		MOVQ(Mem{Base: mp}, any)
		for g := 1; g < nq; g++ {
			ORQ(Mem{Base: mp, Disp: 8 * g}, any)
		}
		pl := fmt.Sprintf("pos%d", h)
		Label(pl)
		CMPQ(j, n)
		JGE(LabelRef(pl + "done"))
		// position j's half block as two vectors of 8 float32 d·q
		dg := GP32()
		MOVWLZX(Mem{Base: vp}, dg)
		dh, d := XMM(), YMM()
		VMOVD(dg, dh)
		VCVTPH2PS(dh, dh)
		VBROADCASTSS(dh, d)
		var q [2]VecVirtual
		if typ == "Q8_0" {
			for i := range q {
				q[i] = YMM()
				VPMOVSXBD(Mem{Base: vp, Disp: 2 + 16*h + 8*i}, q[i])
			}
		} else {
			raw, up := XMM(), XMM()
			VMOVDQU(Mem{Base: vp, Disp: 2}, raw)
			if h == 1 {
				VPSRLW(U8(4), raw, raw)
			}
			VPAND(m4, raw, raw)
			VPSUBB(e8, raw, raw) // q − 8, as int8
			q[0], q[1] = YMM(), YMM()
			VPMOVSXBD(raw, q[0])
			VPSRLDQ(U8(8), raw, up)
			VPMOVSXBD(up, q[1])
		}
		for i := range q {
			VCVTDQ2PS(q[i], q[i])
			VMULPS(d, q[i], q[i]) // d·q
		}
		SHRQ(U8(1), any)
		JCS(LabelRef(pl + "slow"))
		for g := 0; g < nq; g++ {
			ej := YMM()
			VBROADCASTSS(Mem{Base: e, Index: j, Scale: 4, Disp: kvGroupEStride * g}, ej)
			for i := range q {
				t := YMM()
				VMULPS(ej, q[i], t) // ·e_j
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
			ej := YMM()
			VBROADCASTSS(Mem{Base: e, Index: j, Scale: 4, Disp: kvGroupEStride * g}, ej)
			MOVQ(Mem{Base: mp, Disp: 8 * g}, mk)
			BTQ(j, mk)
			JCS(LabelRef(gl + "new"))
			for i := range q {
				t := YMM()
				VMULPS(ej, q[i], t)
				VADDPS(t, a[g][i], a[g][i])
			}
			JMP(LabelRef(gl + "done"))
			Label(gl + "new")
			for i := range q {
				VMULPS(ej, a[g][i], a[g][i])
				VADDPS(q[i], a[g][i], a[g][i])
			}
			Label(gl + "done")
		}
		JMP(LabelRef(pl + "next"))
		Label(pl + "done")
		for g := range a {
			for i := range a[g] {
				VMOVUPS(a[g][i], Mem{Base: acc, Disp: kvGroupAccStride*g + 64*h + 32*i})
			}
		}
	}
	ADDQ(U8(128), acc)
	ADDQ(U8(bs), v)
	DECQ(nb)
	JMP(LabelRef("block"))
	Label("done")
	VZEROUPPER()
	RET()
}

// prefetchRows emits the prefetch of n rows of w bytes, stride bytes apart: every
// cache line of each (PREFETCHT0), so that the next block of a quantized KV cache
// is on its way while attention works through this one (the rows of a head are
// not a multiple of 64 bytes, and the hardware's prefetchers leave them to demand
// misses).
func prefetchRows() {
	TEXT("prefetchRows", NOSPLIT, "func(p *byte, n, stride, w int)")
	Pragma("noescape")
	Doc("prefetchRows prefetches the cache lines of n rows of w bytes at p + j·stride.")
	p := Load(Param("p"), GP64())
	n := Load(Param("n"), GP64())
	sb := Load(Param("stride"), GP64())
	w := Load(Param("w"), GP64())
	DECQ(w)
	Label("row")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	x, end := GP64(), GP64()
	MOVQ(p, x)
	LEAQ(Mem{Base: p, Index: w, Scale: 1}, end)
	Label("line")
	PREFETCHT0(Mem{Base: x})
	ADDQ(U8(64), x)
	CMPQ(x, end)
	JBE(LabelRef("line"))
	PREFETCHT0(Mem{Base: end})
	ADDQ(sb, p)
	DECQ(n)
	JMP(LabelRef("row"))
	Label("done")
	RET()
}
