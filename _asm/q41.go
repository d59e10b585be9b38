package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
)

const q41Size = 20 // Q4_1: d f16, m f16, qs [16]byte

// dotQ4_1AVX2 emits the Q4_1 kernel for AVX2 against Q8_1 activations (laid out
// as q8Block: d, then s where q8Block has c, then qs): per block the exact integer
// sum isum = Σ q·y of the unsigned nibbles, then the reference's float steps
// sum += (f16(x.d)·y.d)·isum + f16(x.m)·y.s, blocks in order.
func dotQ4_1AVX2() {
	TEXT("dotQ4_1AVX2", NOSPLIT, "func(x, y *byte, n int) float32")
	Pragma("noescape")
	Doc("dotQ4_1AVX2 is the dot product of n Q4_1 blocks at x with n q8_1Blocks at y.")
	x, y, n := params3()
	m4, ones := YMM(), YMM()
	VMOVDQU(nibbleMask, m4)
	VMOVDQU(ones16, ones)
	sum := XMM()
	VXORPS(sum, sum, sum)

	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	t, th := XMM(), XMM()
	VMOVDQU(Mem{Base: x, Disp: 4}, t)
	VPSRLW(U8(4), t, th)
	q := YMM()
	VINSERTI128(U8(1), th, t.AsY(), q)
	VPAND(m4, q, q) // elements 0-15 the low nibbles, 16-31 the high
	p := YMM()
	VPMADDUBSW(Mem{Base: y, Disp: q8QS}, q, p)
	VPMADDWD(ones, p, p)
	hi := XMM()
	VEXTRACTI128(U8(1), p, hi)
	VPADDD(p.AsX(), hi, hi)
	VPHADDD(hi, hi, hi)
	VPHADDD(hi, hi, hi)
	f := XMM()
	VCVTDQ2PS(hi, f)
	g := GP32()
	MOVL(Mem{Base: x}, g)
	dm := XMM()
	VMOVD(g, dm)
	VCVTPH2PS(dm, dm) // d, m
	d := XMM()
	VMULSS(Mem{Base: y}, dm, d) // f16(x.d)·y.d
	VMULSS(f, d, d)             // ·isum
	m := XMM()
	VMOVSHDUP(dm, m)
	VMULSS(Mem{Base: y, Disp: 4}, m, m) // f16(x.m)·y.s
	VADDSS(m, d, d)
	VADDSS(d, sum, sum)
	ADDQ(U32(q41Size), x)
	ADDQ(U32(q8Size), y)
	DECQ(n)
	JMP(LabelRef("loop"))

	Label("done")
	VZEROUPPER()
	Store(sum, ReturnIndex(0))
	RET()
}
