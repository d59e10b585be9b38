package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// floatTileTokens are the token counts of the float multi-token kernels: a
// token takes four 512-bit accumulators (the eight 8-lane accumulators of
// dotFloatAVX2), so six tokens hold 24 of the 32 registers.
var floatTileTokens = []int{6, 4, 2}

// dotFloatAVX512Tokens emits dotF16AVX512t<T>, dotBF16AVX512t<T> or
// dotF32AVX512t<T>: one row of n (a multiple of 64; for F32 of 8) weights of
// kind against T activation rows (y, y+ys, …, each n float32s), out[t·os/4] =
// dotFloatAVX512 (for F32 dotFloatAVX2, the same order) of the row with row t.
// Each 16 weights are converted once for the T tokens; every token keeps the
// single-token kernel's accumulators, operations and order (for F32 the groups
// of 8 past the last multiple of 64 go into the low half of accumulator 0, as
// dotFloatAVX2's tail puts them into its accumulator 0), so each output has the
// single-token kernel's bits.
func dotFloatAVX512Tokens(kind string, size, T int) {
	evex = true
	defer func() { evex = false }()
	name := fmt.Sprintf("dot%sAVX512t%d", kind, T)
	TEXT(name, NOSPLIT, "func(x *byte, y *float32, ys int, n int, out *float32, os int)")
	Pragma("noescape")
	one, mult := "dot"+kind+"AVX512", 64
	if kind == "F32" {
		one, mult = "dotF32AVX2", 8
	}
	Doc(fmt.Sprintf("%s is %s of one row of n (a multiple of %d) %s weights at x with each of %d", name, one, mult, kind, T),
		"float32 rows at y, y+ys, … (ys in bytes), into out, out+os, … (os in bytes).")
	x, y, ys, n := GP64(), GP64(), GP64(), GP64()
	Load(Param("x"), x)
	Load(Param("y"), y)
	Load(Param("ys"), ys)
	Load(Param("n"), n)
	// Token t's row is at base[t/3] + ys·(t%3) (scale 1 or 2): y and y+3ys.
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
	z := make([][floatAccs / 2]VecVirtual, T)
	for t := range z {
		for k := range z[t] {
			z[t][k] = ZMM()
			VPXORD(z[t][k], z[t][k], z[t][k])
		}
	}
	Label("loop")
	CMPQ(n, U8(8*floatAccs))
	JL(LabelRef("done"))
	for k := 0; k < floatAccs/2; k++ {
		w := ZMM()
		floatLoad(kind, Mem{Base: x, Disp: 16 * k * size}, w)
		for t := range z {
			VFMADD231PS(row(t, 64*k), w, z[t][k])
		}
	}
	ADDQ(U32(8*floatAccs*size), x)
	ADDQ(U32(32*floatAccs), y)
	ADDQ(U32(32*floatAccs), y3)
	SUBQ(U8(8*floatAccs), n)
	JMP(LabelRef("loop"))
	Label("done")
	// hi0[t] is the high half of token t's accumulator 0 (dotFloatAVX2's
	// accumulator 1) when the F32 tail takes the low half.
	var hi0 []VecVirtual
	if kind == "F32" {
		hi0 = make([]VecVirtual, T)
		for t := range z {
			hi0[t] = YMM()
			VEXTRACTF64X4(U8(1), z[t][0], hi0[t])
		}
		Label("tail8")
		CMPQ(n, U8(8))
		JL(LabelRef("reduce"))
		w := YMM()
		floatLoad(kind, Mem{Base: x}, w)
		for t := range z {
			VFMADD231PS(row(t, 0), w, z[t][0].AsY())
		}
		ADDQ(U32(8*size), x)
		ADDQ(U32(32), y)
		ADDQ(U32(32), y3)
		SUBQ(U8(8), n)
		JMP(LabelRef("tail8"))
		Label("reduce")
	}
	out, os := GP64(), GP64()
	Load(Param("out"), out)
	Load(Param("os"), os)
	for t := range z {
		// dotFloatAVX512's reduction: accumulators 2k and 2k+1 are zmm k's
		// halves; (a0+a1), (a2+a3), … then ((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7)).
		var a [floatAccs / 2]VecVirtual
		for k := range a {
			var hi VecVirtual
			if k == 0 && hi0 != nil {
				hi = hi0[t]
			} else {
				hi = YMM()
				VEXTRACTF64X4(U8(1), z[t][k], hi)
			}
			a[k] = z[t][k].AsY().(VecVirtual)
			VADDPS(hi, a[k], a[k])
		}
		VADDPS(a[1], a[0], a[0])
		VADDPS(a[3], a[2], a[2])
		VADDPS(a[2], a[0], a[0])
		s := hsum8(a[0])
		VMOVSS(s, Mem{Base: out})
		if t+1 < T {
			ADDQ(os, out)
		}
	}
	VZEROUPPER()
	RET()
}

// f32AVX2Tokens are the token counts of the AVX2 float multi-token kernels (F32,
// F16, BF16): a pass takes four of dotFloatAVX2's eight accumulators per token,
// so three tokens hold 12 of the 16 registers, and the second pass those 12
// with the first pass's three sums.
var f32AVX2Tokens = []int{3, 2}

// dotF32AVX2Tokens emits dotF32AVX2t<T>: dotFloatAVX2Tokens for F32.
func dotF32AVX2Tokens(T int) { dotFloatAVX2Tokens("F32", 4, T) }

// dotFloatAVX2Tokens emits dot<kind>AVX2t<T>: one row of n (a multiple of 8)
// weights of kind (F32, F16, BF16; size bytes each) against T activation rows
// (y, y+ys, …), out[t·os/4] = dot<kind>AVX2 of the row with row t.
// dotFloatAVX2's accumulators are independent chains until its reduction, so
// the kernel takes them in two passes over the row: the first keeps
// accumulators 0-3 of every token (and accumulator 0 the groups of 8 past the
// last multiple of 64), and sums them as dotFloatAVX2 does, (a0+a1)+(a2+a3);
// the second accumulators 4-7, (a4+a5)+(a6+a7), and adds the two halves and
// hsum8s them. Each weight load (and F16/BF16 conversion) serves T tokens, and
// every output has the one-token kernel's operations in its order, so its bits.
func dotFloatAVX2Tokens(kind string, size, T int) {
	name := fmt.Sprintf("dot%sAVX2t%d", kind, T)
	TEXT(name, NOSPLIT, "func(x *byte, y *float32, ys int, n int, out *float32, os int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s is dot%sAVX2 of one row of n (a multiple of 8) %s weights at x with each of %d", name, kind, kind, T),
		"float32 rows at y, y+ys, … (ys in bytes), into out, out+os, … (os in bytes).")
	x, y, ys, n := GP64(), GP64(), GP64(), GP64()
	Load(Param("x"), x)
	Load(Param("y"), y)
	Load(Param("ys"), ys)
	Load(Param("n"), n)
	row := func(t, disp int) Mem {
		switch t {
		case 1:
			return Mem{Base: y, Index: ys, Scale: 1, Disp: disp}
		case 2:
			return Mem{Base: y, Index: ys, Scale: 2, Disp: disp}
		}
		return Mem{Base: y, Disp: disp}
	}
	const half = floatAccs / 2
	// pass runs accumulators k0 … k0+3 over the row's multiples of 64 (and,
	// for k0 = 0, the groups of 8 after them into accumulator 0), and returns
	// each token's (a_k0+a_k0+1)+(a_k0+2+a_k0+3).
	pass := func(k0 int, lbl string) []VecVirtual {
		acc := make([][half]VecVirtual, T)
		for t := range acc {
			for k := range acc[t] {
				acc[t][k] = YMM()
				VXORPS(acc[t][k], acc[t][k], acc[t][k])
			}
		}
		Label(lbl + "loop")
		CMPQ(n, U8(8*floatAccs))
		JL(LabelRef(lbl + "tail"))
		for k := 0; k < half; k++ {
			w := YMM()
			floatLoad(kind, Mem{Base: x, Disp: 8 * size * (k0 + k)}, w)
			for t := range acc {
				VFMADD231PS(row(t, 32*(k0+k)), w, acc[t][k])
			}
		}
		ADDQ(U32(8*floatAccs*size), x)
		ADDQ(U32(32*floatAccs), y)
		SUBQ(U8(8*floatAccs), n)
		JMP(LabelRef(lbl + "loop"))
		Label(lbl + "tail")
		if k0 == 0 {
			CMPQ(n, U8(8))
			JL(LabelRef(lbl + "sum"))
			w := YMM()
			floatLoad(kind, Mem{Base: x}, w)
			for t := range acc {
				VFMADD231PS(row(t, 0), w, acc[t][0])
			}
			ADDQ(U32(8*size), x)
			ADDQ(U32(32), y)
			SUBQ(U8(8), n)
			JMP(LabelRef(lbl + "tail"))
			Label(lbl + "sum")
		}
		s := make([]VecVirtual, T)
		for t := range acc {
			a := acc[t]
			VADDPS(a[1], a[0], a[0])
			VADDPS(a[3], a[2], a[2])
			VADDPS(a[2], a[0], a[0])
			s[t] = a[0]
		}
		return s
	}
	lo := pass(0, "lo")
	Load(Param("x"), x)
	Load(Param("y"), y)
	Load(Param("n"), n)
	hi := pass(half, "hi")
	out, os := GP64(), GP64()
	Load(Param("out"), out)
	Load(Param("os"), os)
	for t := range lo {
		VADDPS(hi[t], lo[t], lo[t])
		s := hsum8(lo[t])
		VMOVSS(s, Mem{Base: out})
		if t+1 < T {
			ADDQ(os, out)
		}
	}
	VZEROUPPER()
	RET()
}
