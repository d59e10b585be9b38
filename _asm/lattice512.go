package main

import (
	"fmt"
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The lattice types' eight-token prompt kernels for AVX-512 (BW, VL): the AVX2
// kernels' operations on 256-bit vectors, with the 32 vector registers holding
// eight tokens' integer and float accumulators, and the weights' sign bits loaded
// straight into a mask register (KMOVD) that negates the activations by a
// merge-masked subtraction from zero. Each token's integer sums and float steps
// are the one-token AVX2 kernel's, so its bits.

// tokenRows8 returns the addresses of the eight activation rows of y, stride
// bytes apart, from four registers: y, y+4·stride, stride and 3·stride (the
// rows' Mems at a displacement; advance moves y and y+4·stride on).
func tokenRows8(y GPVirtual) (row func(t, disp int) Mem, advance func(int)) {
	stride, stride3, y4 := GP64(), GP64(), GP64()
	Load(Param("stride"), stride)
	LEAQ(Mem{Base: stride, Index: stride, Scale: 2}, stride3)
	LEAQ(Mem{Base: y, Index: stride, Scale: 4}, y4)
	row = func(t, disp int) Mem {
		base := y
		if t >= 4 {
			base, t = y4, t-4
		}
		switch t {
		case 0:
			return Mem{Base: base, Disp: disp}
		case 3:
			return Mem{Base: base, Index: stride3, Scale: 1, Disp: disp}
		default:
			return Mem{Base: base, Index: stride, Scale: uint8(t), Disp: disp}
		}
	}
	advance = func(n int) {
		ADDQ(U32(n), y)
		ADDQ(U32(n), y4)
	}
	return
}

// gather4x returns gather4's ymm with an EVEX-encodable insert (the register
// allocator may hand out Y16-Y31).
func gather4x(tab GPVirtual, idx func(k int) GPVirtual) VecVirtual {
	var h [2]VecVirtual
	for i := range h {
		h[i] = XMM()
		VMOVD(Mem{Base: tab, Index: idx(4 * i), Scale: 4}, h[i])
		for k := 1; k < 4; k++ {
			VPINSRD(U8(k), Mem{Base: tab, Index: idx(4*i + k), Scale: 4}, h[i], h[i])
		}
	}
	r := YMM()
	VINSERTI32X4(U8(1), h[1], h[0].AsY(), r)
	return r
}

// dotIQ3SAVX512x8 emits dotIQ3SAVX2x4's kernel for eight tokens: out[t] =
// dotIQ3SAVX2(x, y+t·stride, n, grid) for t < 8.
func dotIQ3SAVX512x8() {
	const tokens = 8
	evex = true
	defer func() { evex = false }()
	name := fmt.Sprintf("dotIQ3SAVX512x%d", tokens)
	TEXT(name, NOSPLIT, "func(x, y *byte, n, stride int, out *float32, grid *byte)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets out[t] = dotIQ3SAVX2(x, y+t·stride, n, grid) for t < %d (AVX-512 BW, VL).", name, tokens))
	x, y, n, grid := latticeParams()
	row, advance := tokenRows8(y)
	facc := make([]VecVirtual, tokens)
	for t := range facc {
		facc[t] = YMM()
		VPXORD(facc[t], facc[t], facc[t])
	}
	zero := YMM()
	VPXORD(zero, zero, zero)

	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	acc := make([]VecVirtual, tokens)
	for t := range acc {
		acc[t] = YMM()
		VPXORD(acc[t], acc[t], acc[t])
	}
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
		k := K()
		KMOVD(Mem{Base: x, Disp: 74 + 4*ib}, k)
		s := GP64()
		MOVBQZX(Mem{Base: x, Disp: 106 + ib/2}, s)
		if ib%2 == 1 {
			SHRQ(U8(4), s)
		} else {
			ANDQ(U8(15), s)
		}
		sc := scaleAll(s)
		for t := range acc {
			q := YMM()
			VMOVDQU32(row(t, q8KQS+32*ib), q)
			VPSUBB(q, zero, k, q) // negated where the weight's sign bit is set
			p := YMM()
			VPMADDUBSW(q, g, p)
			VPMADDWD(sc, p, p)
			VPADDD(p, acc[t], acc[t])
		}
	}
	dx := GP32()
	MOVWLZX(Mem{Base: x}, dx)
	d16 := XMM()
	VMOVD(dx, d16)
	VCVTPH2PS(d16, d16)
	for t := range acc {
		VCVTDQ2PS(acc[t], acc[t])
		d := XMM()
		VMULSS(row(t, 0), d16, d) // f16(x.d)·y.d
		dv := YMM()
		VBROADCASTSS(d, dv)
		VFMADD231PS(acc[t], dv, facc[t])
	}
	advance(q8KSize)
	ADDQ(U32(110), x)
	DECQ(n)
	JMP(LabelRef("loop"))

	Label("done")
	sums := make([]VecVirtual, tokens)
	for t := range sums {
		sums[t] = hsum8(facc[t])
	}
	storeSums(sums)
}

// gather8x returns gather8's ymm with an EVEX-encodable insert.
func gather8x(tab GPVirtual, idx func(k int) GPVirtual) VecVirtual {
	a, b := XMM(), XMM()
	VMOVQ(Mem{Base: tab, Index: idx(0), Scale: 8}, a)
	VPINSRQ(U8(1), Mem{Base: tab, Index: idx(1), Scale: 8}, a, a)
	VMOVQ(Mem{Base: tab, Index: idx(2), Scale: 8}, b)
	VPINSRQ(U8(1), Mem{Base: tab, Index: idx(3), Scale: 8}, b, b)
	r := YMM()
	VINSERTI32X4(U8(1), b, a.AsY(), r)
	return r
}

// hsumIntX is hsumInt with an EVEX-encodable extract.
func hsumIntX(acc VecVirtual) VecVirtual {
	hi := XMM()
	VEXTRACTI32X4(U8(1), acc, hi)
	s := XMM()
	VPADDD(hi, acc.AsX(), s)
	t := XMM()
	VPSHUFD(U8(0x4e), s, t)
	VPADDD(t, s, s)
	VPSHUFD(U8(0xb1), s, t)
	VPADDD(t, s, s)
	VCVTDQ2PS(s, s)
	return s
}

// evenSignMask loads into a mask register the sign bits of 32 weights from four
// 7-bit sign indices in bits 0-27 of idx (clobbered): byte l of the mask is
// index l with the parity of its bits on top (iqSigns: the count of negatives is
// even). PDEP spreads the indices into the bytes; three shifted XORs leave each
// byte's parity in its bit 0.
func evenSignMask(idx GPVirtual) OpmaskVirtual {
	m, p, t := GP64(), GP64(), GP64()
	MOVQ(U64(0x7f7f7f7f), t)
	PDEPQ(t, idx, m)
	MOVQ(m, p)
	for _, sh := range []uint8{4, 2, 1} {
		MOVQ(p, t)
		SHRQ(U8(sh), t)
		XORQ(t, p)
	}
	ANDL(U32(0x01010101), p.As32())
	SHLL(U8(7), p.As32())
	ORQ(p, m)
	k := K()
	KMOVD(m.As32(), k)
	return k
}

// latticeGroup512 decodes the 32 weights ib of the block at x as latticeGroup
// does, the signs as a mask register (set: negative).
type latticeGroup512 func(x, grid GPVirtual, ib int) (g VecVirtual, k OpmaskVirtual, sc VecVirtual)

// latticeKernel512 emits latticeKernel's kernel for eight tokens with AVX-512
// (BW, VL): dot<typ>AVX512x8 sets out[t] = dot<typ>AVX2(x, y+t·stride, n, grid)
// for t < 8, each token's integer sums and float steps those of the AVX2 kernel.
func latticeKernel512(typ string, size int, factor float32, group latticeGroup512) {
	const tokens = 8
	evex = true
	defer func() { evex = false }()
	name := fmt.Sprintf("dot%sAVX512x%d", typ, tokens)
	TEXT(name, NOSPLIT, "func(x, y *byte, n, stride int, out *float32, grid *byte)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets out[t] = dot%sAVX2(x, y+t·stride, n, grid) for t < %d (AVX-512 BW, VL).", name, typ, tokens))
	x, y, n, grid := latticeParams()
	row, advance := tokenRows8(y)
	sums := make([]VecVirtual, tokens)
	for t := range sums {
		sums[t] = XMM()
		VPXORD(sums[t], sums[t], sums[t])
	}
	zero := YMM()
	VPXORD(zero, zero, zero)
	f := XMM()
	{
		g := GP32()
		MOVL(U32(math.Float32bits(factor)), g)
		VMOVD(g, f)
	}

	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	acc := make([]VecVirtual, tokens)
	for t := range acc {
		acc[t] = YMM()
		VPXORD(acc[t], acc[t], acc[t])
	}
	for ib := 0; ib < 8; ib++ {
		g, k, sc := group(x, grid, ib)
		for t := range acc {
			q := YMM()
			VMOVDQU32(row(t, q8KQS+32*ib), q)
			VPSUBB(q, zero, k, q)
			p := YMM()
			VPMADDUBSW(q, g, p)
			VPMADDWD(sc, p, p)
			VPADDD(p, acc[t], acc[t])
		}
	}
	dx := GP32()
	MOVWLZX(Mem{Base: x}, dx)
	d16 := XMM()
	VMOVD(dx, d16)
	VCVTPH2PS(d16, d16)
	for t := range acc {
		s := hsumIntX(acc[t])
		d := XMM()
		VMULSS(row(t, 0), d16, d) // f16(x.d)·y.d
		VMULSS(s, d, d)
		VMULSS(f, d, d)
		VADDSS(d, sums[t], sums[t])
	}
	advance(q8KSize)
	ADDQ(U32(size), x)
	DECQ(n)
	JMP(LabelRef("loop"))

	Label("done")
	storeSums(sums)
}

// The eight-token AVX-512 kernels of IQ2_XXS, IQ3_XXS, IQ2_XS and IQ2_S: the
// groups of their AVX2 kernels (lattice.go), the signs as masks (BMI2's PDEP and
// PEXT, which every AVX-512 CPU has, spread the sign indices).
func latticeAVX512x8() {
	for _, g := range latticeGroups512 {
		latticeKernel512(g.typ, g.size, g.factor, g.group)
	}
}

// latticeGroups512 are the group decoders of latticeAVX512x8's types (also
// the panel decoders', iqpanel.go).
var latticeGroups512 = []struct {
	typ    string
	size   int
	factor float32
	group  latticeGroup512
}{
	{"IQ2XXS", 66, 0.125, func(x, grid GPVirtual, ib int) (VecVirtual, OpmaskVirtual, VecVirtual) {
		g := gather8x(grid, byteIndex(x, 2+8*ib))
		aux, s := GP64(), GP64()
		MOVLQZX(Mem{Base: x, Disp: 2 + 8*ib + 4}, aux)
		MOVQ(aux, s)
		SHRQ(U8(28), s)
		k := evenSignMask(aux)
		return g, k, scaleAll(s)
	}},
	{"IQ3XXS", 98, 0.25, func(x, grid GPVirtual, ib int) (VecVirtual, OpmaskVirtual, VecVirtual) {
		g := gather4x(grid, byteIndex(x, 2+8*ib))
		aux, s := GP64(), GP64()
		MOVLQZX(Mem{Base: x, Disp: 66 + 4*ib}, aux)
		MOVQ(aux, s)
		SHRQ(U8(28), s)
		k := evenSignMask(aux)
		return g, k, scaleAll(s)
	}},
	{"IQ2XS", 74, 0.125, func(x, grid GPVirtual, ib int) (VecVirtual, OpmaskVirtual, VecVirtual) {
		g := gather8x(grid, func(l int) GPVirtual {
			r := GP64()
			MOVWQZX(Mem{Base: x, Disp: 2 + 8*ib + 2*l}, r)
			ANDQ(U32(511), r)
			return r
		})
		// The four 7-bit sign indices: bits 9-15 of the four words.
		w, mk, idx := GP64(), GP64(), GP64()
		MOVQ(Mem{Base: x, Disp: 2 + 8*ib}, w)
		MOVQ(U64(0xfe00fe00fe00fe00), mk)
		PEXTQ(mk, w, idx)
		k := evenSignMask(idx)
		return g, k, scaleHalves(Mem{Base: x, Disp: 66 + ib})
	}},
	{"IQ2S", 82, 0.125, func(x, grid GPVirtual, ib int) (VecVirtual, OpmaskVirtual, VecVirtual) {
		qh := GP64()
		MOVBQZX(Mem{Base: x, Disp: 66 + ib}, qh)
		g := gather8x(grid, func(l int) GPVirtual {
			r, t := GP64(), GP64()
			MOVQ(qh, t)
			SHLQ(U8(8-2*l), t)
			ANDQ(U32(0x300), t)
			MOVBQZX(Mem{Base: x, Disp: 2 + 4*ib + l}, r)
			ORQ(t, r)
			return r
		})
		k := K()
		KMOVD(Mem{Base: x, Disp: 34 + 4*ib}, k)
		return g, k, scaleHalves(Mem{Base: x, Disp: 74 + ib})
	}},
}
