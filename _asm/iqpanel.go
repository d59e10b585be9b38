package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The lattice types' panel kernel (AVX-512 VNNI): prompts of 8 tokens or more
// take a group of 16 weight rows decoded once into int16 values with the
// sub-block scales folded in (engine/kernels/iqpanel.go), the tokens' Q8_K
// quants widened to int16 in the same order, and VPDPWSSD integer products of
// 4 rows by 4 tokens. A block of 256 values is 8 zmm of 32 int16 per row or
// token, one per sub-block of 32: words 2k, 2k+1 hold values 4k, 4k+1 of the
// sub-block, words 16+2k, 16+2k+1 values 4k+2, 4k+3, so that dwords k and 8+k
// of the VPDPWSSD sums add up to lane k of llama.cpp's 8-lane order (the four
// products of values 4k..4k+3 of each sub-block times its scale, the integer
// sum exact). Then the row kernel's float steps: per block the lanes as float
// times f16(x.d)·y.d fused into the 8 float lanes, the lanes summed as sum8.

const (
	iqPanelGroup = 16  // rows of a decoded group
	iqPanelBlock = 512 // bytes of one row's (or token's) decoded block
)

// iqPanelAVX512r4t4 emits the kernel of 4 rows by 4 tokens.
func iqPanelAVX512r4t4() {
	evex = true
	defer func() { evex = false }()
	const R, T = 4, 4
	TEXT("iqPanelAVX512r4t4", NOSPLIT, "func(w, a *int16, as int, dx, dy *float32, dys, nb int, out *float32, os int)")
	Pragma("noescape")
	Doc("iqPanelAVX512r4t4 sets out[t·os/4+i] to the dot product of the decoded rows i < 4",
		"at w+512·i (a group's panel: block b at +8192·b, scales dx+4·i+64·b) and the",
		"tokens t < 4 at a+512·t (block b at +as·b, scales dy+4·t+dys·b), nb blocks, in",
		"the lattice row kernels' 8-lane float order (AVX-512 VNNI).")
	w := Load(Param("w"), GP64())
	a := Load(Param("a"), GP64())
	as := Load(Param("as"), GP64())
	dx := Load(Param("dx"), GP64())
	dy := Load(Param("dy"), GP64())
	dys := Load(Param("dys"), GP64())
	n := Load(Param("nb"), GP64())

	// The float lanes of row i, tokens 2p and 2p+1 (8 each), in a local
	// (every vector register holds the integer products).
	facc := AllocLocal(R * T / 2 * 64)
	fmem := func(i, p int) Mem { return facc.Offset(64 * (i*T/2 + p)) }
	{
		z := ZMM()
		VPXORD(z, z, z)
		for i := 0; i < R; i++ {
			for p := 0; p < T/2; p++ {
				VMOVUPS(z, fmem(i, p))
			}
		}
	}

	Label("iqpanel_loop")
	acc := iqPanelBlockSums(w, a)
	// The block's float step: d = f16(x.d)·y.d per row and token, two tokens
	// per register.
	var dyv [T / 2]VecVirtual
	for p := range dyv {
		lo, hi := YMM(), YMM()
		VBROADCASTSS(Mem{Base: dy, Disp: 8 * p}, lo)
		VBROADCASTSS(Mem{Base: dy, Disp: 8*p + 4}, hi)
		dyv[p] = ZMM()
		VINSERTF64X4(U8(1), hi, lo.AsZ(), dyv[p])
	}
	for i := range acc {
		dxv := ZMM()
		VBROADCASTSS(Mem{Base: dx, Disp: 4 * i}, dxv)
		for p := range dyv {
			d := ZMM()
			VMULPS(dyv[p], dxv, d)
			lo, hi := ZMM(), ZMM()
			A, B := acc[i][2*p], acc[i][2*p+1]
			VSHUFI64X2(U8(0x44), B, A, lo) // A's dwords 0-7, B's 0-7
			VSHUFI64X2(U8(0xee), B, A, hi) // A's dwords 8-15, B's 8-15
			VPADDD(hi, lo, lo)
			VCVTDQ2PS(lo, lo)
			VFMADD213PS(fmem(i, p), d, lo) // lo = d·lo + acc, one rounding
			VMOVUPS(lo, fmem(i, p))
		}
	}
	ADDQ(U32(iqPanelGroup*iqPanelBlock), w)
	ADDQ(as, a)
	ADDQ(U8(4*iqPanelGroup), dx)
	ADDQ(dys, dy)
	DECQ(n)
	JNZ(LabelRef("iqpanel_loop"))

	// sum8 of each pair's lanes: ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)).
	out := Load(Param("out"), GP64())
	os := Load(Param("os"), GP64())
	for p := 0; p < T/2; p++ {
		for i := 0; i < R; i++ {
			v, s := ZMM(), ZMM()
			VMOVUPS(fmem(i, p), v)
			VSHUFF32X4(U8(0xb1), v, v, s)
			VADDPS(s, v, v)
			VPERMILPD(U8(0x55), v, s)
			VADDPS(s, v, v)
			VMOVSHDUP(v, s)
			VADDPS(s, v, v)
			VMOVSS(v.AsX(), Mem{Base: out, Disp: 4 * i})
			hi := XMM()
			VEXTRACTF32X4(U8(2), v, hi)
			VMOVSS(hi, Mem{Base: out, Index: os, Scale: 1, Disp: 4 * i})
		}
		if p+1 < T/2 {
			LEAQ(Mem{Base: out, Index: os, Scale: 2}, out)
		}
	}
	VZEROUPPER()
	RET()
}

// iqPanelPerm: the dwords of 8 grid entries (values 4m..4m+3 as
// words, two dwords per entry) in the panel's order: entry m's first dword to
// dword m, its second to dword 8+m.
var iqPanelPerm Mem

func iqPanelConstants() {
	var p []byte
	for o := 0; o < 16; o++ {
		src := 2 * o
		if o >= 8 {
			src = 2*(o-8) + 1
		}
		p = append(p, byte(src), 0, 0, 0)
	}
	iqPanelPerm = rodata("iqPanelPerm", p)
}

// decodeIQ3SPanelAVX512 emits the IQ3_S panel decoder: decodeIQ3SPanel's
// values, one sub-block of 32 a step.
func decodeIQ3SPanelAVX512() {
	evex = true
	defer func() { evex = false }()
	TEXT("decodeIQ3SPanelAVX512", NOSPLIT, "func(x *byte, nb int, w *int16, dx *float32, grid *byte)")
	Pragma("noescape")
	Doc("decodeIQ3SPanelAVX512 writes the nb IQ3_S blocks at x into a panel slot: block b's",
		"256 values (grid × sign × scale, in the panels' order) at w+8192·b, its f16",
		"scale as float32 at dx+64·b (AVX-512 BW).")
	x := GP64()
	Load(Param("x"), x)
	n := Load(Param("nb"), GP64())
	w := Load(Param("w"), GP64())
	dx := Load(Param("dx"), GP64())
	grid := GP64()
	Load(Param("grid"), grid)
	perm := ZMM()
	VMOVDQU32(iqPanelPerm, perm)
	zero := ZMM()
	VPXORD(zero, zero, zero)

	Label("iqpanel_dec")
	d16 := GP32()
	MOVWLZX(Mem{Base: x}, d16)
	d := XMM()
	VMOVD(d16, d)
	VCVTPH2PS(d, d)
	VMOVSS(d, Mem{Base: dx})
	for ib := 0; ib < 8; ib++ {
		qh := GP64()
		MOVBQZX(Mem{Base: x, Disp: 66 + ib}, qh)
		g := gather4x(grid, func(k int) GPVirtual {
			r, t := GP64(), GP64()
			MOVQ(qh, t)
			SHLQ(U8(8-k), t)
			ANDQ(U32(256), t)
			MOVBQZX(Mem{Base: x, Disp: 2 + 8*ib + k}, r)
			ORQ(t, r)
			return r
		})
		v := ZMM()
		VPMOVZXBW(g, v)
		ks := K()
		KMOVD(Mem{Base: x, Disp: 74 + 4*ib}, ks)
		VPSUBW(v, zero, ks, v) // negated where the sign bit is set
		s := GP64()
		MOVBQZX(Mem{Base: x, Disp: 106 + ib/2}, s)
		if ib%2 == 1 {
			SHRQ(U8(4), s)
		} else {
			ANDQ(U8(15), s)
		}
		LEAQ(Mem{Base: s, Index: s, Scale: 1, Disp: 1}, s)
		sc := XMM()
		VMOVD(s.As32(), sc)
		scv := ZMM()
		VPBROADCASTW(sc, scv)
		VPMULLW(scv, v, v)
		VPERMD(v, perm, v)
		VMOVDQU64(v, Mem{Base: w, Disp: 64 * ib})
	}
	ADDQ(U32(110), x)
	ADDQ(U32(iqPanelGroup*iqPanelBlock), w)
	ADDQ(U8(4*iqPanelGroup), dx)
	DECQ(n)
	JNZ(LabelRef("iqpanel_dec"))
	VZEROUPPER()
	RET()
}

// iqPanelTokIdx spreads 4 floats over 16 lanes, lane 4t+i taking float t.
var iqPanelTokIdx Mem

func iqPanelSumConstants() {
	var b []byte
	for l := 0; l < 16; l++ {
		b = append(b, byte(l/4), 0, 0, 0)
	}
	iqPanelTokIdx = rodata("iqPanelTokIdx", b)
}

// iqPanelSumAVX512r4t4 emits the panel kernel of the lattice types whose row
// kernels take one float step per block (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS):
// iqPanelAVX512r4t4's integer products, each row and token's 16 dword sums
// added up to the block's integer sum (a reduction tree over the 16 pairs,
// leaving pair (i, t) in lane 4t+i), then per block
// sum += ((f16(x.d)·y.d)·float(bsum))·factor, 16 pairs a register.
//
// With factorFirst (IQ1_M, iqPanelSumFAVX512r4t4) the step is
// sum += (f16(x.d)·y.d)·(float(bsum)·factor), dotIQ1MBlock's order.
func iqPanelSumAVX512r4t4(name string, factorFirst bool) {
	evex = true
	defer func() { evex = false }()
	const R, T = 4, 4
	TEXT(name, NOSPLIT, "func(w, a *int16, as int, dx, dy *float32, dys, nb int, factor float32, out *float32)")
	Pragma("noescape")
	step := "((f16(x.d)·y.d)·float(block's integer sum))·factor"
	if factorFirst {
		step = "(f16(x.d)·y.d)·(float(block's integer sum)·factor)"
	}
	Doc(name+" sets out[4·t+i] to the dot product of the decoded rows i < 4",
		"and tokens t < 4 (iqPanelAVX512r4t4's layout) in the order of one float step per",
		"block: sum += "+step+" (AVX-512 VNNI).")
	w := Load(Param("w"), GP64())
	a := Load(Param("a"), GP64())
	as := Load(Param("as"), GP64())
	dx := Load(Param("dx"), GP64())
	dy := Load(Param("dy"), GP64())
	dys := Load(Param("dys"), GP64())
	n := Load(Param("nb"), GP64())
	fx := XMM()
	Load(Param("factor"), fx)
	factor, tokIdx, facc := ZMM(), ZMM(), ZMM()
	VBROADCASTSS(fx, factor)
	VMOVDQU32(iqPanelTokIdx, tokIdx)
	VPXORD(facc, facc, facc)

	Label(name + "_loop")
	acc := iqPanelBlockSums(w, a)
	sums := iqPanelLaneSums(acc)
	VCVTDQ2PS(sums, sums)
	dxv, dy4, dyv := ZMM(), XMM(), ZMM()
	VBROADCASTF32X4(Mem{Base: dx}, dxv)
	VMOVUPS(Mem{Base: dy}, dy4)
	VPERMPS(dy4.AsZ(), tokIdx, dyv)
	VMULPS(dyv, dxv, dxv) // f16(x.d)·y.d
	if factorFirst {
		VMULPS(factor, sums, sums)
		VMULPS(sums, dxv, dxv)
	} else {
		VMULPS(sums, dxv, dxv)
		VMULPS(factor, dxv, dxv)
	}
	VADDPS(dxv, facc, facc)
	ADDQ(U32(iqPanelGroup*iqPanelBlock), w)
	ADDQ(as, a)
	ADDQ(U8(4*iqPanelGroup), dx)
	ADDQ(dys, dy)
	DECQ(n)
	JNZ(LabelRef(name + "_loop"))
	out := Load(Param("out"), GP64())
	VMOVUPS(facc, Mem{Base: out})
	VZEROUPPER()
	RET()
}

// decodePanelAVX512 emits decode<typ>PanelAVX512, the panel decoder of a type
// of one float step per block from its eight-token kernel's group decoder
// (latticeAVX512x8): the 32 grid bytes widened to words, negated under the
// sign mask, times the scale of their pair (sc's word m scales values 2m and
// 2m+1), in the panels' order.
func decodePanelAVX512(typ string, size int, group latticeGroup512) {
	evex = true
	defer func() { evex = false }()
	name := "decode" + typ + "PanelAVX512"
	TEXT(name, NOSPLIT, "func(x *byte, nb int, w *int16, dx *float32, grid *byte)")
	Pragma("noescape")
	Doc(name + " is decodeIQ3SPanelAVX512 for " + typ + ".")
	x := GP64()
	Load(Param("x"), x)
	n := Load(Param("nb"), GP64())
	w := Load(Param("w"), GP64())
	dx := Load(Param("dx"), GP64())
	grid := GP64()
	Load(Param("grid"), grid)
	perm := ZMM()
	VMOVDQU32(iqPanelPerm, perm)
	zero := ZMM()
	VPXORD(zero, zero, zero)

	Label("decode_" + typ)
	d16 := GP32()
	MOVWLZX(Mem{Base: x}, d16)
	d := XMM()
	VMOVD(d16, d)
	VCVTPH2PS(d, d)
	VMOVSS(d, Mem{Base: dx})
	for ib := 0; ib < 8; ib++ {
		g, k, sc := group(x, grid, ib)
		v := ZMM()
		VPMOVZXBW(g, v)
		VPSUBW(v, zero, k, v) // negated where the sign bit is set
		s, t := ZMM(), ZMM()
		VPMOVZXWD(sc, s)
		VPSLLD(U8(16), s, t)
		VPORD(t, s, s) // dword m: sc's word m twice
		VPMULLW(s, v, v)
		VPERMD(v, perm, v)
		VMOVDQU64(v, Mem{Base: w, Disp: 64 * ib})
	}
	ADDQ(U32(size), x)
	ADDQ(U32(iqPanelGroup*iqPanelBlock), w)
	ADDQ(U8(4*iqPanelGroup), dx)
	DECQ(n)
	JNZ(LabelRef("decode_" + typ))
	VZEROUPPER()
	RET()
}

// iqPanelBlockSums emits one block's integer products of the panel kernels: rows
// i < 4 at w + iqPanelBlock·i and tokens t < 4 at a + iqPanelBlock·t, 512 int16
// each, by VPMADDWD then VPDPWSSD; acc[i][t] holds their 16 int32 lane sums.
func iqPanelBlockSums(w, a Register) (acc [4][4]VecVirtual) {
	for ib := 0; ib < 8; ib++ {
		var wv [4]VecVirtual
		var av [4]VecVirtual
		for i := range wv {
			wv[i] = ZMM()
			VMOVDQU64(Mem{Base: w, Disp: iqPanelBlock*i + 64*ib}, wv[i])
		}
		for t := range av {
			av[t] = ZMM()
			VMOVDQU64(Mem{Base: a, Disp: iqPanelBlock*t + 64*ib}, av[t])
		}
		for i := range acc {
			for t := range acc[i] {
				if ib == 0 {
					acc[i][t] = ZMM()
					VPMADDWD(av[t], wv[i], acc[i][t])
				} else {
					raw("VPDPWSSD", av[t], wv[i], acc[i][t])
				}
			}
		}
	}
	return acc
}

// iqPanelLaneSums adds up each of the 16 row-token accumulators acc[i][t]
// (16 dwords each) into lane 4t+i of the result: a reduction tree over the 16
// pairs.
func iqPanelLaneSums(acc [4][4]VecVirtual) VecVirtual {
	const R = 4
	// u[i]: 128-bit lane t holds 4 partial sums of row i, token t.
	var u [R]VecVirtual
	for i := range acc {
		var s [2]VecVirtual
		for p := range s {
			lo, hi := ZMM(), ZMM()
			VSHUFI64X2(U8(0x44), acc[i][2*p+1], acc[i][2*p], lo)
			VSHUFI64X2(U8(0xee), acc[i][2*p+1], acc[i][2*p], hi)
			VPADDD(hi, lo, lo)
			s[p] = lo
		}
		lo, hi := ZMM(), ZMM()
		VSHUFI64X2(U8(0x88), s[1], s[0], lo)
		VSHUFI64X2(U8(0xdd), s[1], s[0], hi)
		VPADDD(hi, lo, lo)
		u[i] = lo
	}
	// v[h]: lane t holds rows 2h, 2h+1's two partial sums each.
	var v [2]VecVirtual
	for h := range v {
		lo, hi := ZMM(), ZMM()
		VPUNPCKLQDQ(u[2*h+1], u[2*h], lo)
		VPUNPCKHQDQ(u[2*h+1], u[2*h], hi)
		VPADDD(hi, lo, lo)
		v[h] = lo
	}
	sums, hi := ZMM(), ZMM()
	VSHUFPS(U8(0x88), v[1], v[0], sums)
	VSHUFPS(U8(0xdd), v[1], v[0], hi)
	VPADDD(hi, sums, sums) // lane 4t+i: row i, token t
	return sums
}
