package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// dotF32VecDotAVX2 emits the F32 dot product in the float order of
// ggml_vec_dot_f32 as llama.cpp's AVX-512 builds run it (four accumulators of 16
// lanes, each a fused multiply-add per 64 values, added (0+2)+(1+3) and reduced
// by halves; kernels.dotF32VecDotGeneric): here eight accumulators of 8 lanes,
// accumulator g taking values 8g..8g+7 of each 64 (the halves of ggml's four),
// then ((h0+h4)+(h2+h6)) + ((h1+h5)+(h3+h7)) lane by lane and sum8. n is a
// multiple of 64.
func dotF32VecDotAVX2() {
	TEXT("dotF32VecDotAVX2", NOSPLIT, "func(x *byte, y *float32, n int) float32")
	Pragma("noescape")
	Doc("dotF32VecDotAVX2 is x·y for n (a multiple of 64) float32s in ggml_vec_dot_f32's order (AVX-512 builds).")
	x, y, n := GP64(), GP64(), GP64()
	Load(Param("x"), x)
	Load(Param("y"), y)
	Load(Param("n"), n)
	var h [8]VecVirtual
	for g := range h {
		h[g] = YMM()
		VXORPS(h[g], h[g], h[g])
	}
	Label("loop")
	CMPQ(n, U8(64))
	JL(LabelRef("done"))
	for g := range h {
		w := YMM()
		VMOVUPS(Mem{Base: x, Disp: 32 * g}, w)
		VFMADD231PS(Mem{Base: y, Disp: 32 * g}, w, h[g])
	}
	ADDQ(U32(256), x)
	ADDQ(U32(256), y)
	SUBQ(U8(64), n)
	JMP(LabelRef("loop"))

	Label("done")
	for _, p := range [][2]int{{0, 4}, {2, 6}, {1, 5}, {3, 7}} {
		VADDPS(h[p[1]], h[p[0]], h[p[0]])
	}
	VADDPS(h[2], h[0], h[0])
	VADDPS(h[3], h[1], h[1])
	VADDPS(h[1], h[0], h[0])
	s := hsum8(h[0])
	VZEROUPPER()
	Store(s, ReturnIndex(0))
	RET()
}
