package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Q4_0's float step is llama.cpp's (issue 32): its CPU backend takes a model's
// Q4_0 matrices through the repacked kernels (ggml_gemv_q4_0_8x8_q8_0 decoding,
// ggml_gemm_q4_0_8x8_q8_0 for each group of 4 prompt tokens, which agree), and
// they add each block as acc = fma(float(isum), f16(x.d)·y.d, acc): the scales'
// product rounded, then one fused multiply-add, blocks in order. Q8_0, Q5_0 and
// IQ4_NL keep the product, product, sum of outer.go.

// blockStep emits sum += f·d for vectors of (row, token) lanes: f the blocks'
// isum as floats, d their f16(x.d)·y.d (overwritten but for Q4_0).
func blockStep(typ string, f, d, sum VecVirtual) {
	if typ == "Q4_0" {
		VFMADD231PS(f, d, sum)
		return
	}
	VMULPS(f, d, d) // ·isum
	VADDPS(d, sum, sum)
}

// blockStepSS is blockStep on lane 0 of f and d into the scalar sum.
func blockStepSS(typ string, f, d, sum VecVirtual) {
	if typ == "Q4_0" {
		VFMADD231SS(f, d, sum)
		return
	}
	VMULSS(f, d, d)
	VADDSS(d, sum, sum)
}

// blockStepsSS emits the scalar steps of lanes 0 … n−1 (n 2 or 4) of f and d
// into sum in lane order (n consecutive blocks).
func blockStepsSS(typ string, f, d, sum VecVirtual, n int) {
	if typ != "Q4_0" {
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
