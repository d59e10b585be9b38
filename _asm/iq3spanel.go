package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// IQ3_S byte panels (engine/kernels/iq3spanel.go): a row's block is 256
// signed bytes grid × sign (|v| ≤ 15) in four chunks of 64, chunk c holding
// sub-blocks 2c and 2c+1 with their dwords interleaved (dword 2m: values
// 4m..4m+3 of sub-block 2c, dword 2m+1: of sub-block 2c+1), then 16 dwords of
// minus the bias 128·Σ (the corr), then per half h 8 scale words
// (sc_4h, sc_4h+1, sc_4h, sc_4h+1, sc_4h+2, sc_4h+3, sc_4h+2, sc_4h+3) four
// times (64 bytes). The
// tokens' quants are bytes q+128 in the same order. VPDPBUSD sums four
// products a dword (|sum| ≤ 15300, an int16); VPACKSSDW packs two chunks'
// sums to words so that each dword pair is one lane of two sub-blocks, and
// VPDPWSSD multiplies them by their scales into the lane's accumulator:
// 6 multiply instructions a block and row-token pair against the int16
// panels' 8.

const (
	iq3sBPSlot  = 448 // bytes of one row's block in the panel
	iq3sBPCorr  = 256 // offset of the corr dwords
	iq3sBPScale = 320 // offset of the scale words
)

// iq3sBPPerm interleaves the dwords of two sub-blocks: dword 2m from m,
// 2m+1 from 8+m.
var iq3sBPPerm Mem

func iq3sBytePanelConstants() {
	var p []byte
	for q := 0; q < 16; q++ {
		src := q / 2
		if q%2 == 1 {
			src += 8
		}
		p = append(p, byte(src), 0, 0, 0)
	}
	iq3sBPPerm = rodata("iq3sBPPerm", p)
}

// decodeIQ3SBytesAVX512 emits the IQ3_S byte-panel decoder (decodeIQ3SBytePanel).
func decodeIQ3SBytesAVX512() {
	evex = true
	defer func() { evex = false }()
	TEXT("decodeIQ3SBytesAVX512", NOSPLIT, "func(x *byte, nb int, w *byte, dx *float32, grid *byte)")
	Pragma("noescape")
	Doc("decodeIQ3SBytesAVX512 writes the nb IQ3_S blocks at x into a byte-panel slot: block b",
		"at w+16·448·b (signed values, corr, scales), its f16 scale at dx+64·b (AVX-512 VNNI).")
	x := Load(Param("x"), GP64())
	n := Load(Param("nb"), GP64())
	w := Load(Param("w"), GP64())
	dx := Load(Param("dx"), GP64())
	grid := GP64()
	Load(Param("grid"), grid)
	perm, zero, c128 := ZMM(), ZMM(), ZMM()
	VMOVDQU32(iq3sBPPerm, perm)
	VPXORD(zero, zero, zero)
	{
		g := GP32()
		MOVL(U32(0x80808080), g)
		VPBROADCASTD(g, c128)
	}

	Label("iq3sbp_dec")
	d16 := GP32()
	MOVWLZX(Mem{Base: x}, d16)
	d := XMM()
	VMOVD(d16, d)
	VCVTPH2PS(d, d)
	VMOVSS(d, Mem{Base: dx})
	cacc := ZMM()
	VPXORD(cacc, cacc, cacc)
	for h := 0; h < 2; h++ {
		// The half's scale words: dword (sc_A | sc_B<<16) twice, then (sc_C | sc_D<<16) twice.
		var sd [2]VecVirtual
		for e := 0; e < 2; e++ {
			lo, hi := GP32(), GP32()
			MOVBLZX(Mem{Base: x, Disp: 106 + 2*h + e}, lo)
			MOVL(lo, hi)
			SHRL(U8(4), hi)
			ANDL(U32(15), lo)
			LEAL(Mem{Base: lo, Index: lo, Scale: 1, Disp: 1}, lo)
			LEAL(Mem{Base: hi, Index: hi, Scale: 1, Disp: 1}, hi)
			SHLL(U8(16), hi)
			ORL(hi, lo)
			sd[e] = XMM()
			VMOVD(lo, sd[e])
			VPBROADCASTD(sd[e], sd[e])
		}
		sx := XMM()
		VPUNPCKLQDQ(sd[1], sd[0], sx)
		s := ZMM()
		VSHUFI32X4(U8(0), sx.AsZ(), sx.AsZ(), s)
		VMOVDQU64(s, Mem{Base: w, Disp: iq3sBPScale + 64*h})
		var dd [2]VecVirtual
		for j := 0; j < 2; j++ {
			c := 2*h + j
			var g [2]VecVirtual
			for e := 0; e < 2; e++ {
				ib := 2*c + e
				qh := GP64()
				MOVBQZX(Mem{Base: x, Disp: 66 + ib}, qh)
				g[e] = gather4x(grid, func(k int) GPVirtual {
					r, t := GP64(), GP64()
					MOVQ(qh, t)
					SHLQ(U8(8-k), t)
					ANDQ(U32(256), t)
					MOVBQZX(Mem{Base: x, Disp: 2 + 8*ib + k}, r)
					ORQ(t, r)
					return r
				})
			}
			v := ZMM()
			VINSERTI64X4(U8(1), g[1], g[0].AsZ(), v)
			ks := K()
			KMOVQ(Mem{Base: x, Disp: 74 + 8*c}, ks)
			VPSUBB(v, zero, ks, v) // negated where the sign bit is set
			VPERMD(v, perm, v)
			VMOVDQU64(v, Mem{Base: w, Disp: 64 * c})
			dd[j] = ZMM()
			VPXORD(dd[j], dd[j], dd[j])
			raw("VPDPBUSD", v, c128, dd[j])
		}
		p := ZMM()
		VPACKSSDW(dd[1], dd[0], p)
		raw("VPDPWSSD", s, p, cacc)
	}
	VPSUBD(cacc, zero, cacc)
	VMOVDQU64(cacc, Mem{Base: w, Disp: iq3sBPCorr})
	ADDQ(U32(110), x)
	ADDQ(U32(iqPanelGroup*iq3sBPSlot), w)
	ADDQ(U8(4*iqPanelGroup), dx)
	DECQ(n)
	JNZ(LabelRef("iq3sbp_dec"))
	VZEROUPPER()
	RET()
}

// iq3sBytePanelAVX512r4t4 emits the IQ3_S byte-panel kernel of 4 rows by 4
// tokens, iqPanelAVX512r4t4's float steps and outputs.
func iq3sBytePanelAVX512r4t4() {
	evex = true
	defer func() { evex = false }()
	const R, T = 4, 4
	TEXT("iq3sBytePanelAVX512r4t4", NOSPLIT, "func(w, a *byte, as int, dx, dy *float32, dys, nb int, out *float32, os int)")
	Pragma("noescape")
	Doc("iq3sBytePanelAVX512r4t4 sets out[t·os/4+i] to dotIQ3SRowGeneric of the byte-panel rows",
		"i < 4 at w+448·i (block b at +16·448·b, scales dx+4·i+64·b) and the tokens t < 4 at",
		"a+256·t (block b at +as·b, scales dy+4·t+dys·b), nb blocks (AVX-512 VNNI).")
	w := Load(Param("w"), GP64())
	a := Load(Param("a"), GP64())
	as := Load(Param("as"), GP64())
	dx := Load(Param("dx"), GP64())
	dy := Load(Param("dy"), GP64())
	dys := Load(Param("dys"), GP64())
	n := Load(Param("nb"), GP64())

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

	d0, d1 := ZMM(), ZMM() // the chunks' sums (one pair: avo's liveness takes VPXORD as a read)
	Label("iq3sbp_loop")
	var acc [R][T]VecVirtual
	for i := 0; i < R; i++ {
		c := ZMM()
		VMOVDQU64(Mem{Base: w, Disp: iq3sBPSlot*i + iq3sBPCorr}, c)
		for t := 0; t < T; t++ {
			acc[i][t] = ZMM()
			VMOVDQA64(c, acc[i][t])
		}
	}
	for h := 0; h < 2; h++ {
		var av [T][2]VecVirtual
		for t := range av {
			for j := range av[t] {
				av[t][j] = ZMM()
				VMOVDQU64(Mem{Base: a, Disp: 256*t + 128*h + 64*j}, av[t][j])
			}
		}
		for i := 0; i < R; i++ {
			var wv [2]VecVirtual
			for j := range wv {
				wv[j] = ZMM()
				VMOVDQU64(Mem{Base: w, Disp: iq3sBPSlot*i + 128*h + 64*j}, wv[j])
			}
			s := ZMM()
			VMOVDQU64(Mem{Base: w, Disp: iq3sBPSlot*i + iq3sBPScale + 64*h}, s)
			for t := 0; t < T; t++ {
				VPXORD(d0, d0, d0)
				raw("VPDPBUSD", wv[0], av[t][0], d0)
				VPXORD(d1, d1, d1)
				raw("VPDPBUSD", wv[1], av[t][1], d1)
				VPACKSSDW(d1, d0, d0)
				raw("VPDPWSSD", s, d0, acc[i][t])
			}
		}
	}
	// The float step: lane 2L+e of a token is dwords 4L+e and 4L+2+e of its
	// accumulator; tokens 2p and 2p+1 share a register, lane L of it holding
	// the first's lanes 2L, 2L+1 then the second's.
	var dyv [T / 2]VecVirtual
	for p := range dyv {
		q := ZMM()
		VBROADCASTSD(Mem{Base: dy, Disp: 8 * p}, q)
		dyv[p] = ZMM()
		VPERMILPS(U8(0x50), q, dyv[p])
	}
	for i := 0; i < R; i++ {
		dxv := ZMM()
		VBROADCASTSS(Mem{Base: dx, Disp: 4 * i}, dxv)
		for p := range dyv {
			d := ZMM()
			VMULPS(dyv[p], dxv, d)
			A, B := acc[i][2*p], acc[i][2*p+1]
			z, y := ZMM(), ZMM()
			VSHUFPS(U8(0x44), B, A, z) // A's dwords 4L, 4L+1, B's 4L, 4L+1
			VSHUFPS(U8(0xee), B, A, y) // A's dwords 4L+2, 4L+3, B's 4L+2, 4L+3
			VPADDD(y, z, z)
			VCVTDQ2PS(z, z)
			VFMADD213PS(fmem(i, p), d, z) // z = d·z + acc, one rounding
			VMOVUPS(z, fmem(i, p))
		}
	}
	ADDQ(U32(iqPanelGroup*iq3sBPSlot), w)
	ADDQ(as, a)
	ADDQ(U8(4*iqPanelGroup), dx)
	ADDQ(dys, dy)
	DECQ(n)
	JNZ(LabelRef("iq3sbp_loop"))

	// sum8 of each token's lanes: lane k = 2L+e at dword 4L+e (the second
	// token's at 4L+2+e): ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)).
	out := Load(Param("out"), GP64())
	os := Load(Param("os"), GP64())
	for p := 0; p < T/2; p++ {
		for i := 0; i < R; i++ {
			v, s := ZMM(), ZMM()
			VMOVUPS(fmem(i, p), v)
			VSHUFF32X4(U8(0x4e), v, v, s)
			VADDPS(s, v, v)
			VSHUFF32X4(U8(0xb1), v, v, s)
			VADDPS(s, v, v)
			VMOVSHDUP(v, s)
			VADDPS(s, v, v)
			VMOVSS(v.AsX(), Mem{Base: out, Disp: 4 * i})
			VEXTRACTPS(U8(2), v.AsX(), Mem{Base: out, Index: os, Scale: 1, Disp: 4 * i})
		}
		if p+1 < T/2 {
			LEAQ(Mem{Base: out, Index: os, Scale: 2}, out)
		}
	}
	VZEROUPPER()
	RET()
}
