package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// dotFloatAVX512Rows emits dot<kind>AVX512r<R> (act16: dot<kind>AVX512r<R>h):
// R rows of n (a multiple of 64) weights of kind at x, x+rb, … (rb in bytes)
// against one activation row at y, float32s (act16: binary16s, widened by
// VCVTPH2PS, which is exact), out[r] = dotFloatAVX512 of row r with y (the
// same accumulators, operations and order, so its bits). Each 64 activations
// are loaded once for the R rows. engine/kernels/f16rows_amd64.go says which
// pays where; software prefetches (PREFETCHT0/T1/NTA) did not.
func dotFloatAVX512Rows(kind string, size, R int, act16 bool) {
	evex = true
	defer func() { evex = false }()
	name, yt, ykind := fmt.Sprintf("dot%sAVX512r%d", kind, R), "*float32", "float32"
	if act16 {
		name, yt, ykind = name+"h", "*uint16", "binary16"
	}
	TEXT(name, NOSPLIT, "func(x *byte, rb int, y "+yt+", n int, out *float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s is dot%sAVX512 of %d rows of n (a multiple of 64) %s weights at x, x+rb, … (rb in bytes)", name, kind, R, kind),
		fmt.Sprintf("with the %s row at y, into out[0], out[1], ….", ykind))
	x, rb, y, n := GP64(), GP64(), GP64(), GP64()
	Load(Param("x"), x)
	Load(Param("rb"), rb)
	Load(Param("y"), y)
	Load(Param("n"), n)
	// Row r is at base[r/3] + rb·(r%3): x and x+3rb.
	x3 := GP64()
	if R > 3 {
		LEAQ(Mem{Base: x, Index: rb, Scale: 2}, x3)
		ADDQ(rb, x3)
	}
	row := func(r, disp int) Mem {
		base := x
		if r >= 3 {
			base = x3
		}
		switch r % 3 {
		case 1:
			return Mem{Base: base, Index: rb, Scale: 1, Disp: disp}
		case 2:
			return Mem{Base: base, Index: rb, Scale: 2, Disp: disp}
		}
		return Mem{Base: base, Disp: disp}
	}
	z := make([][floatAccs / 2]VecVirtual, R)
	for r := range z {
		for k := range z[r] {
			z[r][k] = ZMM()
			VPXORD(z[r][k], z[r][k], z[r][k])
		}
	}
	Label("loop")
	var yv [floatAccs / 2]VecVirtual
	for k := range yv {
		yv[k] = ZMM()
		if act16 {
			VCVTPH2PS(Mem{Base: y, Disp: 32 * k}, yv[k])
		} else {
			VMOVUPS(Mem{Base: y, Disp: 64 * k}, yv[k])
		}
	}
	for k := 0; k < floatAccs/2; k++ {
		for r := range z {
			w := ZMM()
			floatLoad(kind, row(r, 16*k*size), w)
			VFMADD231PS(yv[k], w, z[r][k])
		}
	}
	ADDQ(U32(8*floatAccs*size), x)
	if R > 3 {
		ADDQ(U32(8*floatAccs*size), x3)
	}
	if act16 {
		ADDQ(U32(16*floatAccs), y)
	} else {
		ADDQ(U32(32*floatAccs), y)
	}
	SUBQ(U8(8*floatAccs), n)
	JNZ(LabelRef("loop"))
	out := GP64()
	Load(Param("out"), out)
	for r := range z {
		// dotFloatAVX512's reduction (dotFloatAVX512Tokens').
		var a [floatAccs / 2]VecVirtual
		for k := range a {
			hi := YMM()
			VEXTRACTF64X4(U8(1), z[r][k], hi)
			a[k] = z[r][k].AsY().(VecVirtual)
			VADDPS(hi, a[k], a[k])
		}
		VADDPS(a[1], a[0], a[0])
		VADDPS(a[3], a[2], a[2])
		VADDPS(a[2], a[0], a[0])
		s := hsum8(a[0])
		VMOVSS(s, Mem{Base: out, Disp: 4 * r})
	}
	VZEROUPPER()
	RET()
}
