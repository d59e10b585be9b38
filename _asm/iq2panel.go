package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The IQ2 family's prompt panels (engine/kernels/iq2panel.go): a group
// of 16 weight rows is decoded once into unsigned bytes u = v+43 (v = grid ×
// sign) with the 16 rows in the lanes: record (b, j) of 320 bytes holds group
// j (values 16j … 16j+15) of block b, chunk c (values 16j+4c … +3) as 16
// rows' dwords at 64c, then the 16 rows' scales 2s+1 of the group as dwords.
// A token's Q8_K quants are taken as they are, four at a time broadcast
// (VPDPBUSD's signed operand), each group sum started at −43·bsum of the
// group (kept with the quants), so that it is Σ v·q of the group exactly;
// times the rows' scales (VPMULLD) and added up over the block's 16 groups it
// is the block's integer sum of dotIQ2XXSBlock (…). Then the row kernels'
// float step, 16 rows a register: no lane reduction.

const (
	iq2OuterRec  = 320 // bytes of a (block, group) record of 16 rows
	iq2OuterTok  = 320 // bytes of a token's block: 256 quants, 16 dwords −43·bsum
	iq2OuterBias = 43
)

// decodeIQ2OuterAVX512 emits decode<typ>OuterAVX512: a block's signed values
// (iq2Chunks), plus 43, scattered into row slot i of the records (each
// chunk's 16 group dwords to 16 records), the group scales likewise, and
// f16(d) as float32 at dx.
func decodeIQ2OuterAVX512(typ string, size int, group latticeGroup512) {
	evex = true
	defer func() { evex = false }()
	name := "decode" + typ + "OuterAVX512"
	TEXT(name, NOSPLIT, "func(x *byte, nb int, w *byte, dx *float32, grid *byte)")
	Pragma("noescape")
	Doc(name+" writes the nb "+typ+" blocks at x into row slot w (a group's",
		"panel + 4·i): value 16j+4c+k of block b, plus 43, at w + 5120·b + 320·j + 64·c + k,",
		"the scale of group j at w + 5120·b + 320·j + 256, f16(d) at dx+64·b (AVX-512).")
	x, grid := GP64(), GP64()
	Load(Param("x"), x)
	n := Load(Param("nb"), GP64())
	w := Load(Param("w"), GP64())
	dx := Load(Param("dx"), GP64())
	Load(Param("grid"), grid)
	zero, bias, onesD, low4, idx := ZMM(), ZMM(), ZMM(), XMM(), ZMM()
	VPXORD(zero, zero, zero)
	{
		g := GP32()
		MOVL(U32(0x01010101*iq2OuterBias), g)
		VPBROADCASTD(g, bias)
		MOVL(U32(1), g)
		VPBROADCASTD(g, onesD)
		MOVL(U32(0x0f0f0f0f), g)
		VPBROADCASTD(g, low4)
	}
	VMOVDQU32(iq2OuterIdx, idx)

	Label("decode_" + typ + "O")
	d16 := GP32()
	MOVWLZX(Mem{Base: x}, d16)
	d := XMM()
	VMOVD(d16, d)
	VCVTPH2PS(d, d)
	VMOVSS(d, Mem{Base: dx})
	sc := iq2GroupScales(typ, x, low4)
	VPSLLD(U8(1), sc, sc)
	VPORD(onesD, sc, sc)
	scatter := func(v VecVirtual, disp int) {
		k := K()
		KXNORW(k, k, k)
		VPSCATTERDD(v, k, Mem{Base: w, Index: idx, Scale: 1, Disp: disp})
	}
	scatter(sc, 256)
	for c, o := range iq2Chunks(x, grid, group, zero) {
		VPADDB(bias, o, o)
		scatter(o, 64*c)
	}
	ADDQ(U32(size), x)
	ADDQ(U32(iqPanelGroup*iq2OuterRec), w)
	ADDQ(U8(4*iqPanelGroup), dx)
	DECQ(n)
	JNZ(LabelRef("decode_" + typ + "O"))
	VZEROUPPER()
	RET()
}

// iq2OuterIdx: record j's offset, 320·j, for j < 16.
var iq2OuterIdx Mem

func iq2OuterConstants() {
	var b []byte
	for j := 0; j < 16; j++ {
		v := iq2OuterRec * j
		b = append(b, byte(v), byte(v>>8), 0, 0)
	}
	iq2OuterIdx = rodata("iq2OuterIdx", b)
}

// iq2OuterAVX512 emits iq2OuterAVX512r16t<T>: 16 rows by T tokens.
func iq2OuterAVX512(T int) {
	evex = true
	defer func() { evex = false }()
	name := fmt.Sprintf("iq2OuterAVX512r16t%d", T)
	TEXT(name, NOSPLIT, "func(w, a *byte, as int, dx, dy *float32, dys, nb int, factor float32, out *float32, os int, mask uint16)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets out[t·os/4+i] (rows i in mask) to the dot product of the", name),
		"outer-product panel rows i < 16 at w (block b at +5120·b, scales dx+64·b) and the",
		fmt.Sprintf("token records t < %d at a+320·t (block b at +as·b, scale dy+4·t+dys·b), nb blocks,", T),
		"in the IQ2 row kernels' order (AVX-512 VNNI).")
	w := Load(Param("w"), GP64())
	a := Load(Param("a"), GP64())
	as := Load(Param("as"), GP64())
	dx := Load(Param("dx"), GP64())
	dy := Load(Param("dy"), GP64())
	dys := Load(Param("dys"), GP64())
	n := Load(Param("nb"), GP64())
	fx := XMM()
	Load(Param("factor"), fx)
	factor := ZMM()
	VBROADCASTSS(fx, factor)
	facc := make([]VecVirtual, T)
	for t := range facc {
		facc[t] = ZMM()
		VPXORD(facc[t], facc[t], facc[t])
	}

	Label(name + "_loop")
	bacc := make([]VecVirtual, T)
	for t := range bacc {
		bacc[t] = ZMM()
		VPXORD(bacc[t], bacc[t], bacc[t])
	}
	for j := 0; j < 16; j++ {
		var wv [4]VecVirtual
		for c := range wv {
			wv[c] = ZMM()
			VMOVDQU64(Mem{Base: w, Disp: iq2OuterRec*j + 64*c}, wv[c])
		}
		sc := ZMM()
		VMOVDQU64(Mem{Base: w, Disp: iq2OuterRec*j + 256}, sc)
		for t := 0; t < T; t++ {
			g := ZMM()
			VPBROADCASTD(Mem{Base: a, Disp: iq2OuterTok*t + 256 + 4*j}, g)
			for c := range wv {
				rawBcst("VPDPBUSD", Mem{Base: a, Disp: iq2OuterTok*t + 16*j + 4*c}, wv[c], g)
			}
			VPMULLD(sc, g, g)
			VPADDD(g, bacc[t], bacc[t])
		}
	}
	dxv := ZMM()
	VMOVUPS(Mem{Base: dx}, dxv)
	for t := 0; t < T; t++ {
		f, dd := ZMM(), ZMM()
		VCVTDQ2PS(bacc[t], f)
		VBROADCASTSS(Mem{Base: dy, Disp: 4 * t}, dd)
		VMULPS(dxv, dd, dd) // f16(x.d)·y.d
		VMULPS(f, dd, dd)
		VMULPS(factor, dd, dd)
		VADDPS(dd, facc[t], facc[t])
	}
	ADDQ(U32(iqPanelGroup*iq2OuterRec), w)
	ADDQ(as, a)
	ADDQ(U8(4*iqPanelGroup), dx)
	ADDQ(dys, dy)
	DECQ(n)
	JNZ(LabelRef(name + "_loop"))
	out := Load(Param("out"), GP64())
	os := Load(Param("os"), GP64())
	m := GP32()
	Load(Param("mask"), m)
	k := K()
	KMOVW(m, k)
	for t := 0; t < T; t++ {
		VMOVUPS(facc[t], k, Mem{Base: out})
		if t+1 < T {
			ADDQ(os, out)
		}
	}
	VZEROUPPER()
	RET()
}

// iq2OuterKernels emits the IQ2 panels' decoders and kernels.
func iq2OuterKernels() {
	iq2PanelConstants()
	iq2OuterConstants()
	iq2OuterAVX512(8)
	iq2OuterAVX512(4)
	for _, g := range latticeGroups512 {
		if g.typ == "IQ2XXS" || g.typ == "IQ2XS" || g.typ == "IQ2S" {
			decodeIQ2OuterAVX512(g.typ, g.size, g.group)
		}
	}
}

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

// iq2Chunks returns the signed values of the block at x by chunks: chunk c's
// dword j holds values 16j+4c … 16j+4c+3. The sub-blocks'
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
