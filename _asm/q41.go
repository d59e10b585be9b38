package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

const (
	q41Size = 20 // Q4_1: d f16, m f16, qs [16]byte
	q51Size = 24 // Q5_1: d f16, m f16, qh uint32, qs [16]byte
)

// dotQ4_1AVX2 emits the Q4_1 kernel for AVX2 against Q8_1 activations (laid out
// as q8Block: d, then s where q8Block has c, then qs), in llama.cpp's float order
// (dotQ4_1RowGeneric): the 8 int32 lanes of 4-product sums of the unsigned
// nibbles converted and added times f16(x.d)·y.d in one fused multiply-add per
// block, f16(x.m)·y.s summed in a scalar, the lanes reduced as sum8 and the
// scalar added last.
func dotQ4_1AVX2() { dotQx1AVX2("Q4_1") }

// dotQ5_1AVX2 emits the Q5_1 kernel: Q4_1's with the quants' fifth bits spread
// from the block's uint32 as Q5_0's (dotQ5_1RowGeneric's order).
func dotQ5_1AVX2() { dotQx1AVX2("Q5_1") }

// qx1Quants loads the 32 quants of the Q4_1 or Q5_1 block at x into a YMM
// register, element j in byte j.
func qx1Quants(x GPVirtual, q5 bool, m4 VecVirtual) VecVirtual {
	qsOff := 4
	if q5 {
		qsOff = 8
	}
	t, th := XMM(), XMM()
	VMOVDQU(Mem{Base: x, Disp: qsOff}, t)
	VPSRLW(U8(4), t, th)
	q := YMM()
	VINSERTI128(U8(1), th, t.AsY(), q)
	VPAND(m4, q, q) // elements 0-15 the low nibbles, 16-31 the high
	if q5 {
		h := YMM()
		VPBROADCASTD(Mem{Base: x, Disp: 4}, h)
		VPSHUFB(q5Spread, h, h)
		VPAND(q5Bits, h, h)
		VPCMPEQB(q5Bits, h, h)
		VPAND(bit4Mask, h, h)
		VPOR(h, q, q)
	}
	return q
}

func dotQx1AVX2(typ string) {
	q5 := typ == "Q5_1"
	size := q41Size
	if q5 {
		size = q51Size
	}
	TEXT("dot"+typ+"AVX2", NOSPLIT, "func(x, y *byte, n int) float32")
	Pragma("noescape")
	Doc("dot" + typ + "AVX2 is the dot product of n " + typ + " blocks at x with n q8_1Blocks at y.")
	x, y, n := params3()
	m4, ones := YMM(), YMM()
	VMOVDQU(nibbleMask, m4)
	VMOVDQU(ones16, ones)
	sum := XMM()
	VXORPS(sum, sum, sum)
	acc := YMM()
	VXORPS(acc, acc, acc)

	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	q := qx1Quants(x, q5, m4)
	p := YMM()
	VPMADDUBSW(Mem{Base: y, Disp: q8QS}, q, p)
	VPMADDWD(ones, p, p)
	f := YMM()
	VCVTDQ2PS(p, f)
	g := GP32()
	MOVL(Mem{Base: x}, g)
	dm := XMM()
	VMOVD(g, dm)
	VCVTPH2PS(dm, dm) // d, m
	d := XMM()
	VMULSS(Mem{Base: y}, dm, d) // f16(x.d)·y.d
	dy := YMM()
	VBROADCASTSS(d, dy)
	VFMADD231PS(dy, f, acc) // acc += isum lanes · d
	m := XMM()
	VMOVSHDUP(dm, m)
	VMULSS(Mem{Base: y, Disp: 4}, m, m) // f16(x.m)·y.s, exact
	VADDSS(m, sum, sum)
	ADDQ(U32(size), x)
	ADDQ(U32(q8Size), y)
	DECQ(n)
	JMP(LabelRef("loop"))

	Label("done")
	r := hsum8(acc)
	VADDSS(sum, r, r)
	VZEROUPPER()
	Store(r, ReturnIndex(0))
	RET()
}

// dotQx1AVX2Tokens emits dot<typ>AVX2t<T> (typ Q4_1 or Q5_1): dot<typ>AVX2 of
// one row of n blocks with each of T activation rows (y, y+ys, …; ys in bytes)
// into out[0 … T-1]. Each block's quants are unpacked once for the T tokens;
// every token keeps the one-token kernel's operations and order (its own 8-lane
// accumulator and scalar), so each output has that kernel's bits.
func dotQx1AVX2Tokens(typ string, T int) {
	q5 := typ == "Q5_1"
	size := q41Size
	if q5 {
		size = q51Size
	}
	name := fmt.Sprintf("dot%sAVX2t%d", typ, T)
	TEXT(name, NOSPLIT, "func(x, y *byte, n, ys int, out *float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s is dot%sAVX2 of n %s blocks at x with each of %d rows of n q8_1Blocks at y, y+ys, … into out[0 … %d].", name, typ, typ, T, T-1))
	x, y, n := params3()
	ys := GP64()
	Load(Param("ys"), ys)
	y3 := GP64()
	LEAQ(Mem{Base: y, Index: ys, Scale: 2}, y3)
	ADDQ(ys, y3)
	tok := func(t, disp int) Mem {
		switch t {
		case 1:
			return Mem{Base: y, Index: ys, Scale: 1, Disp: disp}
		case 2:
			return Mem{Base: y, Index: ys, Scale: 2, Disp: disp}
		case 3:
			return Mem{Base: y3, Disp: disp}
		}
		return Mem{Base: y, Disp: disp}
	}
	m4, ones := YMM(), YMM()
	VMOVDQU(nibbleMask, m4)
	VMOVDQU(ones16, ones)
	acc, sum := make([]VecVirtual, T), make([]VecVirtual, T)
	for t := range acc {
		acc[t], sum[t] = YMM(), XMM()
		VXORPS(acc[t], acc[t], acc[t])
		VXORPS(sum[t], sum[t], sum[t])
	}

	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	q := qx1Quants(x, q5, m4)
	g := GP32()
	MOVL(Mem{Base: x}, g)
	dm := XMM()
	VMOVD(g, dm)
	VCVTPH2PS(dm, dm) // d, m
	m := XMM()
	VMOVSHDUP(dm, m)
	for t := range acc {
		p := YMM()
		VPMADDUBSW(tok(t, q8QS), q, p)
		VPMADDWD(ones, p, p)
		f := YMM()
		VCVTDQ2PS(p, f)
		d := XMM()
		VMULSS(tok(t, 0), dm, d) // f16(x.d)·y.d
		dy := YMM()
		VBROADCASTSS(d, dy)
		VFMADD231PS(dy, f, acc[t])
		ms := XMM()
		VMULSS(tok(t, 4), m, ms) // f16(x.m)·y.s, exact
		VADDSS(ms, sum[t], sum[t])
	}
	ADDQ(U32(size), x)
	ADDQ(U32(q8Size), y)
	ADDQ(U32(q8Size), y3)
	DECQ(n)
	JMP(LabelRef("loop"))

	Label("done")
	out := GP64()
	Load(Param("out"), out)
	for t := range acc {
		r := hsum8(acc[t])
		VADDSS(sum[t], r, r)
		VMOVSS(r, Mem{Base: out, Disp: 4 * t})
	}
	VZEROUPPER()
	RET()
}

// dotQx1AVX2Rows emits dot<typ>AVX2r<R> (typ Q4_1 or Q5_1): dot<typ>AVX2 of R rows
// (x, x+rb, …) of n blocks with one activation row y into out[0 … R-1], for
// decoding: one call and one pass over y for R rows, each row keeping the
// one-row kernel's operations and order (its own 8-lane accumulator and scalar),
// so each output has that kernel's bits.
func dotQx1AVX2Rows(typ string, R int) {
	q5 := typ == "Q5_1"
	size := q41Size
	if q5 {
		size = q51Size
	}
	name := fmt.Sprintf("dot%sAVX2r%d", typ, R)
	TEXT(name, NOSPLIT, "func(x *byte, rb int, y *byte, n int, out *float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets out[r] = dot%sAVX2(x + r·rb, y, n) for r < %d.", name, typ, R))
	xb, rb := GP64(), GP64()
	Load(Param("x"), xb)
	Load(Param("rb"), rb)
	y, n := GP64(), GP64()
	Load(Param("y"), y)
	Load(Param("n"), n)
	rows := newRowSet(xb, rb, R)
	m4, ones := YMM(), YMM()
	VMOVDQU(nibbleMask, m4)
	VMOVDQU(ones16, ones)
	acc, sum := make([]VecVirtual, R), make([]VecVirtual, R)
	for r := range acc {
		acc[r], sum[r] = YMM(), XMM()
		VXORPS(acc[r], acc[r], acc[r])
		VXORPS(sum[r], sum[r], sum[r])
	}

	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	for r := range acc {
		x := rows.at(r)
		qsOff := 4
		if q5 {
			qsOff = 8
		}
		t, th := XMM(), XMM()
		VMOVDQU(x.Offset(qsOff), t)
		VPSRLW(U8(4), t, th)
		q := YMM()
		VINSERTI128(U8(1), th, t.AsY(), q)
		VPAND(m4, q, q)
		if q5 {
			h := YMM()
			VPBROADCASTD(x.Offset(4), h)
			VPSHUFB(q5Spread, h, h)
			VPAND(q5Bits, h, h)
			VPCMPEQB(q5Bits, h, h)
			VPAND(bit4Mask, h, h)
			VPOR(h, q, q)
		}
		p := YMM()
		VPMADDUBSW(Mem{Base: y, Disp: q8QS}, q, p)
		VPMADDWD(ones, p, p)
		f := YMM()
		VCVTDQ2PS(p, f)
		g := GP32()
		MOVL(x, g)
		dm := XMM()
		VMOVD(g, dm)
		VCVTPH2PS(dm, dm) // d, m
		d := XMM()
		VMULSS(Mem{Base: y}, dm, d) // f16(x.d)·y.d
		dy := YMM()
		VBROADCASTSS(d, dy)
		VFMADD231PS(dy, f, acc[r])
		m := XMM()
		VMOVSHDUP(dm, m)
		VMULSS(Mem{Base: y, Disp: 4}, m, m) // f16(x.m)·y.s, exact
		VADDSS(m, sum[r], sum[r])
	}
	rows.advance(size)
	ADDQ(U32(q8Size), y)
	DECQ(n)
	JMP(LabelRef("loop"))

	Label("done")
	out := GP64()
	Load(Param("out"), out)
	for r := range acc {
		s := hsum8(acc[r])
		VADDSS(sum[r], s, s)
		VMOVSS(s, Mem{Base: out, Disp: 4 * r})
	}
	VZEROUPPER()
	RET()
}

// dotQx1Outer emits dot<typ>AVX512x16t<T> (typ Q4_1 or Q5_1): dot<typ>AVX2 of
// 16 weight rows (x, x+rb, …) with T activation rows (y, y+ys, …) into
// out[t·os + r], as dot0Outer's outer products but in llama.cpp's 8-lane order:
// a block's quants transposed so that register g holds elements 4g..4g+3 of the
// 16 rows (unsigned, Q5_1's with their fifth bits), and a token's 4 bytes,
// broadcast, meet them in one VPDPBUSD from zero, so that lane r holds row r's
// exact lane-g sum. Lane g of the one-row kernel's 8-lane accumulator is then
// register g: its conversion and fused multiply-add by f16(x.d)·y.d run on the
// 16 rows at once, f16(x.m)·y.s is added to a 16-row sum as the one-row kernel
// adds it to its scalar, and at the end the 8 registers are summed in sum8's
// order and the sum of the m terms added: each output the one-row kernel's bits.
func dotQx1Outer(typ string, T int) {
	evex = true
	defer func() { evex = false }()
	q5 := typ == "Q5_1"
	size, qsOff := q41Size, 4
	if q5 {
		size, qsOff = q51Size, 8
	}
	name := fmt.Sprintf("dot%sAVX512x16t%d", typ, T)
	TEXT(name, NOSPLIT, "func(x *byte, rb int, y *byte, ys int, nb int, out *float32, os int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets out[t·os + r] = dot%sAVX2(x + r·rb, y + t·ys, nb) for r < 16, t < %d.", name, typ, T))
	load := func(name string) GPVirtual {
		r := GP64()
		Load(Param(name), r)
		return r
	}
	rb := load("rb")
	nr := 16
	if T == 1 {
		nr = 32 // and the next 16, to prefetch
	}
	rows := newRowSet(load("x"), rb, nr)
	var ys GPVirtual
	if T > 1 {
		ys = load("ys")
	}
	toks := newRowSet(load("y"), ys, T)
	nb := load("nb")
	sums := make([][8]VecVirtual, T)
	msums := make([]VecVirtual, T)
	for t := range sums {
		for g := range sums[t] {
			sums[t][g] = ZMM()
			VPXORD(sums[t][g], sums[t][g], sums[t][g])
		}
		msums[t] = ZMM()
		VPXORD(msums[t], msums[t], msums[t])
	}

	Label("loop")
	TESTQ(nb, nb)
	JZ(LabelRef("done"))
	if T == 1 {
		prefetchNext(rows, 16, 0)
	}
	var w [8]VecVirtual
	{
		mask := ZMM()
		VMOVDQU64(nibbleMask, mask)
		lo := transpose16(rows, qsOff)
		for g := 0; g < 4; g++ {
			w[4+g] = ZMM()
			VPSRLW(U8(4), lo[g], w[4+g])
			VPANDD(mask, w[4+g], w[4+g]) // elements 16+4g..: the high nibbles
			w[g] = lo[g]
			VPANDD(mask, w[g], w[g])
		}
	}
	if q5 {
		// The fifth bits, as dot0Outer's Q5_0: w[g] holds elements 4g..4g+3,
		// whose bits are bits 4(g%2).. of byte g/2 of the row's uint32 qh.
		qh := gather16(rows, 4)
		for g := range w {
			t := ZMM()
			VPSHUFB(q5oSpread.Offset(64*(g/2)), qh, t)
			k := K()
			VPTESTMB(q5oBits.Offset(64*(g%2)), t, k)
			VPADDB(sixteens64, w[g], k, w[g])
		}
	}
	dm := gather16(rows, 0) // f16 d | f16 m << 16
	xd := f16Lanes(dm)
	VPSRLD(U8(16), dm, dm)
	xm := f16Lanes(dm)
	for t := 0; t < T; t++ {
		yt := toks.at(t)
		d := ZMM()
		VMULPS_BCST(yt, xd, d) // f16(x.d)·y.d
		for g := range w {
			acc := ZMM()
			VMOVDQU32(zeros64, acc)
			rawBcst("VPDPBUSD", yt.Offset(q8QS+4*g), w[g], acc)
			VCVTDQ2PS(acc, acc)
			VFMADD231PS(acc, d, sums[t][g])
		}
		m := ZMM()
		VMULPS_BCST(yt.Offset(4), xm, m) // f16(x.m)·y.s
		VADDPS(m, msums[t], msums[t])
	}
	rows.advance(size)
	toks.advance(q8Size)
	DECQ(nb)
	JMP(LabelRef("loop"))

	Label("done")
	out := load("out")
	var os GPVirtual
	if T > 1 {
		os = load("os")
		SHLQ(U8(2), os)
	}
	for t := range sums {
		s := &sums[t]
		for g := 0; g < 4; g++ {
			VADDPS(s[4+g], s[g], s[g])
		}
		VADDPS(s[2], s[0], s[0])
		VADDPS(s[3], s[1], s[1])
		VADDPS(s[1], s[0], s[0])
		VADDPS(msums[t], s[0], s[0])
		VMOVUPS(s[0], Mem{Base: out})
		if t+1 < T {
			ADDQ(os, out)
		}
	}
	VZEROUPPER()
	RET()
}
