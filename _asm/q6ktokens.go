package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// dotQ6KAVX2Tokens emits dotQ6KAVX2x4 or dotQ6KAVX2x8: one Q6_K row against T = 4
// or 8 activation rows (stride bytes apart) on AVX2, for the few-token products
// of a speculative verification step. Each 32-quant chunk of the weight block is
// unpacked once for the T tokens, and each token keeps its own int32 lanes
// (exact: any order of the integer sums gives the same lanes). At the end of a
// block each token's lanes go through q6KLanes, the one-token kernel's float
// steps (the bsum correction, the conversion, y.d·f16(x.d) and one fused
// multiply-add into its 8 float lanes), and the lanes are reduced as in
// dotQ6KAVX2: out[t] has the bits of dotQ6KAVX2 on token t alone (and of the Go
// reference, dotQ6KRowGeneric), whatever T.
//
// The registers: the T int accumulators, the scales and a few temporaries live
// through the block; the masks are memory operands, the scales·bsums products
// are taken at the block's end, and with T = 8 the float lanes wait on the
// stack (a load and a store per token and block).
func dotQ6KAVX2Tokens(T int) {
	name := fmt.Sprintf("dotQ6KAVX2x%d", T)
	TEXT(name, NOSPLIT, "func(x, y *byte, n, stride int, out *float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets out[t] = dotQ6KAVX2(x, y+t·stride, n) for t < %d (one", name, T),
		"weight block unpacked for all the tokens; each token's float steps as there).")
	x, y, n := params3()
	stride := GP64()
	Load(Param("stride"), stride)
	toks := newRowSet(y, stride, T)

	spill := T > 4
	var facc []VecVirtual
	var local Mem
	if spill {
		local = AllocLocal(32 * T)
		z := YMM()
		VXORPS(z, z, z)
		for t := 0; t < T; t++ {
			VMOVUPS(z, local.Offset(32*t))
		}
	} else {
		facc = make([]VecVirtual, T)
		for t := range facc {
			facc[t] = YMM()
			VXORPS(facc[t], facc[t], facc[t])
		}
	}

	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	scales := XMM()
	VMOVDQU(Mem{Base: x, Disp: 192}, scales)
	acc := make([]VecVirtual, T)
	for t := range acc {
		acc[t] = YMM()
		VPXOR(acc[t], acc[t], acc[t])
	}
	for h := 0; h < 2; h++ {
		for k := 0; k < 4; k++ {
			// As dotQ6KAVX2 (q6KChunk).
			v, sw := q6KChunk(x, scales, h, k, nibbleMask, bits45Mask)
			for t := 0; t < T; t++ {
				p := YMM()
				VPMADDUBSW(toks.at(t).Offset(q8KQS+128*h+32*k), v, p)
				VPMADDWD(sw, p, p)
				VPADDD(p, acc[t], acc[t])
			}
		}
	}
	sw16 := YMM()
	VPMOVSXBW(scales, sw16)
	dd := q6KD(x)
	for t := 0; t < T; t++ {
		yt := GP64()
		LEAQ(toks.at(t), yt)
		bc := YMM()
		VPMADDWD(Mem{Base: yt, Disp: q8KBsums}, sw16, bc)
		if spill {
			f := YMM()
			VMOVUPS(local.Offset(32*t), f)
			q6KLanes(yt, dd, acc[t], bc, f)
			VMOVUPS(f, local.Offset(32*t))
		} else {
			q6KLanes(yt, dd, acc[t], bc, facc[t])
		}
	}

	ADDQ(U32(q6KSize), x)
	toks.advance(q8KSize)
	DECQ(n)
	JMP(LabelRef("loop"))

	Label("done")
	if spill {
		facc = make([]VecVirtual, T)
		for t := range facc {
			facc[t] = YMM()
			VMOVUPS(local.Offset(32*t), facc[t])
		}
	}
	storeLaneSums(facc)
}

// q6KChunk unpacks chunk k of half h of the Q6_K block at x: elements 128h+32k+l,
// low bits in ql[32(k&1)+l] (low nibble for k<2), top two bits at bit 2k of qh[l],
// moved to bits 4-5 (m4: the nibble mask, m30: bits 4-5); it returns the 32 6-bit
// quants and the chunk's two scales widened to words (scales: the block's 16).
func q6KChunk(x GPVirtual, scales VecVirtual, h, k int, m4, m30 Op) (v, sw VecVirtual) {
	v = YMM()
	VMOVDQU(Mem{Base: x, Disp: 64*h + 32*(k&1)}, v)
	if k >= 2 {
		VPSRLW(U8(4), v, v)
	}
	VPAND(m4, v, v)
	hb := YMM()
	VMOVDQU(Mem{Base: x, Disp: 128 + 32*h}, hb)
	switch k {
	case 0:
		VPSLLW(U8(4), hb, hb)
	case 1:
		VPSLLW(U8(2), hb, hb)
	case 3:
		VPSRLW(U8(2), hb, hb)
	}
	VPAND(m30, hb, hb)
	VPOR(hb, v, v)
	s := XMM()
	VPSHUFB(q6kShuf.Offset(16*(4*h+k)), scales, s)
	sw = YMM()
	VPMOVSXBW(s, sw)
	return v, sw
}
