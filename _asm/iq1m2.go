package main

import (
	"encoding/binary"
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The IQ1_M AVX2 row kernels (issue 32, Zen 3): per group of 8 weights one
// entry of a 4096-entry table (iq1mWGrid in engine/kernels) indexed by the
// group's 8 bits of qs and its 4 bits of qh (the grid index's top 3 bits and
// the shift's sign), holding w = 8·grid + delta (delta = ±1) as 8 signed bytes,
// so the products and the shifts come in one VPMADDUBSW of |w| with the
// activations signed by w (|w| ≤ 9: a pair sum is at most 2286, no int16
// saturation) and one VPMADDWD by the scale of the 16 weights; the 32 indices
// of a block are found by a few vector operations into the stack, the 16
// scales by one variable shift (ggml's trick), one VPSHUFB per 32 weights
// picking theirs.

var iq1mScaleShift, iq1mScalePick, iq1mEighths Mem

func iq1mConstants() {
	// Qword k of the broadcast scale words shifted right by 0, 6, 3, 9: the low
	// lane holds the scales of the first 16 weights of even and odd groups of
	// 32, the high lane those of the second 16.
	var b []byte
	for _, s := range []uint64{0, 6, 3, 9} {
		for i := 0; i < 8; i++ {
			b = append(b, byte(s>>(8*i)))
		}
	}
	iq1mScaleShift = rodata("iq1mScaleShift", b)
	// For the 32 weights ib: word ib/2 of qword ib%2 in every word of each lane.
	b = nil
	for ib := 0; ib < 8; ib++ {
		o := byte(8*(ib%2) + 2*(ib/2))
		for i := 0; i < 16; i++ {
			b = append(b, o, o+1)
		}
	}
	iq1mScalePick = rodata("iq1mScalePick", b)
	b = nil
	for i := 0; i < 4; i++ {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(0.125))
	}
	iq1mEighths = rodata("iq1mEighths", b)
}

// iq1mIndexOffset is the stack offset of the word holding the table index of
// group k (0..31) of a block: the indices are stored as the in-lane unpacks
// leave them (words 0-7, 16-23, then 8-15, 24-31).
func iq1mIndexOffset(k int) int {
	lane, w := k/16, k%16
	half := w / 8
	return 32*half + 16*lane + 2*(w%8)
}

// dotIQ1MAVX2 emits the IQ1_M kernel for tokens (1, 2 or 4) activation rows:
// each token's accumulator takes 8·sumi1 + sumi2 of dotIQ1MBlock (both far
// inside int32 and float32's integers), its float32 conversion times 0.125
// being the reference's float32(sumi1) + 0.125·float32(sumi2) exactly; then
// the same float steps: · (f16 scale · y.d), added to the token's sum.
func dotIQ1MAVX2(tokens int) {
	x, y, n, tab := iq1Header("IQ1M", tokens)
	ys := tokenRows(y, tokens)
	idx := AllocLocal(64)
	// The sums: one xmm with one token, four tokens a lane each of an xmm
	// with two or four, in out (zeroed here) with eight (too few registers).
	var sums []VecVirtual
	var out GPVirtual
	if tokens <= 4 {
		sums = make([]VecVirtual, (tokens+3)/4)
		for t := range sums {
			sums[t] = XMM()
			VXORPS(sums[t], sums[t], sums[t])
		}
	} else {
		out = GP64()
		Load(Param("out"), out)
		z := XMM()
		VXORPS(z, z, z)
		for g := 0; g < tokens/4; g++ {
			VMOVUPS(z, Mem{Base: out, Disp: 16 * g})
		}
	}
	var eighth VecVirtual
	if tokens == 1 {
		eighth = XMM()
		g := GP32()
		MOVL(U32(math.Float32bits(0.125)), g)
		VMOVD(g, eighth)
	}

	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	// The 32 table indices qs[k] | nibble k of qh << 8, as words on the stack.
	{
		h, hb := XMM(), XMM()
		VMOVDQU(Mem{Base: x, Disp: 32}, h)
		VPSRLW(U8(4), h, hb)
		VPAND(nibbleMask, hb, hb)
		VPAND(nibbleMask, h, h)
		lo, hi := XMM(), XMM()
		VPUNPCKLBW(hb, h, lo)
		VPUNPCKHBW(hb, h, hi)
		nib := YMM()
		VINSERTI128(U8(1), hi, lo.AsY(), nib)
		q, w0, w1 := YMM(), YMM(), YMM()
		VMOVDQU(Mem{Base: x}, q)
		VPUNPCKLBW(nib, q, w0)
		VPUNPCKHBW(nib, q, w1)
		VMOVDQU(w0, idx)
		VMOVDQU(w1, idx.Offset(32))
	}
	// The 16 scales 2s+1, picked per 32 weights by iq1mScalePick.
	scales := YMM()
	VPBROADCASTQ(Mem{Base: x, Disp: 48}, scales)
	VPSRLVQ(iq1mScaleShift, scales, scales)
	{
		seven := YMM()
		VPCMPEQW(seven, seven, seven)
		VPSRLW(U8(13), seven, seven)
		VPAND(seven, scales, scales)
	}
	VPADDW(scales, scales, scales)
	VPOR(ones16, scales, scales)

	acc := make([]VecVirtual, tokens)
	for t := range acc {
		acc[t] = YMM()
		VPXOR(acc[t], acc[t], acc[t])
	}
	for ib := 0; ib < 8; ib++ {
		w := gather8(tab, func(l int) GPVirtual {
			r := GP64()
			MOVWQZX(idx.Offset(iq1mIndexOffset(4*ib+l)), r)
			return r
		})
		aw := YMM()
		VPABSB(w, aw)
		ls := YMM()
		VPSHUFB(iq1mScalePick.Offset(32*ib), scales, ls)
		for t, yt := range ys {
			q := YMM()
			VMOVDQU(Mem{Base: yt, Disp: q8KQS + 32*ib}, q)
			VPSIGNB(w, q, q)
			VPMADDUBSW(q, aw, q)
			VPMADDWD(ls, q, q)
			VPADDD(q, acc[t], acc[t])
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
	if tokens == 1 {
		d := XMM()
		VMULSS(Mem{Base: y}, d0, d)
		s := hsumInt(acc[0])
		VMULSS(eighth, s, s)
		VMULSS(s, d, d)
		VADDSS(d, sums[0], sums[0])
		ADDQ(U32(q8KSize), y)
	} else {
		// Four tokens' sums at a time in the lanes of an xmm (VPHADDD), and
		// the same float steps lane by lane.
		VBROADCASTSS(d0, d0)
		for g := 0; g < (tokens+3)/4; g++ {
			s := hsumInt4(acc[4*g : min(4*g+4, tokens)])
			VCVTDQ2PS(s, s)
			VMULPS(iq1mEighths, s, s)
			d := XMM()
			VMOVSS(Mem{Base: ys[4*g]}, d)
			for k := 1; k < 4 && 4*g+k < tokens; k++ {
				VINSERTPS(U8(k<<4), Mem{Base: ys[4*g+k]}, d, d)
			}
			VMULPS(d0, d, d)
			VMULPS(s, d, d)
			if sums != nil {
				VADDPS(d, sums[g], sums[g])
			} else {
				VADDPS(Mem{Base: out, Disp: 16 * g}, d, d)
				VMOVUPS(d, Mem{Base: out, Disp: 16 * g})
			}
		}
		for _, yt := range ys {
			ADDQ(U32(q8KSize), yt)
		}
	}
	ADDQ(U32(56), x)
	DECQ(n)
	JMP(LabelRef("loop"))

	Label("done")
	if tokens == 1 {
		storeSums(sums)
		return
	}
	if sums == nil {
		VZEROUPPER()
		RET()
		return
	}
	out = GP64()
	Load(Param("out"), out)
	for g, sg := range sums {
		if tokens == 2 {
			VMOVQ(sg, Mem{Base: out})
		} else {
			VMOVUPS(sg, Mem{Base: out, Disp: 16 * g})
		}
	}
	VZEROUPPER()
	RET()
}

// hsumInt4 returns the sums of the 8 int32 of each of acc (up to four) in the
// lanes of an xmm, in order (with two, lanes 2 and 3 repeat them).
func hsumInt4(acc []VecVirtual) VecVirtual {
	h01 := YMM()
	if len(acc) == 2 {
		VPHADDD(acc[1], acc[0], h01)
		VPHADDD(h01, h01, h01)
	} else {
		h23 := YMM()
		VPHADDD(acc[1], acc[0], h01)
		VPHADDD(acc[3], acc[2], h23)
		VPHADDD(h23, h01, h01)
	}
	hi := XMM()
	VEXTRACTI128(U8(1), h01, hi)
	s := XMM()
	VPADDD(hi, h01.AsX(), s)
	return s
}
