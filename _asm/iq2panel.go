package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The IQ2 family's byte panels for prompts (engine/kernels/iq2panel.go): a
// group of 16 weight rows is decoded once into signed bytes (grid × sign,
// |v| ≤ 43) with their 16 scales (one per 16 values) as dwords beside them,
// and the tokens' Q8_K quants are stored as unsigned bytes q+128 in the same
// order, so that one VPDPBUSD multiplies 64 values of a row by a token. A
// block's 256 values are 4 chunks of 64 bytes; dword j of chunk c holds
// values 16j+4c … 16j+4c+3, so dword j of a row-token accumulator is the sum
// over the 16 values of scale j. Times the scales (VPMULLD), the dwords add
// up to Σ ls·(q+128)·v; the row's correction −128·Σ ls·v (decoded with the
// row) leaves the block's integer sum of dotIQ2XXSBlock (…), exactly.

const (
	iq2PanelBlock = 320 // bytes of one row's decoded block: 256 values, 16 scale dwords
	iq2PanelScale = 256 // offset of the scales in it
)

// iq2PanelIdx: VPERMI2D's indices of the decoder's transpose (chunks 0, 1
// and chunks 2, 3 of two sub-block pairs).
var iq2PanelIdx [2]Mem

func iq2PanelConstants() {
	for h := range iq2PanelIdx {
		var b []byte
		for c := 2 * h; c < 2*h+2; c++ {
			for z := 0; z < 2; z++ {
				for m := 0; m < 4; m++ {
					b = append(b, byte(16*z+4*m+c), 0, 0, 0)
				}
			}
		}
		iq2PanelIdx[h] = rodata([]string{"iq2PanelIdxA", "iq2PanelIdxB"}[h], b)
	}
}

// decodeIQ2BytesAVX512 emits decode<typ>BytesAVX512, the byte-panel decoder of
// an IQ2 type from its eight-token kernel's group decoder (the 32 grid bytes
// of sub-block ib and their sign mask): the signed values in the panel's
// order, the scales 2s+1 of the 16 groups of 16 values as dwords, f16(d) as
// float32 at dx, and the correction −128·Σ ls·v at corr.
func decodeIQ2BytesAVX512(typ string, size int, group latticeGroup512) {
	evex = true
	defer func() { evex = false }()
	name := "decode" + typ + "BytesAVX512"
	TEXT(name, NOSPLIT, "func(x *byte, nb int, w *byte, dx *float32, corr *int32, grid *byte)")
	Pragma("noescape")
	Doc(name+" writes the nb "+typ+" blocks at x into a byte-panel slot: block b's",
		"256 signed values and 16 scale dwords at w+5120·b, f16(d) as float32 at",
		"dx+64·b and the correction −128·Σ scale·value at corr+64·b (AVX-512 VNNI).")
	x, grid := GP64(), GP64()
	Load(Param("x"), x)
	n := Load(Param("nb"), GP64())
	w := Load(Param("w"), GP64())
	dx := Load(Param("dx"), GP64())
	corr := Load(Param("corr"), GP64())
	Load(Param("grid"), grid)
	zero, onesB, onesD, low4 := ZMM(), ZMM(), ZMM(), XMM()
	VPXORD(zero, zero, zero)
	{
		g := GP32()
		MOVL(U32(0x01010101), g)
		VPBROADCASTD(g, onesB)
		MOVL(U32(1), g)
		VPBROADCASTD(g, onesD)
		MOVL(U32(0x0f0f0f0f), g)
		VPBROADCASTD(g, low4)
	}

	Label("decode_" + typ + "B")
	d16 := GP32()
	MOVWLZX(Mem{Base: x}, d16)
	d := XMM()
	VMOVD(d16, d)
	VCVTPH2PS(d, d)
	VMOVSS(d, Mem{Base: dx})
	sc := iq2GroupScales(typ, x, low4)
	VPSLLD(U8(1), sc, sc)
	VPORD(onesD, sc, sc)
	VMOVDQU64(sc, Mem{Base: w, Disp: iq2PanelScale})
	sum := ZMM()
	VPXORD(sum, sum, sum)
	for c, o := range iq2Chunks(x, grid, group, zero) {
		VMOVDQU64(o, Mem{Base: w, Disp: 64 * c})
		raw("VPDPBUSD", o, onesB, sum) // dword j: Σ v of group j
	}
	// corr = −128·Σ_j scale_j·Σ v of group j.
	VPMULLD(sc, sum, sum)
	lo := YMM()
	VEXTRACTI64X4(U8(1), sum, lo)
	VPADDD(lo, sum.AsY(), lo)
	s := XMM()
	VEXTRACTI32X4(U8(1), lo, s)
	VPADDD(s, lo.AsX(), s)
	t := XMM()
	VPSHUFD(U8(0x4e), s, t)
	VPADDD(t, s, s)
	VPSHUFD(U8(0xb1), s, t)
	VPADDD(t, s, s)
	VPSLLD(U8(7), s, s)
	VPSUBD(s, zero.AsX(), s)
	VMOVD(s, Mem{Base: corr})

	ADDQ(U32(size), x)
	ADDQ(U32(iqPanelGroup*iq2PanelBlock), w)
	ADDQ(U8(4*iqPanelGroup), dx)
	ADDQ(U8(4*iqPanelGroup), corr)
	DECQ(n)
	JNZ(LabelRef("decode_" + typ + "B"))
	VZEROUPPER()
	RET()
}

// iq2PanelAVX512r4t4 emits the IQ2 byte-panel kernel: 4 decoded rows by 4
// tokens' bytes q+128, one VPDPBUSD per 64 values of a row and token, each
// accumulator's dwords times the row's scales (VPMULLD), added up
// (iqPanelLaneSums) with the rows' corrections to the blocks' integer sums,
// then per block, as the row kernels, sum += ((f16(x.d)·y.d)·float(isum))·factor,
// 16 pairs a register.
func iq2PanelAVX512r4t4() {
	evex = true
	defer func() { evex = false }()
	const name = "iq2PanelAVX512r4t4"
	TEXT(name, NOSPLIT, "func(w, a *byte, as int, dx *float32, corr *int32, dy *float32, dys, nb int, factor float32, out *float32, os int)")
	Pragma("noescape")
	Doc(name+" sets out[t·os/4+i] to the dot product of the byte-panel rows i < 4",
		"at w+320·i (block b at +5120·b, scale dx[16·b+i], correction corr[16·b+i])",
		"and the token bytes t < 4 at a+256·t (block b at +as·b, scale dy+4·t+dys·b),",
		"nb blocks, in the IQ2 row kernels' order (AVX-512 VNNI).")
	w := Load(Param("w"), GP64())
	a := Load(Param("a"), GP64())
	as := Load(Param("as"), GP64())
	dx := Load(Param("dx"), GP64())
	corr := Load(Param("corr"), GP64())
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
	var acc [4][4]VecVirtual
	for i := range acc {
		for t := range acc[i] {
			acc[i][t] = ZMM()
			VPXORD(acc[i][t], acc[i][t], acc[i][t])
		}
	}
	for c := 0; c < 4; c++ {
		var wv, av [4]VecVirtual
		for i := range wv {
			wv[i] = ZMM()
			VMOVDQU64(Mem{Base: w, Disp: iq2PanelBlock*i + 64*c}, wv[i])
		}
		for t := range av {
			av[t] = ZMM()
			VMOVDQU64(Mem{Base: a, Disp: qkKBytes*t + 64*c}, av[t])
		}
		for i := range acc {
			for t := range acc[i] {
				raw("VPDPBUSD", wv[i], av[t], acc[i][t]) // unsigned token bytes, signed values
			}
		}
	}
	for i := range acc {
		sc := ZMM()
		VMOVDQU64(Mem{Base: w, Disp: iq2PanelBlock*i + iq2PanelScale}, sc)
		for t := range acc[i] {
			VPMULLD(sc, acc[i][t], acc[i][t])
		}
	}
	sums := iqPanelLaneSums(acc)
	cv := ZMM()
	VBROADCASTI32X4(Mem{Base: corr}, cv)
	VPADDD(cv, sums, sums)
	VCVTDQ2PS(sums, sums)
	dxv, dy4, dyv := ZMM(), XMM(), ZMM()
	VBROADCASTF32X4(Mem{Base: dx}, dxv)
	VMOVUPS(Mem{Base: dy}, dy4)
	VPERMPS(dy4.AsZ(), tokIdx, dyv)
	VMULPS(dyv, dxv, dxv) // f16(x.d)·y.d
	VMULPS(sums, dxv, dxv)
	VMULPS(factor, dxv, dxv)
	VADDPS(dxv, facc, facc)
	ADDQ(U32(iqPanelGroup*iq2PanelBlock), w)
	ADDQ(as, a)
	ADDQ(U8(4*iqPanelGroup), dx)
	ADDQ(U8(4*iqPanelGroup), corr)
	ADDQ(dys, dy)
	DECQ(n)
	JNZ(LabelRef(name + "_loop"))
	out := Load(Param("out"), GP64())
	os := Load(Param("os"), GP64())
	VMOVUPS(facc.AsX(), Mem{Base: out})
	VEXTRACTF32X4(U8(1), facc, Mem{Base: out, Index: os, Scale: 1})
	VEXTRACTF32X4(U8(2), facc, Mem{Base: out, Index: os, Scale: 2})
	LEAQ(Mem{Base: os, Index: os, Scale: 2}, os)
	VEXTRACTF32X4(U8(3), facc, Mem{Base: out, Index: os, Scale: 1})
	VZEROUPPER()
	RET()
}

const qkKBytes = 256 // bytes of one token's block in the byte panels

// iq2PanelKernels emits the IQ2 byte panels' decoders and kernel.
func iq2PanelKernels() {
	iq2PanelConstants()
	iq2OuterKernels()
	iq2PanelAVX512r4t4()
	for _, g := range latticeGroups512 {
		if g.typ == "IQ2XXS" || g.typ == "IQ2XS" || g.typ == "IQ2S" {
			decodeIQ2BytesAVX512(g.typ, g.size, g.group)
		}
	}
}

// iq2GroupScales returns the scale nibbles s of the 16 groups of 16 values of
// the block at x, as dwords.
func iq2GroupScales(typ string, x GPVirtual, low4 VecVirtual) VecVirtual {
	sc := ZMM()
	switch typ {
	case "IQ2XXS":
		// s is the top nibble of qword ib of the 64 bytes after d.
		VMOVDQU64(Mem{Base: x, Disp: 2}, sc)
		VPSRLQ(U8(60), sc, sc)
		VPSHUFD(U8(0xa0), sc, sc)
	default:
		// The low and high nibbles of the 8 scale bytes.
		off := map[string]int{"IQ2XS": 66, "IQ2S": 74}[typ]
		b, hi := XMM(), XMM()
		VMOVQ(Mem{Base: x, Disp: off}, b)
		VPSRLW(U8(4), b, hi)
		VPANDD(low4, hi, hi)
		VPANDD(low4, b, b)
		VPUNPCKLBW(hi, b, b)
		VPMOVZXBD(b, sc)
	}
	return sc
}

// iq2Chunks returns the signed values of the block at x in the byte panels'
// order: chunk c's dword j holds values 16j+4c … 16j+4c+3. The sub-blocks'
// 32 values (group's grid bytes negated under its sign mask) go in pairs into
// zmm, then chunk c is dwords c and 4+c of every sub-block (VPERMI2D, VSHUFI64X2).
func iq2Chunks(x, grid GPVirtual, group latticeGroup512, zero VecVirtual) (out [4]VecVirtual) {
	var z [4]VecVirtual
	for m := range z {
		var h [2]VecVirtual
		for k := range h {
			g, sk, _ := group(x, grid, 2*m+k)
			VPSUBB(g, zero.AsY(), sk, g) // negated where the sign bit is set
			h[k] = g
		}
		z[m] = ZMM()
		VINSERTI64X4(U8(1), h[1], h[0].AsZ(), z[m])
	}
	for hf := 0; hf < 2; hf++ {
		var p [2]VecVirtual
		for q := range p {
			p[q] = ZMM()
			VMOVDQU32(iq2PanelIdx[hf], p[q])
			VPERMI2D(z[2*q+1], z[2*q], p[q])
		}
		for k := 0; k < 2; k++ {
			out[2*hf+k] = ZMM()
			VSHUFI64X2(U8([]int{0x44, 0xee}[k]), p[1], p[0], out[2*hf+k])
		}
	}
	return out
}
