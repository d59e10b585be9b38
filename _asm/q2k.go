package main

import (
	"bytes"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
)

const q2KSize = 84 // Q2_K: scales [16]byte, qs [64]byte, d f16, dmin f16

var threes, q2kShuf Mem

func q2KConstants() {
	threes = rodata("threes", repeat(3, 32))
	// q2kShuf: 4 masks of 32 bytes; mask k broadcasts int16 2k in the low 128-bit
	// lane and int16 2k+1 in the high one (the scales of a step's two halves).
	var b []byte
	for k := 0; k < 4; k++ {
		b = append(b, bytes.Repeat([]byte{byte(4 * k), byte(4*k + 1)}, 8)...)
		b = append(b, bytes.Repeat([]byte{byte(4*k + 2), byte(4*k + 3)}, 8)...)
	}
	q2kShuf = rodata("q2kShuf", b)
}

// dotQ2KAVX2 emits the Q2_K kernel for AVX2: per 32 weights (128n+32k+l) the 2-bit
// quants (qs[32n+l] >> 2k) & 3 times the activations (VPMADDUBSW), the pairs'
// sums times their 16 weights' 4-bit scale (VPMADDWD); the mins' sum Σ m·bsum as
// Q4_K's; then Q4_K's float steps (q4KAdd) with d and dmin from the block's end:
// the reference's bits.
func dotQ2KAVX2() {
	TEXT("dotQ2KAVX2", NOSPLIT, "func(x, y *byte, n int) float32")
	Pragma("noescape")
	Doc("dotQ2KAVX2 is the dot product of n Q2_K blocks at x with n q8KBlocks at y.")
	x, y, n := params3()
	m4, m3 := XMM(), YMM()
	VMOVDQU(nibbleMask, m4)
	VMOVDQU(threes, m3)
	sum := XMM()
	VXORPS(sum, sum, sum)

	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	sc := XMM()
	VMOVDQU(Mem{Base: x}, sc)
	mn := XMM()
	VPSRLW(U8(4), sc, mn)
	VPAND(m4, mn, mn)
	mw := YMM()
	VPMOVZXBW(mn, mw)
	ms := YMM()
	VPMADDWD(Mem{Base: y, Disp: q8KBsums}, mw, ms) // Σ m·bsum in 8 int32
	VPAND(m4, sc, sc)
	s16 := YMM()
	VPMOVZXBW(sc, s16) // the 16 scales as int16
	acc := YMM()
	VPXOR(acc, acc, acc)
	for h := 0; h < 2; h++ {
		sh := YMM()
		VPERMQ(U8([]int{0x44, 0xee}[h]), s16, sh) // scales 8h..8h+7 in both lanes
		q := YMM()
		VMOVDQU(Mem{Base: x, Disp: 16 + 32*h}, q)
		for k := 0; k < 4; k++ {
			qk := YMM()
			if k == 0 {
				VPAND(m3, q, qk)
			} else {
				VPSRLW(U8(2*k), q, qk)
				VPAND(m3, qk, qk)
			}
			s := YMM()
			VPSHUFB(q2kShuf.Offset(32*k), sh, s)
			p := YMM()
			VPMADDUBSW(Mem{Base: y, Disp: q8KQS + 128*h + 32*k}, qk, p)
			VPMADDWD(s, p, p)
			VPADDD(p, acc, acc)
		}
	}
	hi := XMM()
	VEXTRACTI128(U8(1), acc, hi)
	is := XMM()
	VPADDD(hi, acc.AsX(), is)
	t := GP32()
	MOVL(Mem{Base: x, Disp: 80}, t)
	dd := XMM()
	VMOVD(t, dd)
	VCVTPH2PS(dd, dd)     // d dmin
	VUNPCKLPS(dd, dd, dd) // d d dmin dmin
	q4KAdd(y, dd, q4KIntSums(is, ms), sum)
	ADDQ(U32(q2KSize), x)
	ADDQ(U32(q8KSize), y)
	DECQ(n)
	JMP(LabelRef("loop"))

	Label("done")
	VZEROUPPER()
	Store(sum, ReturnIndex(0))
	RET()
}
