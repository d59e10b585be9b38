package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/ir"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Q8_0 and Q4_0: the Go reference's numerics, in every kernel. For each block
// the exact integer sum isum = Σ x·y, then sum += (f16(x.d)·y.d)·isum (a product,
// a product, a sum, each rounded; Q4_0: the product, then one fused
// multiply-add, q40fma.go), blocks in order: every kernel gives the reference's
// bits.

// dot0Lanes returns 8 int32 whose sum is block b's Σ x·y (AVX2): Q8_0 by the
// sign trick (|x| times y·sign(x), exact while y > −128, which quantActQ8_0
// never makes), Q4_0 as q·y − 8·y, Q5_0 as q·y − 16·y with q's fifth bits
// spread from the block's uint32 (byte j/8 to byte j, bit j%8 tested, 16 ORed
// in), IQ4_NL by the sign trick on its levels looked up with VPSHUFB (e8 holds
// the table then).
func dot0Lanes(typ string, x, y GPVirtual, b, xs int, ones, m4, e8 VecVirtual) VecVirtual {
	p := YMM()
	yq := Mem{Base: y, Disp: b*q8Size + q8QS}
	if typ == "Q8_0" {
		qx, qy := YMM(), YMM()
		VMOVDQU(Mem{Base: x, Disp: b*xs + 2}, qx)
		VMOVDQU(yq, qy)
		ax := YMM()
		VPABSB(qx, ax)
		VPSIGNB(qx, qy, qy)
		VPMADDUBSW(qy, ax, p)
	} else {
		qsOff := 2
		if typ == "Q5_0" {
			qsOff = 6
		}
		t, th := XMM(), XMM()
		VMOVDQU(Mem{Base: x, Disp: b*xs + qsOff}, t)
		VPSRLW(U8(4), t, th)
		q := YMM()
		VINSERTI128(U8(1), th, t.AsY(), q)
		VPAND(m4, q, q) // elements 0-15 the low nibbles, 16-31 the high
		if typ == "IQ4_NL" {
			qx, qy := YMM(), YMM()
			VPSHUFB(q, e8, qx) // the levels, signed
			VMOVDQU(yq, qy)
			ax := YMM()
			VPABSB(qx, ax)
			VPSIGNB(qx, qy, qy)
			VPMADDUBSW(qy, ax, p)
			VPMADDWD(ones, p, p)
			return p
		}
		if typ == "Q5_0" {
			h := YMM()
			VPBROADCASTD(Mem{Base: x, Disp: b*xs + 2}, h)
			VPSHUFB(q5Spread, h, h)
			VPAND(q5Bits, h, h)
			VPCMPEQB(q5Bits, h, h)
			VPAND(bit4Mask, h, h)
			VPOR(h, q, q)
		}
		c := YMM()
		VPMADDUBSW(yq, q, p)
		VPMADDUBSW(yq, e8, c)
		VPSUBW(c, p, p)
	}
	VPMADDWD(ones, p, p)
	return p
}

// dot0AVX2 emits the single-row Q8_0, Q4_0, Q5_0 or IQ4_NL kernel: four blocks at a time,
// their lane sums reduced together and their float steps done side by side
// before the four additions to sum, in block order.
func dot0AVX2(typ string) {
	name := "dot" + typ + "AVX2"
	TEXT(name, NOSPLIT, "func(x, y *byte, n int) float32")
	Pragma("noescape")
	Doc(name+" is the dot product of n "+typ+" blocks at x with n q8Blocks at y: per block",
		"the exact integer sum isum, then sum += (f16(x.d)·y.d)·isum in block order",
		"(Q4_0: fused, sum = fma(isum, f16(x.d)·y.d, sum)).")
	xs := map[string]int{"Q8_0": q80Size, "Q4_0": q40Size, "Q5_0": q50Size, "IQ4_NL": q40Size}[typ]
	x, y, n := params3()
	ones, m4, e8 := YMM(), YMM(), YMM()
	VMOVDQU(ones16, ones)
	switch typ {
	case "Q4_0":
		VMOVDQU(nibbleMask, m4)
		VMOVDQU(eights, e8)
	case "Q5_0":
		VMOVDQU(nibbleMask, m4)
		VMOVDQU(sixteens, e8)
	case "IQ4_NL":
		VMOVDQU(nibbleMask, m4)
		VMOVDQU(iq4nlTable, e8)
	}
	sum := XMM()
	VXORPS(sum, sum, sum)

	Label("quad")
	CMPQ(n, U8(4))
	JL(LabelRef("one"))
	var l [4]VecVirtual
	for b := range l {
		l[b] = dot0Lanes(typ, x, y, b, xs, ones, m4, e8)
	}
	p01, p23 := YMM(), YMM()
	VPHADDD(l[1], l[0], p01)
	VPHADDD(l[3], l[2], p23)
	VPHADDD(p23, p01, p01) // per 128 bits: the 4 blocks' sums of that half
	hi := XMM()
	VEXTRACTI128(U8(1), p01, hi)
	VPADDD(p01.AsX(), hi, hi)
	f := XMM()
	VCVTDQ2PS(hi, f)
	g := GP32()
	xh := XMM()
	for b := 0; b < 4; b++ {
		MOVWLZX(Mem{Base: x, Disp: b * xs}, g)
		if b == 0 {
			VMOVD(g, xh)
		} else {
			VPINSRW(U8(b), g, xh, xh)
		}
	}
	d := XMM()
	VCVTPH2PS(xh, d)
	yd := XMM()
	VMOVSS(Mem{Base: y}, yd)
	for b := 1; b < 4; b++ {
		VINSERTPS(U8(b<<4), Mem{Base: y, Disp: b * q8Size}, yd, yd)
	}
	VMULPS(yd, d, d) // f16(x.d)·y.d
	blockStepsSS(typ, f, d, sum, 4)
	ADDQ(U32(4*xs), x)
	ADDQ(U32(4*q8Size), y)
	SUBQ(U8(4), n)
	JMP(LabelRef("quad"))

	Label("one")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	lb := dot0Lanes(typ, x, y, 0, xs, ones, m4, e8)
	h := XMM()
	VEXTRACTI128(U8(1), lb, h)
	VPADDD(lb.AsX(), h, h)
	VPHADDD(h, h, h)
	VPHADDD(h, h, h)
	fb := XMM()
	VCVTDQ2PS(h, fb)
	MOVWLZX(Mem{Base: x}, g)
	db := XMM()
	VMOVD(g, db)
	VCVTPH2PS(db, db)
	VMULSS(Mem{Base: y}, db, db)
	blockStepSS(typ, fb, db, sum)
	ADDQ(U8(xs), x)
	ADDQ(U8(q8Size), y)
	DECQ(n)
	JMP(LabelRef("one"))

	Label("done")
	VZEROUPPER()
	Store(sum, ReturnIndex(0))
	RET()
}

// rawBcst emits an EVEX instruction whose memory operand (the first) is a 32-bit
// element broadcast to every lane.
func rawBcst(op string, ops ...Op) {
	Instruction(&ir.Instruction{
		Opcode:   op,
		Suffixes: []string{"BCST"},
		Operands: ops,
		Inputs:   ops,
		Outputs:  ops[len(ops)-1:],
	})
}

// dot0Outer emits the AVX-512 Q8_0, Q4_0, Q5_0 or IQ4_NL kernel for 16
// weight rows × T tokens as outer products: the weights of a block are
// transposed so that register g holds bytes 4g..4g+3 of the 16 rows (Q8_0 + 128,
// Q4_0's nibbles q, Q5_0's q with its fifth bit, IQ4_NL's level +
// 128, looked up by VPSHUFB), and a token's 4 bytes, broadcast, meet
// them in one VPDPBUSD: lane r of the token's accumulator, started at c = −k·Σy
// (k = 128, 8 or 16, from the q8Block), ends at row r's exact isum. The float
// steps then run on the 16 rows at once. No horizontal sums: each lane is one
// (row, token) pair. (Q4_1 had these tiles until issue 32 gave it llama.cpp's
// 8-lane float order, which one float per (row, token) cannot keep.)
func dot0Outer(typ string, T int) {
	evex = true
	defer func() { evex = false }()
	name := fmt.Sprintf("dot%sAVX512x16t%d", typ, T)
	if fusedQ8 {
		name = fmt.Sprintf("dotQ8_0FAVX512x16t%d", T)
	}
	TEXT(name, NOSPLIT, "func(x *byte, rb int, y *byte, ys int, nb int, out *float32, os int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets out[t·os + r] = dot%sAVX2(x + r·rb, y + t·ys, nb) for r < 16, t < %d.", name, typ, T))
	xs := map[string]int{"Q8_0": q80Size, "Q4_0": q40Size, "Q5_0": q50Size, "IQ4_NL": q40Size}[typ]
	qsOff := map[string]int{"Q8_0": 2, "Q4_0": 2, "Q5_0": 6, "IQ4_NL": 2}[typ]
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
	zero, kc := ZMM(), ZMM()
	VPXORD(zero, zero, zero)
	if typ == "Q8_0" {
		VPTERNLOGD(U8(0xff), kc, kc, kc) // all ones
		VPABSB(kc, kc)                   // 0x01
		VPSLLW(U8(7), kc, kc)            // 0x80 (in every byte: the words' low bytes shift into the high)
	} else {
		VMOVDQU64(nibbleMask, kc)
	}
	mask := kc
	var tbl VecVirtual
	if typ == "IQ4_NL" {
		tbl = ZMM()
		VMOVDQU64(iq4oTable, tbl) // the levels + 128, in each 128-bit lane
	}
	sums := make([]VecVirtual, T)
	for t := range sums {
		sums[t] = ZMM()
		VPXORD(sums[t], sums[t], sums[t])
	}

	Label("loop")
	TESTQ(nb, nb)
	JZ(LabelRef("done"))
	if T == 1 {
		prefetchNext(rows, 16, 0)
	}
	// The 16 rows' quants transposed: 4×4 transposes of 32-bit groups within
	// 128-bit lanes, lane L of a register holding rows 4L..4L+3.
	transpose := func(off int) [4]VecVirtual {
		var a [4]VecVirtual
		for k := range a {
			a[k] = ZMM()
			VINSERTI32X4(U8(0), rows.at(k).Offset(off), zero, a[k])
			for l := 1; l < 4; l++ {
				VINSERTI32X4(U8(l), rows.at(4*l+k).Offset(off), a[k], a[k])
			}
		}
		return unpackDwords4(a, ZMM)
	}
	var w [8]VecVirtual
	lo := transpose(qsOff)
	if typ == "Q8_0" {
		hi := transpose(18)
		for g := 0; g < 4; g++ {
			w[g], w[4+g] = lo[g], hi[g]
		}
		for g := range w {
			VPXORD(kc, w[g], w[g]) // x + 128
		}
	} else {
		for g := 0; g < 4; g++ {
			w[4+g] = ZMM()
			VPSRLW(U8(4), lo[g], w[4+g])
			VPANDD(mask, w[4+g], w[4+g]) // elements 16+4g..: the high nibbles
			w[g] = lo[g]
			VPANDD(mask, w[g], w[g])
		}
	}
	if typ == "IQ4_NL" {
		for g := range w {
			VPSHUFB(w[g], tbl, w[g]) // level + 128
		}
	}
	if typ == "Q5_0" {
		// The fifth bits: w[g] holds elements 4g..4g+3, whose bits are bits
		// 4(g%2).. of byte g/2 of the row's uint32 qh: that byte spread to the
		// lane's 4 bytes, each tested for its bit, 16 added where set.
		qh := gather16(rows, 2)
		for g := range w {
			t := ZMM()
			VPSHUFB(q5oSpread.Offset(64*(g/2)), qh, t)
			k := K()
			VPTESTMB(q5oBits.Offset(64*(g%2)), t, k)
			VPADDB(sixteens64, w[g], k, w[g])
		}
	}
	// f16(x.d) of the 16 rows.
	f16s := func(off int) VecVirtual {
		h0, h1 := XMM(), XMM()
		VMOVDQA32(zero.AsX(), h0)
		VMOVDQA32(zero.AsX(), h1)
		for r := 0; r < 8; r++ {
			VPINSRW(U8(r), rows.at(r).Offset(off), h0, h0)
			VPINSRW(U8(r), rows.at(8+r).Offset(off), h1, h1)
		}
		hy := YMM()
		VINSERTI32X4(U8(1), h1, h0.AsY(), hy)
		f := ZMM()
		VCVTPH2PS(hy, f)
		return f
	}
	xd := f16s(0)
	for t := 0; t < T; t++ {
		yt := toks.at(t)
		acc := ZMM()
		VPBROADCASTD(yt.Offset(q8C), acc)
		for g := 0; g < 8; g++ {
			rawBcst("VPDPBUSD", yt.Offset(q8QS+4*g), w[g], acc)
		}
		VCVTDQ2PS(acc, acc)
		d := ZMM()
		VMULPS_BCST(yt, xd, d) // f16(x.d)·y.d
		blockStep(typ, acc, d, sums[t])
	}
	rows.advance(xs)
	toks.advance(q8Size)
	DECQ(nb)
	JMP(LabelRef("loop"))

	Label("done")
	out := load("out")
	if T > 1 {
		os := load("os")
		SHLQ(U8(2), os)
		for t := range sums {
			VMOVUPS(sums[t], Mem{Base: out})
			if t+1 < T {
				ADDQ(os, out)
			}
		}
	} else {
		VMOVUPS(sums[0], Mem{Base: out})
	}
	VZEROUPPER()
	RET()
}
