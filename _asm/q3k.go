package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

const q3KSize = 110 // Q3_K: hmask [32]byte, qs [64]byte, scales [12]byte, d f16

var fours, thirtyTwos, q3kSpread4 Mem

func q3KConstants() {
	fours = rodata("fours", repeat(4, 32))
	thirtyTwos = rodata("thirtyTwos", repeat(32, 16))
	q3kSpread4 = rodata("q3kSpread4", []byte{0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3})
}

// q3KScales returns the 16 signed 6-bit scales of the Q3_K block at x as int16
// in a ymm: low 4 bits from the low (j < 8) or high nibble of byte j%8, top 2
// bits from byte 8+j%4 at bit 2·(j/4), minus 32. It reads only the 12 scale bytes.
func q3KScales(x GPVirtual, m4 VecVirtual) VecVirtual {
	lo := XMM()
	VMOVQ(Mem{Base: x, Disp: 96}, lo)
	lh := XMM()
	VPSRLW(U8(4), lo, lh)
	VPUNPCKLQDQ(lh, lo, lo) // bytes 0-7, then their high halves
	VPAND(m4, lo, lo)
	hb := XMM()
	VMOVD(Mem{Base: x, Disp: 104}, hb)
	VPSHUFB(q3kSpread4, hb, hb) // byte 8+j%4 at j
	t := [4]VecVirtual{hb, XMM(), XMM(), XMM()}
	for g := 1; g < 4; g++ {
		VPSRLW(U8(2*g), hb, t[g])
	}
	VPBLENDD(U8(0b0010), t[1], t[0], t[0])
	VPBLENDD(U8(0b0100), t[2], t[0], t[0])
	VPBLENDD(U8(0b1000), t[3], t[0], t[0]) // dword g shifted by 2g
	VPAND(threes, t[0], t[0])
	VPSLLW(U8(4), t[0], t[0])
	VPOR(t[0], lo, lo)
	VPSUBB(thirtyTwos, lo, lo)
	s := YMM()
	VPMOVSXBW(lo, s)
	return s
}

// dotQ3KAVX2 emits the Q3_K kernel for AVX2: per 32 weights (128h+32k+l) the
// unsigned u = (qs[32h+l] >> 2k) & 3 | 4·(bit 4h+k of hmask[l]) times the
// activations (VPMADDUBSW), the pairs' sums times their 16 weights' signed scale
// (VPMADDWD), minus 4·Σ scale·bsum (the quants are u − 4); the block's exact
// integer sum, then the reference's float steps sum += (f16(x.d)·y.d)·isum.
func dotQ3KAVX2() {
	TEXT("dotQ3KAVX2", NOSPLIT, "func(x, y *byte, n int) float32")
	Pragma("noescape")
	Doc("dotQ3KAVX2 is the dot product of n Q3_K blocks at x with n q8KBlocks at y.")
	x, y, n := params3()
	m4, m3 := XMM(), YMM()
	VMOVDQU(nibbleMask, m4)
	VMOVDQU(threes, m3)
	sum := XMM()
	VXORPS(sum, sum, sum)

	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	s16 := q3KScales(x, m4)
	off := YMM()
	VPMADDWD(Mem{Base: y, Disp: q8KBsums}, s16, off) // Σ scale·bsum in 8 int32
	hm := YMM()
	VMOVDQU(Mem{Base: x}, hm)
	acc := YMM()
	VPXOR(acc, acc, acc)
	for h := 0; h < 2; h++ {
		sh := YMM()
		VPERMQ(U8([]int{0x44, 0xee}[h]), s16, sh) // scales 8h..8h+7 in both lanes
		q := YMM()
		VMOVDQU(Mem{Base: x, Disp: 32 + 32*h}, q)
		for k := 0; k < 4; k++ {
			u := YMM()
			if k == 0 {
				VPAND(m3, q, u)
			} else {
				VPSRLW(U8(2*k), q, u)
				VPAND(m3, u, u)
			}
			// Bit b of each hmask byte to bit 2 (a word shift; the AND keeps
			// each byte's own bit), ORed in.
			b := 4*h + k
			hb := YMM()
			switch {
			case b < 2:
				VPSLLW(U8(2-b), hm, hb)
			case b > 2:
				VPSRLW(U8(b-2), hm, hb)
			default:
				VMOVDQA(hm, hb)
			}
			VPAND(fours, hb, hb)
			VPOR(hb, u, u)
			s := YMM()
			VPSHUFB(q2kShuf.Offset(32*k), sh, s)
			p := YMM()
			VPMADDUBSW(Mem{Base: y, Disp: q8KQS + 128*h + 32*k}, u, p)
			VPMADDWD(s, p, p)
			VPADDD(p, acc, acc)
		}
	}
	VPSLLD(U8(2), off, off)
	VPSUBD(off, acc, acc)
	hi := XMM()
	VEXTRACTI128(U8(1), acc, hi)
	VPADDD(acc.AsX(), hi, hi)
	VPHADDD(hi, hi, hi)
	VPHADDD(hi, hi, hi)
	f := XMM()
	VCVTDQ2PS(hi, f)
	g := GP32()
	MOVWLZX(Mem{Base: x, Disp: 108}, g)
	d := XMM()
	VMOVD(g, d)
	VCVTPH2PS(d, d)
	VMULSS(Mem{Base: y}, d, d) // f16(x.d)·y.d
	VMULSS(f, d, d)            // ·isum
	VADDSS(d, sum, sum)
	ADDQ(U32(q3KSize), x)
	ADDQ(U32(q8KSize), y)
	DECQ(n)
	JMP(LabelRef("loop"))

	Label("done")
	VZEROUPPER()
	Store(sum, ReturnIndex(0))
	RET()
}
