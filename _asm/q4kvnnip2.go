package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// dotQ4KTileP2 emits dotQ4KAVX512r2t{T}p: dotQ4KAVX512r1t{T}p on two adjacent
// Q4_K rows (x and x + rb) at once, each token's activation chunk loaded once
// for both rows' VPDPBUSDs. A verification step's products whose 9 tokens'
// activations outgrow L1 (2048 columns and more: 18 KiB of quants per 2048)
// read them from L2 once per row pair instead of once per row. Each row's
// block ends exactly as in dotQ4KTileP (the same integer sums and float
// operations per row and token), so out[t·os] and out[t·os + 1] have
// dotQ4KAVX512's bits on rows x and x + rb.
func dotQ4KTileP2(T int) {
	evex = true
	defer func() { evex = false }()
	name := fmt.Sprintf("dotQ4KAVX512r2t%dp", T)
	TEXT(name, NOSPLIT, "func(x *byte, rb int, y *byte, ys int, yd *float32, yds int, bs *int32, gs int, nb int, out *float32, os int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets out[t·os + i] = dotQ4KAVX512(x + i·rb, token t, nb) for i < 2, t < %d,", name, T),
		"the tokens as dotQ4KAVX512r1t{T}p's.")
	x, toks, yd, yds, bs, gs, _, nb := q4KTokenArgs(T)
	x1 := GP64()
	Load(Param("rb"), x1)
	ADDQ(x, x1)
	var k Op
	if T < 16 {
		kk := K()
		g := GP32()
		MOVL(U32(1<<T-1), g)
		KMOVW(g, kk)
		k = kk
	}
	sums := []VecVirtual{ZMM(), ZMM()}
	for _, s := range sums {
		VPXORD(s, s, s)
	}
	// The nibble mask and the shifts stay memory operands (registers for 2T
	// accumulators).
	widx := ZMM()
	VMOVDQU64(q4kScaleWordIdx, widx)

	Label("loop")
	TESTQ(nb, nb)
	JZ(LabelRef("done"))
	xs := []GPVirtual{x, x1}
	acc := [2][]VecVirtual{make([]VecVirtual, T), make([]VecVirtual, T)}
	for i := range acc {
		for p := range acc[i] {
			acc[i][p] = ZMM()
			VPXORD(acc[i][p], acc[i][p], acc[i][p])
		}
	}
	for _, xi := range xs {
		for o := 0; o < 3; o++ {
			PREFETCHT0(Mem{Base: xi}.Offset(q4KPrefetch + 64*o))
		}
	}
	for j := 0; j < 4; j++ {
		// Each row's quants permuted as dotQ4KTileP's (the first 64 bytes
		// loaded again per chunk, the second a memory operand: registers
		// for 2T accumulators).
		var qq [2]VecVirtual
		for i, xi := range xs {
			xr := Mem{Base: xi}
			qa := ZMM()
			VMOVDQU64(xr.Offset(16), qa)
			qq[i] = ZMM()
			VMOVDQU64(q4kPermIdx.Offset(64*j), qq[i])
			VPERMI2B(xr.Offset(80), qa, qq[i])
			VPSRLVW(q4kShiftHalves, qq[i], qq[i])
			VPANDD(nibbleMask, qq[i], qq[i])
		}
		for t := 0; t < T; t++ {
			a := ZMM()
			VMOVDQU64(toks.at(t).Offset(64*j), a)
			for i := range xs {
				raw("VPDPBUSD", a, qq[i], acc[i][t])
			}
		}
	}
	ydv := ZMM()
	if k == nil {
		VMOVUPS(Mem{Base: yd}, ydv)
	} else {
		VMOVUPS_Z(Mem{Base: yd}, k, ydv)
	}
	for i, xi := range xs {
		q4KTilePBlockEnd(acc[i], xi, bs, gs, k, widx, ydv, sums[i])
	}

	ADDQ(U32(q4KSize), x)
	ADDQ(U32(q4KSize), x1)
	toks.advance(256)
	ADDQ(yds, yd)
	LEAQ(Mem{Base: bs, Index: gs, Scale: 4}, bs)
	DECQ(nb)
	JMP(LabelRef("loop"))

	Label("done")
	out, os := GP64(), GP64()
	Load(Param("out"), out)
	Load(Param("os"), os)
	SHLQ(U8(2), os)
	for l := 0; 4*l < T; l++ {
		x0, x1 := XMM(), XMM()
		VEXTRACTF32X4(U8(l), sums[0], x0)
		VEXTRACTF32X4(U8(l), sums[1], x1)
		for i := 0; i < 4 && 4*l+i < T; i++ {
			VEXTRACTPS(U8(i), x0, Mem{Base: out})
			VEXTRACTPS(U8(i), x1, Mem{Base: out, Disp: 4})
			ADDQ(os, out)
		}
	}
	VZEROUPPER()
	RET()
}

// q4KTilePBlockEnd ends a block of dotQ4KTileP2 for one row (its block at x, its
// T accumulators acc) into sum, with dotQ4KTileP's operations: the scales by
// VPACKSSDW and VPMADDWD on pairs of tokens, the transposed reduction, the
// mins by VPDPWSSD with the transposed bsums (k: the first T lanes, nil for
// 16), and y.d·d·is − y.d·dmin·ms added into each token's lane (ydv: the
// tokens' y.d).
func q4KTilePBlockEnd(acc []VecVirtual, x, bs, gs GPVirtual, k Op, widx, ydv, sum VecVirtual) {
	T := len(acc)
	xr := Mem{Base: x}
	var zero VecVirtual
	if T%4 != 0 {
		zero = ZMM()
		VPXORD(zero, zero, zero)
	}
	is, smw := q4KPackedScaledSums(acc, xr, widx, zero)
	mins := ZMM()
	VSHUFI64X2(U8(0x55), smw.AsZ(), smw.AsZ(), mins)
	ms := ZMM()
	VPXORD(ms, ms, ms)
	for i := 0; i < 4; i++ {
		mb := ZMM()
		VPSHUFD(U8(0x55*i), mins, mb)
		var m Mem
		switch i {
		case 0:
			m = Mem{Base: bs}
		case 1:
			m = Mem{Base: bs, Index: gs, Scale: 1}
		case 2:
			m = Mem{Base: bs, Index: gs, Scale: 2}
		default:
			// bs + 3·gs through a scratch register (no gs3 held: with the
			// second row's pointer the general registers run out at 9 tokens).
			b3 := GP64()
			LEAQ(Mem{Base: bs, Index: gs, Scale: 2}, b3)
			m = Mem{Base: b3, Index: gs, Scale: 1}
		}
		if k == nil {
			raw("VPDPWSSD", m, mb, ms)
		} else {
			v := ZMM()
			VMOVDQU32_Z(m, k, v)
			raw("VPDPWSSD", v, mb, ms)
		}
	}
	d := tileRowScales(rowSet{bases: []GPVirtual{x}}, 1, 0)
	dm := tileRowScales(rowSet{bases: []GPVirtual{x}}, 1, 2)
	VMULPS(ydv, d, d)
	VMULPS(ydv, dm, dm)
	VCVTDQ2PS(is, is)
	VCVTDQ2PS(ms, ms)
	VMULPS(is, d, d)
	VMULPS(ms, dm, dm)
	VSUBPS(dm, d, d)
	VADDPS(d, sum, sum)
}
