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
