package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Q8_0 in llama.cpp's float order (ggml_vec_dot_q8_0_q8_0 on x86,
// dotQ8_0LanesGeneric): 8 float lanes per (row, token); for each block, lane k
// takes the exact integer sum of the products at positions 4k..4k+3 and adds it
// times f16(x.d)·y.d in one fused multiply-add; the lanes are summed as sum8 at
// the end. (The block-order kernels of outer.go stay for Q4_0, the repacked Q5_0
// and IQ4_NL, and attention over a q8_0 cache.)

// q80Kernels emits the Q8_0 kernels in ggml's order (after outerConstants).
func q80Kernels() {
	dotQ8_0LanesAVX2()
	for _, t := range []int{1, 2} {
		dotQ8_0LanesOuter(t)
	}
}

// dotQ8_0LanesAVX2 emits the one-row kernel (AVX2): the lanes by the sign trick
// (|x| times y·sign(x), exact while y > −128, which quantActQ8_0 never makes),
// VPMADDUBSW and VPMADDWD giving lane k the products 4k..4k+3.
func dotQ8_0LanesAVX2() {
	TEXT("dotQ8_0LanesAVX2", NOSPLIT, "func(x, y *byte, n int) float32")
	Pragma("noescape")
	Doc("dotQ8_0LanesAVX2 is the dot product of n Q8_0 blocks at x with n q8Blocks at y, in ggml's 8-lane order.")
	x, y, n := params3()
	ones := YMM()
	VMOVDQU(ones16, ones)
	acc := YMM()
	VXORPS(acc, acc, acc)

	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	qx, qy := YMM(), YMM()
	VMOVDQU(Mem{Base: x, Disp: 2}, qx)
	VMOVDQU(Mem{Base: y, Disp: q8QS}, qy)
	ax := YMM()
	VPABSB(qx, ax)
	VPSIGNB(qx, qy, qy)
	p := YMM()
	VPMADDUBSW(qy, ax, p)
	VPMADDWD(ones, p, p)
	f := YMM()
	VCVTDQ2PS(p, f)
	g := GP32()
	MOVWLZX(Mem{Base: x}, g)
	dx := XMM()
	VMOVD(g, dx)
	VCVTPH2PS(dx, dx)
	VMULSS(Mem{Base: y}, dx, dx) // f16(x.d)·y.d
	dy := YMM()
	VBROADCASTSS(dx, dy)
	VFMADD231PS(dy, f, acc)
	ADDQ(U32(q80Size), x)
	ADDQ(U32(q8Size), y)
	DECQ(n)
	JMP(LabelRef("loop"))

	Label("done")
	r := hsum8(acc)
	VZEROUPPER()
	Store(r, ReturnIndex(0))
	RET()
}

// dotQ8_0LanesOuter emits dotQ8_0LanesAVX512x16t<T>: dotQ8_0LanesAVX2 of 16
// weight rows (x, x+rb, …) with T activation rows (y, y+ys, …) into
// out[t·os + r], as dot0Outer's outer products: a block's weights transposed so
// that register g holds bytes 4g..4g+3 of the 16 rows, + 128, and a token's 4
// bytes, broadcast, meet them in one VPDPBUSD started at c_g = −128·Σ y[4g..4g+3]
// (the token's group corrections, made once per block), so that lane r ends at
// row r's exact lane-g sum. Lane g of the 8-lane order is then register g: its
// conversion and fused multiply-add run on the 16 rows at once, and the 8
// registers are summed at the end in sum8's order, each output the one-row
// kernel's bits.
func dotQ8_0LanesOuter(T int) {
	evex = true
	defer func() { evex = false }()
	name := fmt.Sprintf("dotQ8_0LanesAVX512x16t%d", T)
	TEXT(name, NOSPLIT, "func(x *byte, rb int, y *byte, ys int, nb int, out *float32, os int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets out[t·os + r] = dotQ8_0LanesAVX2(x + r·rb, y + t·ys, nb) for r < 16, t < %d.", name, T))
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
	corr := AllocLocal(32 * T)
	kc := ZMM()
	VPTERNLOGD(U8(0xff), kc, kc, kc) // all ones
	VPABSB(kc, kc)                   // 0x01
	VPSLLW(U8(7), kc, kc)            // 0x80
	sums := make([][8]VecVirtual, T)
	for t := range sums {
		for g := range sums[t] {
			sums[t][g] = ZMM()
			VPXORD(sums[t][g], sums[t][g], sums[t][g])
		}
	}

	Label("loop")
	TESTQ(nb, nb)
	JZ(LabelRef("done"))
	if T == 1 {
		prefetchNext(rows, 16, 0)
	}
	var w [8]VecVirtual
	lo := transpose16(rows, 2)
	hi := transpose16(rows, 18)
	for g := 0; g < 4; g++ {
		w[g], w[4+g] = lo[g], hi[g]
	}
	for g := range w {
		VPXORD(kc, w[g], w[g]) // x + 128
	}
	xd := f16Lanes(gather16(rows, 0))
	for t := 0; t < T; t++ {
		yt := toks.at(t)
		c, z := YMM(), YMM()
		VMOVDQU32(zeros64.Offset(0), c)
		raw("VPDPBUSD", yt.Offset(q8QS), kc.AsY(), c) // 128·Σ y[4g..4g+3]
		VMOVDQU32(zeros64.Offset(0), z)
		VPSUBD(c, z, z)
		VMOVDQU32(z, corr.Offset(32*t))
		d := ZMM()
		VMULPS_BCST(yt, xd, d) // f16(x.d)·y.d
		for g := range w {
			acc := ZMM()
			VPBROADCASTD(corr.Offset(32*t+4*g), acc)
			rawBcst("VPDPBUSD", yt.Offset(q8QS+4*g), w[g], acc)
			VCVTDQ2PS(acc, acc)
			VFMADD231PS(acc, d, sums[t][g])
		}
	}
	rows.advance(q80Size)
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
		VMOVUPS(s[0], Mem{Base: out})
		if t+1 < T {
			ADDQ(os, out)
		}
	}
	VZEROUPPER()
	RET()
}
