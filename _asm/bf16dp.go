package main

import (
	"fmt"

	"github.com/mmcloughlin/avo/ir"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// bf16DPTokens are the token counts of the VDPBF16PS kernels: 1 for decoding,
// and floatTileTokens' groups for prompts (four accumulators a token, so six
// tokens hold 24 of the 32 registers).
var bf16DPTokens = []int{1, 2, 4, 6}

// dotBF16DPTokens emits dotBF16DPt<T>: one row of n (a multiple of 64) BF16
// weights at x against T tokens' activations packed by packBF16Pairs (y, y+ys,
// …; 256 bytes per 128 columns), out[t·os/4] = dotBF16AVX2 of the row with
// token t, in its order: dotBF16AVX2's 64 chains (accumulator k, lane l) each
// take one element of every 64 columns, 64m+8k+l, fused-multiply-added in m's
// order; here two consecutive ones, of 64-column blocks 2b and 2b+1, go into one
// VDPBF16PS lane, which adds its odd word's product first and its even word's
// second, each rounded (Zen 5 and the instruction's definition; the products
// of two bfloat16s are exact in float32, so each step is dotBF16AVX2's fused
// one). The weights' words are paired by VPUNPCKLWD/VPUNPCKHWD of block 2b+1
// (even) with block 2b (odd); an odd last block is paired with zeros (the
// activations' pad is zero too: +0 products, which change no sum). Lane (q, j)
// of the four accumulators LA, HA, LB, HB holds chain (k, l) = (q, j), (q,
// 4+j), (4+q, j), (4+q, 4+j); the end sums them in dotBF16AVX2's tree,
// (a0+a1), (a2+a3), … then hsum8. VDPBF16PS takes subnormal inputs and results
// as zero (DAZ, FTZ): the bits differ from dotBF16AVX2's only where a weight, an
// activation or a partial sum is below 2^-126 in magnitude.
func dotBF16DPTokens(T int) {
	evex = true
	defer func() { evex = false }()
	name := fmt.Sprintf("dotBF16DPt%d", T)
	TEXT(name, NOSPLIT, "func(x *byte, y *uint16, ys int, n int, out *float32, os int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s is dotBF16AVX2 of one row of n (a multiple of 64) BF16 weights at x with each of %d", name, T),
		"token rows packed by packBF16Pairs at y, y+ys, … (ys in bytes), into out, out+os, … (os in bytes), with VDPBF16PS.")
	x, y, ys, n := GP64(), GP64(), GP64(), GP64()
	Load(Param("x"), x)
	Load(Param("y"), y)
	Load(Param("ys"), ys)
	Load(Param("n"), n)
	y3 := GP64()
	LEAQ(Mem{Base: y, Index: ys, Scale: 2}, y3)
	ADDQ(ys, y3)
	row := func(t, disp int) Mem {
		base := y
		if t >= 3 {
			base = y3
		}
		switch t % 3 {
		case 1:
			return Mem{Base: base, Index: ys, Scale: 1, Disp: disp}
		case 2:
			return Mem{Base: base, Index: ys, Scale: 2, Disp: disp}
		}
		return Mem{Base: base, Disp: disp}
	}
	// Physical registers throughout (VDPBF16PS is emitted as bytes, which the
	// register allocator cannot see): Z0-Z3 the weights (then each token's
	// activations), Z4-Z7 the word pairs, Z8+4t+k token t's accumulator k.
	z := func(i int) VecPhysical { return zmmRegs[i] }
	for t := 0; t < T; t++ {
		for k := 0; k < 4; k++ {
			a := z(8 + 4*t + k)
			VPXORD(a, a, a)
		}
	}
	// pairs multiplies the 128 columns in Z0-Z3, blocks (Z0, Z1) and (Z2, Z3),
	// into every token's accumulators.
	pairs := func() {
		VPUNPCKLWD(z(0), z(2), z(4)) // even words block 2b+1, odd words block 2b
		VPUNPCKHWD(z(0), z(2), z(5))
		VPUNPCKLWD(z(1), z(3), z(6))
		VPUNPCKHWD(z(1), z(3), z(7))
		for t := 0; t < T; t++ {
			for k := 0; k < 4; k++ {
				VMOVUPS(row(t, 64*k), z(k))
			}
			for k := 0; k < 4; k++ {
				vdpbf16ps(8+4*t+k, 4+k, k)
			}
		}
	}
	Label("loop")
	CMPQ(n, U8(128))
	JL(LabelRef("last"))
	for k := 0; k < 4; k++ {
		VMOVDQU16(Mem{Base: x, Disp: 64 * k}, z(k))
	}
	pairs()
	ADDQ(U32(256), x)
	ADDQ(U32(256), y)
	ADDQ(U32(256), y3)
	SUBQ(U32(128), n)
	JMP(LabelRef("loop"))
	Label("last")
	CMPQ(n, U8(64))
	JL(LabelRef("reduce"))
	for k := 0; k < 2; k++ {
		VMOVDQU16(Mem{Base: x, Disp: 64 * k}, z(k))
	}
	VPXORD(z(2), z(2), z(2))
	VPXORD(z(3), z(3), z(3))
	pairs()
	Label("reduce")
	out, os := GP64(), GP64()
	Load(Param("out"), out)
	Load(Param("os"), os)
	for t := 0; t < T; t++ {
		a := func(k int) VecPhysical { return z(8 + 4*t + k) }
		for _, imm := range []uint8{0xb1, 0x4e} { // a_k + a_k+1, then + a_k+2
			for k := 0; k < 4; k++ {
				VSHUFF32X4(U8(imm), a(k), a(k), z(k))
				VADDPS(z(k), a(k), a(k))
			}
		}
		VADDPS(a(2), a(0), a(0)) // + a_k+4: lanes 0-3 (chains' l = 0-3)
		VADDPS(a(3), a(1), a(1)) // lanes 4-7
		// hsum8 of [lanes 0-3, lanes 4-7]: ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)).
		s, h := X4, X5
		VADDPS(a(1).AsX(), a(0).AsX(), s)
		VMOVHLPS(s, s, h)
		VADDPS(h, s, s)
		VMOVSHDUP(s, h)
		VADDSS(h, s, s)
		VMOVSS(s, Mem{Base: out})
		if t+1 < T {
			ADDQ(os, out)
		}
	}
	VZEROUPPER()
	RET()
}

var zmmRegs = []VecPhysical{Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15,
	Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23, Z24, Z25, Z26, Z27, Z28, Z29, Z30, Z31}

// vdpbf16ps emits VDPBF16PS Zsrc2, Zsrc1, Zdst (dst += the pairwise bfloat16
// products of src1 and src2, odd words first), which Go's assembler lacks, as
// its EVEX bytes (512-bit, no mask; the register form only).
func vdpbf16ps(dst, src1, src2 int) {
	inv := func(r, bit int) byte { return byte(^(r >> bit) & 1) }
	p0 := inv(dst, 3)<<7 | inv(src2, 4)<<6 | inv(src2, 3)<<5 | inv(dst, 4)<<4 | 0x2 // map 0F38
	p1 := byte(^src1&15)<<3 | 1<<2 | 0x2                                            // W0, F3
	p2 := byte(2)<<5 | inv(src1, 4)<<3                                              // 512 bits
	modrm := byte(0xc0) | byte(dst&7)<<3 | byte(src2&7)
	for _, b := range []byte{0x62, p0, p1, p2, 0x52, modrm} {
		Instruction(&ir.Instruction{Opcode: "BYTE", Operands: []Op{U8(b)}})
	}
}

// dotBF16DPr4 emits dotBF16DPr4: dotBF16DPt1 of four rows of n BF16 weights at
// x, x+rb, x+2rb, x+3rb against one token's packed activations y, into
// out[0..3]: each row's accumulators take the same VDPBF16PS steps in the same
// order as dotBF16DPt1's (so the same bits), the token's 128 columns loaded
// once for the four rows. For one-token products of many columns (a 1b
// model's ffn_down, 8192), where one row a call leaves the activations to be
// read again from L2 for every row (F16's dotF16AVX512r4, h47e).
func dotBF16DPr4() {
	evex = true
	defer func() { evex = false }()
	const name = "dotBF16DPr4"
	TEXT(name, NOSPLIT, "func(x *byte, rb int, y *uint16, n int, out *float32)")
	Pragma("noescape")
	Doc(name+" is dotBF16DPt1 of 4 rows of n (a multiple of 64) BF16 weights at x, x+rb, x+2rb, x+3rb (rb in bytes)",
		"with one token's activations packed by packBF16Pairs at y, into out[0..3], with VDPBF16PS.")
	x, rb, y, n := GP64(), GP64(), GP64(), GP64()
	Load(Param("x"), x)
	Load(Param("rb"), rb)
	Load(Param("y"), y)
	Load(Param("n"), n)
	x3 := GP64()
	LEAQ(Mem{Base: x, Index: rb, Scale: 2}, x3)
	ADDQ(rb, x3)
	rowMem := func(r, disp int) Mem {
		switch r {
		case 1:
			return Mem{Base: x, Index: rb, Scale: 1, Disp: disp}
		case 2:
			return Mem{Base: x, Index: rb, Scale: 2, Disp: disp}
		case 3:
			return Mem{Base: x3, Disp: disp}
		}
		return Mem{Base: x, Disp: disp}
	}
	// Physical registers: Z0-Z3 the activations, Z4-Z7 a row's weights,
	// Z8-Z11 its word pairs, Z12+4r+k row r's accumulator k.
	z := func(i int) VecPhysical { return zmmRegs[i] }
	for r := 0; r < 4; r++ {
		for k := 0; k < 4; k++ {
			a := z(12 + 4*r + k)
			VPXORD(a, a, a)
		}
	}
	// rows multiplies the 128 columns of every row (full: both 64-column
	// blocks, else the first with zeros) by the activations in Z0-Z3.
	rows := func(full bool) {
		for r := 0; r < 4; r++ {
			if full {
				for k := 0; k < 4; k++ {
					VMOVDQU16(rowMem(r, 64*k), z(4+k))
				}
			} else {
				for k := 0; k < 2; k++ {
					VMOVDQU16(rowMem(r, 64*k), z(4+k))
				}
				VPXORD(z(6), z(6), z(6))
				VPXORD(z(7), z(7), z(7))
			}
			VPUNPCKLWD(z(4), z(6), z(8)) // even words block 2b+1, odd words block 2b
			VPUNPCKHWD(z(4), z(6), z(9))
			VPUNPCKLWD(z(5), z(7), z(10))
			VPUNPCKHWD(z(5), z(7), z(11))
			for k := 0; k < 4; k++ {
				vdpbf16ps(12+4*r+k, 8+k, k)
			}
		}
	}
	Label(name + "_loop")
	CMPQ(n, U8(128))
	JL(LabelRef(name + "_last"))
	for k := 0; k < 4; k++ {
		VMOVUPS(Mem{Base: y, Disp: 64 * k}, z(k))
	}
	rows(true)
	ADDQ(U32(256), x)
	ADDQ(U32(256), x3)
	ADDQ(U32(256), y)
	SUBQ(U32(128), n)
	JMP(LabelRef(name + "_loop"))
	Label(name + "_last")
	CMPQ(n, U8(64))
	JL(LabelRef(name + "_reduce"))
	for k := 0; k < 4; k++ {
		VMOVUPS(Mem{Base: y, Disp: 64 * k}, z(k))
	}
	rows(false)
	Label(name + "_reduce")
	out := GP64()
	Load(Param("out"), out)
	for r := 0; r < 4; r++ {
		a := func(k int) VecPhysical { return z(12 + 4*r + k) }
		for _, imm := range []uint8{0xb1, 0x4e} { // a_k + a_k+1, then + a_k+2
			for k := 0; k < 4; k++ {
				VSHUFF32X4(U8(imm), a(k), a(k), z(k))
				VADDPS(z(k), a(k), a(k))
			}
		}
		VADDPS(a(2), a(0), a(0))
		VADDPS(a(3), a(1), a(1))
		s, h := X4, X5
		VADDPS(a(1).AsX(), a(0).AsX(), s)
		VMOVHLPS(s, s, h)
		VADDPS(h, s, s)
		VMOVSHDUP(s, h)
		VADDSS(h, s, s)
		VMOVSS(s, Mem{Base: out, Disp: 4 * r})
	}
	VZEROUPPER()
	RET()
}
