package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

const (
	tq1Size = 54 // TQ1_0: qs [48]byte, qh [4]byte, d f16
	tq2Size = 66 // TQ2_0: qs [64]byte, d f16
)

var signBit, tritLow, tritHigh, highBits5 Mem

func ternaryConstants() {
	signBit = rodata("signBit", repeat(0x80, 32))
	// A trit (3·v)>>8 of a byte v is [v ≥ 86] + [v ≥ 171]; compared as signed
	// bytes after flipping the top bit: v^0x80 > 85^0x80, v^0x80 > 170^0x80.
	tritLow = rodata("tritLow", repeat(85^0x80, 32))
	tritHigh = rodata("tritHigh", repeat(170^0x80, 32))
	highBits5 = rodata("highBits5", repeat(0xf8, 32))
}

// ternaryAcc starts an integer accumulator of a ternary block: 16 int16 that
// start at minus the block's 16 bsums (the reference's isum = Σ trit·y − Σ
// bsums; each lane stays far inside int16: at most 8 pair sums of 2·3·127 and a
// bsum of 16·127).
func ternaryAcc(y GPVirtual) VecVirtual {
	acc := YMM()
	VPXOR(acc, acc, acc)
	VPSUBW(Mem{Base: y, Disp: q8KBsums}, acc, acc)
	return acc
}

// ternaryFinish adds float32(isum)·(f16(x.d)·y.d) to sum, isum the total of the
// 16 int16 of acc, the reference's float steps.
func ternaryFinish(x, y GPVirtual, dOff int, acc, ones, sum VecVirtual) {
	VPMADDWD(ones, acc, acc)
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
	g := GP32()
	MOVWLZX(Mem{Base: x, Disp: dOff}, g)
	d := XMM()
	VMOVD(g, d)
	VCVTPH2PS(d, d)
	VMULSS(Mem{Base: y}, d, d) // f16(x.d)·y.d
	VMULSS(d, s, s)
	VADDSS(s, sum, sum)
}

// dotTQ2_0AVX2 emits the TQ2_0 kernel for AVX2: element 128n+32k+l is the 2-bit
// q = (qs[32n+l] >> 2k) & 3 (Q2_K's placement), Σ q·y by VPMADDUBSW with the
// pairs' sums kept as int16, less the bsums; then the reference's float steps.
func dotTQ2_0AVX2() {
	TEXT("dotTQ2_0AVX2", NOSPLIT, "func(x, y *byte, n int) float32")
	Pragma("noescape")
	Doc("dotTQ2_0AVX2 is the dot product of n TQ2_0 blocks at x with n q8KBlocks at y.")
	x, y, n := params3()
	m3, ones := YMM(), YMM()
	VMOVDQU(threes, m3)
	VMOVDQU(ones16, ones)
	sum := XMM()
	VXORPS(sum, sum, sum)

	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	acc := ternaryAcc(y)
	for h := 0; h < 2; h++ {
		q := YMM()
		VMOVDQU(Mem{Base: x, Disp: 32 * h}, q)
		for k := 0; k < 4; k++ {
			qk := YMM()
			if k == 0 {
				VPAND(m3, q, qk)
			} else {
				VPSRLW(U8(2*k), q, qk)
				VPAND(m3, qk, qk)
			}
			p := YMM()
			VPMADDUBSW(Mem{Base: y, Disp: q8KQS + 128*h + 32*k}, qk, p)
			VPADDW(p, acc, acc)
		}
	}
	ternaryFinish(x, y, 64, acc, ones, sum)
	ADDQ(U32(tq2Size), x)
	ADDQ(U32(q8KSize), y)
	DECQ(n)
	JMP(LabelRef("loop"))

	Label("done")
	VZEROUPPER()
	Store(sum, ReturnIndex(0))
	RET()
}

// mul3 returns the bytes of v times 3 (mod 256).
func mul3(v VecVirtual) VecVirtual {
	r := YMM()
	VPADDB(v, v, r)
	VPADDB(v, r, r)
	return r
}

// mul9 returns the bytes of v times 9 (mod 256): (v<<3) + v, the word shift's
// carries between bytes masked off.
func mul9(v VecVirtual) VecVirtual {
	r := YMM()
	VPSLLW(U8(3), v, r)
	VPAND(highBits5, r, r)
	VPADDB(v, r, r)
	return r
}

// tritDot adds to each acc[t] the pair sums of trit(v)·y[t], v the bytes
// already times 3ⁿ (mod 256), y[t] 32 activations in memory: the trits found once
// for every row.
func tritDot(v VecVirtual, y []Mem, acc []VecVirtual) {
	s := YMM()
	VPXOR(signBit, v, s)
	c1, c2 := YMM(), YMM()
	VPCMPGTB(tritLow, s, c1)
	VPCMPGTB(tritHigh, s, c2)
	t := YMM()
	VPXOR(t, t, t)
	VPSUBB(c1, t, t)
	VPSUBB(c2, t, t) // the trit, 0..2
	for i := range acc {
		p := YMM()
		VPMADDUBSW(y[i], t, p)
		VPADDW(p, acc[i], acc[i])
	}
}

// dotTQ1_0AVX2 emits the TQ1_0 kernel for AVX2, for tokens (1 or 2) activation
// rows stride bytes apart (dotTQ1_0AVX2x2: each block's trits found once for
// both, each row's integer and float steps the one-row kernel's). Trit n of a
// byte q is the top bits of 3·(q·3ⁿ mod 256) (tq1Value): the bytes times 3ⁿ by
// byte adds and masked word shifts, the trit by two comparisons. Elements 0-159
// are the five trits of qs[0:32], 160-239 those of qs[32:48] and 240-255 four of
// qh, which ride in the high lane of the qs[32:48] vectors (each dword of it the
// four bytes of qh) and are blended into place. Then the reference's integer and
// float steps, as TQ2_0's.
func dotTQ1_0AVX2(tokens int) {
	if tokens == 1 {
		TEXT("dotTQ1_0AVX2", NOSPLIT, "func(x, y *byte, n int) float32")
		Pragma("noescape")
		Doc("dotTQ1_0AVX2 is the dot product of n TQ1_0 blocks at x with n q8KBlocks at y.")
	} else {
		name := fmt.Sprintf("dotTQ1_0AVX2x%d", tokens)
		TEXT(name, NOSPLIT, "func(x, y *byte, n, stride int, out *float32)")
		Pragma("noescape")
		Doc(fmt.Sprintf("%s sets out[t] = dotTQ1_0AVX2(x, y+t·stride, n) for t < %d.", name, tokens))
	}
	x, y, n := params3()
	ys := tokenRows(y, tokens)
	ones := YMM()
	VMOVDQU(ones16, ones)
	sums := make([]VecVirtual, tokens)
	for t := range sums {
		sums[t] = XMM()
		VXORPS(sums[t], sums[t], sums[t])
	}
	rows := func(disp int) []Mem {
		m := make([]Mem, tokens)
		for t, yt := range ys {
			m[t] = Mem{Base: yt, Disp: disp}
		}
		return m
	}

	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	acc := make([]VecVirtual, tokens)
	for t, yt := range ys {
		acc[t] = ternaryAcc(yt)
	}
	q0 := YMM()
	VMOVDQU(Mem{Base: x}, q0)
	q1 := mul3(q0)
	q2 := mul9(q0)
	q3 := mul9(q1)
	q4 := mul9(q2)
	for i, v := range []VecVirtual{q0, q1, q2, q3, q4} {
		tritDot(v, rows(q8KQS+32*i), acc)
	}
	// qs[32:48] in the low lane, qh four times in the high one.
	z0 := YMM()
	VBROADCASTSS(Mem{Base: x, Disp: 48}, z0)
	VINSERTI128(U8(0), Mem{Base: x, Disp: 32}, z0, z0)
	z1 := mul3(z0)
	z2 := mul9(z0)
	z3 := mul9(z1)
	z4 := mul9(z2)
	w0, w1 := YMM(), YMM()
	VPERM2I128(U8(0x20), z1, z0, w0) // trits 0 and 1 of qs[32:48]
	VPERM2I128(U8(0x20), z3, z2, w1) // trits 2 and 3
	w2 := YMM()
	VPBLENDD(U8(0x20), z1, z0, w2) // high lane: dword n from zn, trit n of qh
	VPBLENDD(U8(0x40), z2, w2, w2)
	VPBLENDD(U8(0x80), z3, w2, w2)
	VPBLENDD(U8(0x0f), z4, w2, w2) // low lane: trit 4 of qs[32:48]
	for i, v := range []VecVirtual{w0, w1, w2} {
		tritDot(v, rows(q8KQS+160+32*i), acc)
	}
	for t, yt := range ys {
		ternaryFinish(x, yt, 52, acc[t], ones, sums[t])
		ADDQ(U32(q8KSize), yt)
	}
	ADDQ(U32(tq1Size), x)
	DECQ(n)
	JMP(LabelRef("loop"))

	Label("done")
	storeSums(sums)
}
