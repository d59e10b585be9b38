package main

import (
	"bytes"
	"fmt"
	"math"
	"math/bits"
	"strings"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The lattice types' row kernels (AVX2), as ggml's AVX2 vec_dot: per 8 weights a
// grid entry loaded by its index (the grid is passed in: engine/kernels holds the
// tables), the activations' signs flipped where the weights' are negative
// (VPSIGNB, or XOR and subtract for explicit sign bits), VPMADDUBSW of the
// grid's unsigned bytes with them, VPMADDWD with the scale of the 16 or 32
// weights. The integer sums are the block reference's (iquants.go), exactly; the
// float steps are its too (IQ3_S: dotIQ3SRow's lanes and fused multiply-adds).
// Q8_K quants are never -128 (quantActQ8K), which the sign flips rely on.

var ksignsIQ2, wordSplit, iq1mDeltaBits Mem

func latticeConstants() {
	// ksignsIQ2: for each 7-bit sign index, 8 bytes of ±1 (iqSigns: bit j
	// negative; the eighth sign makes the count of negatives even).
	var b []byte
	for i := 0; i < 128; i++ {
		s := i | (bits.OnesCount(uint(i))&1)<<7
		for j := 0; j < 8; j++ {
			if s>>j&1 != 0 {
				b = append(b, 0xff)
			} else {
				b = append(b, 1)
			}
		}
	}
	ksignsIQ2 = rodata("ksignsIQ2", b)
	// wordSplit broadcasts word 0 in the low lane and word 1 in the high one.
	wordSplit = rodata("wordSplit", append(bytes.Repeat([]byte{0, 1}, 8), bytes.Repeat([]byte{2, 3}, 8)...))
	// iq1mDeltaBits: the bit of the shift's sign of 8 weights l (bit 4l+3 of
	// the group's two qh bytes) in the words of their pair sums.
	b = nil
	for l := 0; l < 4; l++ {
		for k := 0; k < 4; k++ {
			v := uint16(8) << (4 * l)
			b = append(b, byte(v), byte(v>>8))
		}
	}
	iq1mDeltaBits = rodata("iq1mDeltaBits", b)
}

// latticeParams loads x, y, n and the grid pointer.
func latticeParams() (x, y, n, grid GPVirtual) {
	x, y, n = params3()
	grid = GP64()
	Load(Param("grid"), grid)
	return
}

// gather8 returns a ymm of four 8-byte entries tab[idx(k)] (k = 0..3 in
// order), each index computed just before its load (few registers live).
func gather8(tab GPVirtual, idx func(k int) GPVirtual) VecVirtual {
	a, b := XMM(), XMM()
	VMOVQ(Mem{Base: tab, Index: idx(0), Scale: 8}, a)
	VPINSRQ(U8(1), Mem{Base: tab, Index: idx(1), Scale: 8}, a, a)
	VMOVQ(Mem{Base: tab, Index: idx(2), Scale: 8}, b)
	VPINSRQ(U8(1), Mem{Base: tab, Index: idx(3), Scale: 8}, b, b)
	r := YMM()
	VINSERTI128(U8(1), b, a.AsY(), r)
	return r
}

// gather4 returns a ymm of eight 4-byte entries tab[idx(k)].
func gather4(tab GPVirtual, idx func(k int) GPVirtual) VecVirtual {
	var h [2]VecVirtual
	for i := range h {
		h[i] = XMM()
		VMOVD(Mem{Base: tab, Index: idx(4 * i), Scale: 4}, h[i])
		for k := 1; k < 4; k++ {
			VPINSRD(U8(k), Mem{Base: tab, Index: idx(4*i + k), Scale: 4}, h[i], h[i])
		}
	}
	r := YMM()
	VINSERTI128(U8(1), h[1], h[0].AsY(), r)
	return r
}

// byteIndex returns an index function reading byte off+k of the block at x.
func byteIndex(x GPVirtual, off int) func(k int) GPVirtual {
	return func(k int) GPVirtual {
		r := GP64()
		MOVBQZX(Mem{Base: x, Disp: off + k}, r)
		return r
	}
}

// evenSigns returns the ±1 bytes of the four 7-bit sign indices of aux (bits
// 0-27).
func evenSigns(stab, aux GPVirtual) VecVirtual {
	return gather8(stab, func(l int) GPVirtual {
		r := GP64()
		MOVQ(aux, r)
		if l > 0 {
			SHRQ(U8(7*l), r)
		}
		ANDQ(U8(127), r)
		return r
	})
}

// bitSigns flips the signs of the 32 activations q (in place) where the bits of
// the dword at m are set (bit j%8 of byte j/8 for activation j).
func bitSigns(m Mem, q VecVirtual) {
	s := YMM()
	VPBROADCASTD(m, s)
	VPSHUFB(q5Spread, s, s)
	VPAND(q5Bits, s, s)
	VPCMPEQB(q5Bits, s, s) // -1 where negative
	VPXOR(s, q, q)
	VPSUBB(s, q, q)
}

// scaleAll returns the odd scale 2s+1 of a 4-bit s (in the low bits of g, which
// is clobbered) in every word of a ymm.
func scaleAll(g GPVirtual) VecVirtual {
	LEAQ(Mem{Base: g, Index: g, Scale: 1, Disp: 1}, g)
	v := YMM()
	VMOVD(g.As32(), v.AsX())
	VPBROADCASTW(v.AsX(), v)
	return v
}

// scaleHalves returns the odd scales of the low and high nibbles of the byte
// at m: the low one in the words of the low lane, the high one in the high lane.
func scaleHalves(m Mem) VecVirtual {
	lo, hi := GP64(), GP64()
	MOVBQZX(m, lo)
	MOVQ(lo, hi)
	ANDQ(U8(15), lo)
	SHRQ(U8(4), hi)
	LEAQ(Mem{Base: lo, Index: lo, Scale: 1, Disp: 1}, lo)
	LEAQ(Mem{Base: hi, Index: hi, Scale: 1, Disp: 1}, hi)
	SHLQ(U8(16), hi)
	ORQ(hi, lo)
	v := YMM()
	VMOVD(lo.As32(), v.AsX())
	VPBROADCASTD(v.AsX(), v)
	VPSHUFB(wordSplit, v, v)
	return v
}

// latticeDot adds to acc (8 int32) the scaled products of the unsigned grid
// bytes g with the signed activations q: VPMADDWD(sc, VPMADDUBSW(q, g)).
func latticeDot(g, q, sc, acc VecVirtual) {
	p := YMM()
	VPMADDUBSW(q, g, p)
	VPMADDWD(sc, p, p)
	VPADDD(p, acc, acc)
}

// hsumInt returns in lane 0 of an xmm the sum of the 8 int32 of acc, as float32.
func hsumInt(acc VecVirtual) VecVirtual {
	hi := XMM()
	VEXTRACTI128(U8(1), acc, hi)
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

// blockD returns f16(x.d)·y.d in lane 0 of an xmm (x.d at x's offset 0).
func blockD(x, y GPVirtual) VecVirtual {
	g := GP32()
	MOVWLZX(Mem{Base: x}, g)
	d := XMM()
	VMOVD(g, d)
	VCVTPH2PS(d, d)
	VMULSS(Mem{Base: y}, d, d)
	return d
}

// latticeGroup decodes the 32 weights ib of the block at x: the grid bytes g,
// flip (which flips the signs of 32 activations where the weights' are
// negative) and the scale words sc of VPMADDWD.
type latticeGroup func(x, grid GPVirtual, ib int) (g VecVirtual, flip func(q VecVirtual), sc VecVirtual)

// latticeKernel emits a lattice row kernel, for tokens activation rows (1 or 2,
// stride bytes apart): per block, each group decoded once and its scaled
// integer products added to each row's accumulator; then the block reference's
// float steps sum += ((f16(x.d)·y.d)·float32(bsum))·factor, per row.
func latticeKernel(typ string, size int, factor float32, tokens int, group latticeGroup) {
	name := "dot" + typ + "AVX2"
	if tokens == 1 {
		TEXT(name, NOSPLIT, "func(x, y *byte, n int, grid *byte) float32")
		Pragma("noescape")
		Doc(fmt.Sprintf("%s is the dot product of n %s blocks at x with n q8KBlocks at y; grid is the type's grid.", name, typ))
	} else {
		single := name
		name = fmt.Sprintf("%sx%d", name, tokens)
		TEXT(name, NOSPLIT, "func(x, y *byte, n, stride int, out *float32, grid *byte)")
		Pragma("noescape")
		Doc(fmt.Sprintf("%s sets out[t] = %s(x, y+t·stride, n, grid) for t < %d.", name, single, tokens))
	}
	x, y, n, grid := latticeParams()
	ys := tokenRows(y, tokens)
	sums := make([]VecVirtual, tokens)
	for t := range sums {
		sums[t] = XMM()
		VXORPS(sums[t], sums[t], sums[t])
	}
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
		VPXOR(acc[t], acc[t], acc[t])
	}
	for ib := 0; ib < 8; ib++ {
		g, flip, sc := group(x, grid, ib)
		for t, yt := range ys {
			q := YMM()
			VMOVDQU(Mem{Base: yt, Disp: q8KQS + 32*ib}, q)
			flip(q)
			latticeDot(g, q, sc, acc[t])
		}
	}
	for t, yt := range ys {
		s := hsumInt(acc[t])
		d := blockD(x, yt)
		VMULSS(s, d, d)
		VMULSS(f, d, d)
		VADDSS(d, sums[t], sums[t])
		ADDQ(U32(q8KSize), yt)
	}
	ADDQ(U32(size), x)
	DECQ(n)
	JMP(LabelRef("loop"))

	Label("done")
	storeSums(sums)
}

// signFlip returns the flip of ±1 sign bytes sg (VPSIGNB).
func signFlip(sg VecVirtual) func(q VecVirtual) {
	return func(q VecVirtual) { VPSIGNB(sg, q, q) }
}

// maskFlip returns the flip of a -1/0 byte mask m: (q XOR m) - m.
func maskFlip(m VecVirtual) func(q VecVirtual) {
	return func(q VecVirtual) {
		VPXOR(m, q, q)
		VPSUBB(m, q, q)
	}
}

// bitMask returns -1 in byte j where bit j%8 of byte j/8 of the dword at m is
// set.
func bitMask(m Mem) VecVirtual {
	s := YMM()
	VPBROADCASTD(m, s)
	VPSHUFB(q5Spread, s, s)
	VPAND(q5Bits, s, s)
	VPCMPEQB(q5Bits, s, s)
	return s
}

// signTable returns the address of ksignsIQ2 in a register.
func signTable() GPVirtual {
	r := GP64()
	LEAQ(ksignsIQ2, r)
	return r
}

// dotIQ2XXSAVX2: per 32 weights 8 bytes at 2+8ib: four grid indices, then a
// uint32 of four 7-bit sign indices and the 4-bit scale at the top.
func dotIQ2XXSAVX2(tokens int) {
	latticeKernel("IQ2XXS", 66, 0.125, tokens, func(x, grid GPVirtual, ib int) (VecVirtual, func(VecVirtual), VecVirtual) {
		g := gather8(grid, byteIndex(x, 2+8*ib))
		aux := GP64()
		MOVLQZX(Mem{Base: x, Disp: 2 + 8*ib + 4}, aux)
		sg := evenSigns(signTable(), aux)
		SHRQ(U8(28), aux)
		return g, signFlip(sg), scaleAll(aux)
	})
}

// dotIQ3XXSAVX2: eight 1-byte indices of 4-byte grid entries at 2+8ib, the
// uint32 of signs and scale at 66+4ib.
func dotIQ3XXSAVX2(tokens int) {
	latticeKernel("IQ3XXS", 98, 0.25, tokens, func(x, grid GPVirtual, ib int) (VecVirtual, func(VecVirtual), VecVirtual) {
		g := gather4(grid, byteIndex(x, 2+8*ib))
		aux := GP64()
		MOVLQZX(Mem{Base: x, Disp: 66 + 4*ib}, aux)
		sg := evenSigns(signTable(), aux)
		SHRQ(U8(28), aux)
		return g, signFlip(sg), scaleAll(aux)
	})
}

// dotIQ2XSAVX2: four uint16 at 2+8ib (a 9-bit grid index, a 7-bit sign index),
// the two 4-bit scales of the 32 weights in the byte at 66+ib.
func dotIQ2XSAVX2(tokens int) {
	latticeKernel("IQ2XS", 74, 0.125, tokens, func(x, grid GPVirtual, ib int) (VecVirtual, func(VecVirtual), VecVirtual) {
		g := gather8(grid, func(l int) GPVirtual {
			r := GP64()
			MOVWQZX(Mem{Base: x, Disp: 2 + 8*ib + 2*l}, r)
			ANDQ(U32(511), r)
			return r
		})
		sg := gather8(signTable(), func(l int) GPVirtual {
			r := GP64()
			MOVWQZX(Mem{Base: x, Disp: 2 + 8*ib + 2*l}, r)
			SHRQ(U8(9), r)
			return r
		})
		return g, signFlip(sg), scaleHalves(Mem{Base: x, Disp: 66 + ib})
	})
}

// dotIQ2SAVX2: the low 8 bits of four grid indices at 2+4ib, their top 2 bits in
// the byte at 66+ib, the sign bits of the 32 weights at 34+4ib, the two scales
// at 74+ib.
func dotIQ2SAVX2(tokens int) {
	latticeKernel("IQ2S", 82, 0.125, tokens, func(x, grid GPVirtual, ib int) (VecVirtual, func(VecVirtual), VecVirtual) {
		qh := GP64()
		MOVBQZX(Mem{Base: x, Disp: 66 + ib}, qh)
		g := gather8(grid, func(l int) GPVirtual {
			r, t := GP64(), GP64()
			MOVQ(qh, t)
			SHLQ(U8(8-2*l), t)
			ANDQ(U32(0x300), t)
			MOVBQZX(Mem{Base: x, Disp: 2 + 4*ib + l}, r)
			ORQ(t, r)
			return r
		})
		m := bitMask(Mem{Base: x, Disp: 34 + 4*ib})
		return g, maskFlip(m), scaleHalves(Mem{Base: x, Disp: 74 + ib})
	})
}

// iq3SGroup adds the scaled products of IQ3_S's 32 weights ib to acc: the low
// 8 bits of eight grid indices at 2+8ib, their ninth bits in the byte at 66+ib,
// the sign bits at 74+4ib, the 4-bit scale in the byte at 106+ib/2.
func iq3SGroup(x, y, grid GPVirtual, ib int, acc VecVirtual) {
	qh := GP64()
	MOVBQZX(Mem{Base: x, Disp: 66 + ib}, qh)
	g := gather4(grid, func(k int) GPVirtual {
		r, t := GP64(), GP64()
		MOVQ(qh, t)
		SHLQ(U8(8-k), t)
		ANDQ(U32(256), t)
		MOVBQZX(Mem{Base: x, Disp: 2 + 8*ib + k}, r)
		ORQ(t, r)
		return r
	})
	q := YMM()
	VMOVDQU(Mem{Base: y, Disp: q8KQS + 32*ib}, q)
	bitSigns(Mem{Base: x, Disp: 74 + 4*ib}, q)
	s := GP64()
	MOVBQZX(Mem{Base: x, Disp: 106 + ib/2}, s)
	if ib%2 == 1 {
		SHRQ(U8(4), s)
	} else {
		ANDQ(U8(15), s)
	}
	latticeDot(g, q, scaleAll(s), acc)
}

// dotIQ3SAVX2 emits the IQ3_S kernel in dotIQ3SRow's float order (ggml's):
// each block's 8 int32 lanes converted and added to 8 float lanes by one fused
// multiply-add with f16(x.d)·y.d, the lanes summed at the end as sum8.
func dotIQ3SAVX2() {
	TEXT("dotIQ3SAVX2", NOSPLIT, "func(x, y *byte, n int, grid *byte) float32")
	Pragma("noescape")
	Doc("dotIQ3SAVX2 is the dot product of n IQ3_S blocks at x with n q8KBlocks at y in ggml's float order; grid is the type's grid.")
	x, y, n, grid := latticeParams()
	facc := YMM()
	VXORPS(facc, facc, facc)

	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	acc := YMM()
	VPXOR(acc, acc, acc)
	for ib := 0; ib < 8; ib++ {
		iq3SGroup(x, y, grid, ib, acc)
	}
	VCVTDQ2PS(acc, acc)
	d := blockD(x, y)
	dv := YMM()
	VBROADCASTSS(d, dv)
	VFMADD231PS(acc, dv, facc)
	ADDQ(U32(110), x)
	ADDQ(U32(q8KSize), y)
	DECQ(n)
	JMP(LabelRef("loop"))

	Label("done")
	s := hsum8(facc)
	VZEROUPPER()
	Store(s, ReturnIndex(0))
	RET()
}

// iq1Header declares the IQ1 kernel of typ for tokens activation rows (1, or 2
// stride bytes apart, as latticeKernel's) and loads its common parameters.
func iq1Header(typ string, tokens int) (x, y, n, grid GPVirtual) {
	name := "dot" + typ + "AVX2"
	if tokens == 1 {
		TEXT(name, NOSPLIT, "func(x, y *byte, n int, grid *byte) float32")
		Pragma("noescape")
		Doc(fmt.Sprintf("%s is the dot product of n %s blocks at x with n q8KBlocks at y; grid is the type's grid.", name, strings.Replace(typ, "IQ1", "IQ1_", 1)))
	} else {
		single := name
		name = fmt.Sprintf("%sx%d", name, tokens)
		TEXT(name, NOSPLIT, "func(x, y *byte, n, stride int, out *float32, grid *byte)")
		Pragma("noescape")
		Doc(fmt.Sprintf("%s sets out[t] = %s(x, y+t·stride, n, grid) for t < %d.", name, single, tokens))
	}
	return latticeParams()
}

// dotIQ1MAVX2 emits the IQ1_M kernel: IQ1_S's products with a 3-bit scale per
// 16 weights (the low and high lanes) and the shift's sign per 8 weights, so the
// shifts' sum takes the activations' own pair sums (VPMADDUBSW with ones) times
// ±scale, negated where the sign bit is set; the f16 scale gathered from the
// top nibbles of the four scale words. With two or four tokens, each group's
// grid entries and scales are decoded once for them. One accumulator per token
// takes 8·sumi1 + sumi2 (the products scaled by 8·scale, the shifts' sums by
// ±scale: both far inside int32), its float32 conversion times 0.125 being the
// reference's float32(sumi1) + 0.125·float32(sumi2) exactly (the two sums are
// exact in float32, and scaling by a power of two commutes with rounding).
func dotIQ1MAVX2(tokens int) {
	x, y, n, grid := iq1Header("IQ1M", tokens)
	ys := tokenRows(y, tokens)
	sums := make([]VecVirtual, tokens)
	for t := range sums {
		sums[t] = XMM()
		VXORPS(sums[t], sums[t], sums[t])
	}
	eighth := XMM()
	{
		g := GP32()
		MOVL(U32(math.Float32bits(0.125)), g)
		VMOVD(g, eighth)
	}
	onesB := YMM()
	VMOVDQU(byteOnes, onesB)

	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	acc := make([]VecVirtual, tokens)
	for t := range acc {
		acc[t] = YMM()
		VPXOR(acc[t], acc[t], acc[t])
	}
	for ib := 0; ib < 8; ib++ {
		g := gather8(grid, func(l int) GPVirtual {
			r, t := GP64(), GP64()
			MOVBQZX(Mem{Base: x, Disp: 32 + 2*ib + l/2}, t)
			if l%2 == 1 {
				SHRQ(U8(4), t)
			}
			ANDQ(U8(7), t)
			SHLQ(U8(8), t)
			MOVBQZX(Mem{Base: x, Disp: 4*ib + l}, r)
			ORQ(t, r)
			return r
		})
		// The scales of the two halves: low lane, high lane.
		lo, hi := GP64(), GP64()
		MOVWQZX(Mem{Base: x, Disp: 48 + 2*(ib/2)}, lo)
		if ib%2 == 1 {
			SHRQ(U8(6), lo)
		}
		MOVQ(lo, hi)
		SHRQ(U8(3), hi)
		ANDQ(U8(7), lo)
		ANDQ(U8(7), hi)
		LEAQ(Mem{Base: lo, Index: lo, Scale: 1, Disp: 1}, lo)
		LEAQ(Mem{Base: hi, Index: hi, Scale: 1, Disp: 1}, hi)
		SHLQ(U8(16), hi)
		ORQ(hi, lo)
		ls := YMM()
		VMOVD(lo.As32(), ls.AsX())
		VPBROADCASTD(ls.AsX(), ls)
		VPSHUFB(wordSplit, ls, ls)
		// ±scale per 8 weights: negated where the shift's sign is set.
		m := YMM()
		VPBROADCASTW(Mem{Base: x, Disp: 32 + 2*ib}, m)
		VPAND(iq1mDeltaBits, m, m)
		VPCMPEQW(iq1mDeltaBits, m, m)
		c := YMM()
		VPXOR(m, ls, c)
		VPSUBW(m, c, c)
		VPSLLW(U8(3), ls, ls) // 8·scale

		for t, yt := range ys {
			q := YMM()
			VMOVDQU(Mem{Base: yt, Disp: q8KQS + 32*ib}, q)
			p2 := YMM()
			VPMADDUBSW(q, onesB, p2)
			VPMADDWD(c, p2, p2)
			VPADDD(p2, acc[t], acc[t])
			VPSIGNB(g, q, q)
			VPMADDUBSW(q, onesB, p2)
			VPMADDWD(ls, p2, p2)
			VPADDD(p2, acc[t], acc[t])
		}
	}
	// The f16 scale: the top nibbles of the four scale words.
	d16, t := GP64(), GP64()
	MOVWQZX(Mem{Base: x, Disp: 48}, d16)
	SHRQ(U8(12), d16)
	for k := 1; k < 4; k++ {
		MOVWQZX(Mem{Base: x, Disp: 48 + 2*k}, t)
		if k < 3 {
			SHRQ(U8(12-4*k), t)
		}
		ANDQ(U32(0xf000>>(12-4*k)), t)
		ORQ(t, d16)
	}
	d0 := XMM()
	VMOVD(d16.As32(), d0)
	VCVTPH2PS(d0, d0)
	for t, yt := range ys {
		d := XMM()
		VMULSS(Mem{Base: yt}, d0, d)
		s := hsumInt(acc[t])
		VMULSS(eighth, s, s)
		VMULSS(s, d, d)
		VADDSS(d, sums[t], sums[t])
		ADDQ(U32(q8KSize), yt)
	}
	ADDQ(U32(56), x)
	DECQ(n)
	JMP(LabelRef("loop"))

	Label("done")
	storeSums(sums)
}

// dotIQ3SAVX2Tokens emits the IQ3_S kernel for tokens (2 or 4) activation rows
// (stride bytes apart) at once, dotIQ3SAVX2xT: each group's grid entries, sign
// mask and scale found once for all; each row's lanes and float steps are
// dotIQ3SAVX2's, so its bits too.
func dotIQ3SAVX2Tokens(tokens int) {
	name := fmt.Sprintf("dotIQ3SAVX2x%d", tokens)
	TEXT(name, NOSPLIT, "func(x, y *byte, n, stride int, out *float32, grid *byte)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets out[t] = dotIQ3SAVX2(x, y+t·stride, n, grid) for t < %d.", name, tokens))
	x, y, n, grid := latticeParams()
	ys := tokenRows(y, tokens)
	facc := make([]VecVirtual, tokens)
	for t := range facc {
		facc[t] = YMM()
		VXORPS(facc[t], facc[t], facc[t])
	}

	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	acc := make([]VecVirtual, tokens)
	for t := range acc {
		acc[t] = YMM()
		VPXOR(acc[t], acc[t], acc[t])
	}
	for ib := 0; ib < 8; ib++ {
		qh := GP64()
		MOVBQZX(Mem{Base: x, Disp: 66 + ib}, qh)
		g := gather4(grid, func(k int) GPVirtual {
			r, t := GP64(), GP64()
			MOVQ(qh, t)
			SHLQ(U8(8-k), t)
			ANDQ(U32(256), t)
			MOVBQZX(Mem{Base: x, Disp: 2 + 8*ib + k}, r)
			ORQ(t, r)
			return r
		})
		m := YMM()
		VPBROADCASTD(Mem{Base: x, Disp: 74 + 4*ib}, m)
		VPSHUFB(q5Spread, m, m)
		VPAND(q5Bits, m, m)
		VPCMPEQB(q5Bits, m, m)
		s := GP64()
		MOVBQZX(Mem{Base: x, Disp: 106 + ib/2}, s)
		if ib%2 == 1 {
			SHRQ(U8(4), s)
		} else {
			ANDQ(U8(15), s)
		}
		sc := scaleAll(s)
		for t, yt := range ys {
			q := YMM()
			VMOVDQU(Mem{Base: yt, Disp: q8KQS + 32*ib}, q)
			VPXOR(m, q, q)
			VPSUBB(m, q, q)
			latticeDot(g, q, sc, acc[t])
		}
	}
	for t, yt := range ys {
		VCVTDQ2PS(acc[t], acc[t])
		d := blockD(x, yt)
		dv := YMM()
		VBROADCASTSS(d, dv)
		VFMADD231PS(acc[t], dv, facc[t])
		ADDQ(U32(q8KSize), yt)
	}
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
