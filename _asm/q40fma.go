package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Q4_0's and IQ4_NL's float step is llama.cpp's (issue 32): its CPU backend takes
// a model's Q4_0 and IQ4_NL matrices through the repacked kernels
// (ggml_gemv_q4_0_8x8_q8_0 / ggml_gemv_iq4_nl_8x8_q8_0 decoding, the gemm forms
// for each group of 4 prompt tokens, which agree), and they add each block as
// acc = fma(float(isum), f16(x.d)·y.d, acc): the scales' product rounded, then
// one fused multiply-add, blocks in order. Q8_0 and Q5_0 keep the product,
// product, sum of outer.go; IQ4_NL's prompts, repacked into Q8_0 blocks
// (engine/kernels/repack.go), take dotQ8_0FAVX512x16t*: the Q8_0 tiles with the
// fused step (dot0OuterFused).

// fusedQ8 makes dot0Outer emit the Q8_0 kernels with the fused step, as
// dotQ8_0FAVX512x16t<T> (dot0OuterFused).
var fusedQ8 bool

// dot0OuterFused emits dotQ8_0FAVX512x16t<T>: dot0Outer's Q8_0 kernel with the
// fused step, for IQ4_NL's prompts repacked into Q8_0 blocks.
func dot0OuterFused(T int) {
	fusedQ8 = true
	defer func() { fusedQ8 = false }()
	dot0Outer("Q8_0", T)
}

// fusedStep reports whether typ's kernels take the fused step.
func fusedStep(typ string) bool {
	return typ == "Q4_0" || typ == "IQ4_NL" || typ == "Q8_0" && fusedQ8
}

// blockStep emits sum += f·d for vectors of (row, token) lanes: f the blocks'
// isum as floats, d their f16(x.d)·y.d (overwritten but for Q4_0).
func blockStep(typ string, f, d, sum VecVirtual) {
	if fusedStep(typ) {
		VFMADD231PS(f, d, sum)
		return
	}
	VMULPS(f, d, d) // ·isum
	VADDPS(d, sum, sum)
}

// blockStepSS is blockStep on lane 0 of f and d into the scalar sum.
func blockStepSS(typ string, f, d, sum VecVirtual) {
	if fusedStep(typ) {
		VFMADD231SS(f, d, sum)
		return
	}
	VMULSS(f, d, d)
	VADDSS(d, sum, sum)
}

// blockStepsSS emits the scalar steps of lanes 0 … n−1 (n 2 or 4) of f and d
// into sum in lane order (n consecutive blocks).
func blockStepsSS(typ string, f, d, sum VecVirtual, n int) {
	if !fusedStep(typ) {
		VMULPS(f, d, d) // ·isum
		VADDSS(d, sum, sum)
		u := XMM()
		VMOVSHDUP(d, u)
		VADDSS(u, sum, sum)
		if n == 4 {
			VMOVHLPS(d, d, u)
			VADDSS(u, sum, sum)
			VPERMILPS(U8(0xff), d, u)
			VADDSS(u, sum, sum)
		}
		return
	}
	VFMADD231SS(f, d, sum)
	uf, ud := XMM(), XMM()
	VMOVSHDUP(f, uf)
	VMOVSHDUP(d, ud)
	VFMADD231SS(uf, ud, sum)
	if n == 4 {
		VMOVHLPS(f, f, uf)
		VMOVHLPS(d, d, ud)
		VFMADD231SS(uf, ud, sum)
		VPERMILPS(U8(0xff), f, uf)
		VPERMILPS(U8(0xff), d, ud)
		VFMADD231SS(uf, ud, sum)
	}
}
