package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

const q3KSize = 110 // Q3_K: hmask [32]byte, qs [64]byte, scales [12]byte, d f16

var fours, thirtyTwos, q3kSpread4, q3kTopShift, q3kThrees, q3kShiftQ, q3kShiftH, q3kScaleIdx Mem

func q3KConstants() {
	fours = rodata("fours", repeat(4, 64))
	thirtyTwos = rodata("thirtyTwos", repeat(32, 16))
	q3kSpread4 = rodata("q3kSpread4", []byte{0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3})
	q3kTopShift = rodata("q3kTopShift", []byte{0, 0, 0, 0, 2, 0, 0, 0, 4, 0, 0, 0, 6, 0, 0, 0})
	q3kThrees = rodata("q3kThrees", repeat(3, 64)) // (threes64 is set up after these kernels)
	// The AVX-512 kernel's per-half word shifts: q3kShiftQ for chunk pair p (the
	// quants of chunks 2p and 2p+1 at bits 0-1), q3kShiftH for half h and pair p
	// (the hmask bits 4h+2p and 4h+2p+1 at bit 2, from hmask<<2 for h = 0 and
	// hmask for h = 1); q3kScaleIdx for half h and pair p: word i takes scale
	// 8h + 4p + i/8 (VPERMW).
	words := func(f func(i int) int) []byte {
		b := make([]byte, 64)
		for i := 0; i < 32; i++ {
			b[2*i] = byte(f(i))
		}
		return b
	}
	var q, hh, idx []byte
	for p := 0; p < 2; p++ {
		q = append(q, words(func(i int) int { return 4*p + 2*(i/16) })...)
	}
	for h := 0; h < 2; h++ {
		for p := 0; p < 2; p++ {
			hh = append(hh, words(func(i int) int { return 2*h + 2*p + i/16 })...)
			idx = append(idx, words(func(i int) int { return 8*h + 4*p + i/8 })...)
		}
	}
	q3kShiftQ = rodata("q3kShiftQ", q)
	q3kShiftH = rodata("q3kShiftH", hh)
	q3kScaleIdx = rodata("q3kScaleIdx", idx)
}

// q3KScales returns the 16 signed 6-bit scales of the Q3_K block at x as int16
// in a ymm: low 4 bits from the low (j < 8) or high nibble of byte j%8, top 2
// bits from byte 8+j%4 at bit 2·(j/4), minus 32. It reads only the 12 scale bytes.
func q3KScales(x GPVirtual, m4 Op) VecVirtual {
	lo := XMM()
	VMOVQ(Mem{Base: x, Disp: 96}, lo)
	lh := XMM()
	VPSRLW(U8(4), lo, lh)
	VPUNPCKLQDQ(lh, lo, lo) // bytes 0-7, then their high halves
	vpand(m4, lo, lo)
	hb := XMM()
	VMOVD(Mem{Base: x, Disp: 104}, hb)
	VPSHUFB(q3kSpread4, hb, hb)  // byte 8+j%4 at j
	VPSRLVD(q3kTopShift, hb, hb) // dword g shifted by 2g
	vpand(threes, hb, hb)
	VPSLLW(U8(4), hb, hb)
	vpor(hb, lo, lo)
	VPSUBB(thirtyTwos, lo, lo)
	s := YMM()
	VPMOVSXBW(lo, s)
	return s
}

// dotQ3KAVX2 emits the Q3_K kernel for AVX2 in llama.cpp's order
// (ggml_vec_dot_q3_K_q8_K, dotQ3KRowGeneric): per 32 weights (128h+32k+l) the
// unsigned u = (qs[32h+l] >> 2k) & 3 | 4·(bit 4h+k of hmask[l]) times the
// activations (VPMADDUBSW) less 4 times them (the quants are u − 4), each pair
// of products exact in int16, then times their 16 weights' signed scale
// (VPMADDWD): 8 int32 lanes, lane k the products at positions 4k..4k+3 of each
// 32-element chunk, as llama.cpp's; per block the lanes converted and added
// times y.d·f16(x.d) to 8 float lanes in one fused multiply-add, summed at the
// end as sum8. With tokens > 1 the kernel for that many activation rows
// (stride bytes apart) at once, each unpacked chunk meeting every token, each
// token with the single-token kernel's operations and bits.
func dotQ3KAVX2(tokens int) {
	if tokens == 1 {
		TEXT("dotQ3KAVX2", NOSPLIT, "func(x, y *byte, n int) float32")
		Pragma("noescape")
		Doc("dotQ3KAVX2 is the dot product of n Q3_K blocks at x with n q8KBlocks at y.")
	} else {
		name := fmt.Sprintf("dotQ3KAVX2x%d", tokens)
		TEXT(name, NOSPLIT, "func(x, y *byte, n, stride int, out *float32)")
		Pragma("noescape")
		Doc(fmt.Sprintf("%s sets out[t] = dotQ3KAVX2(x, y+t·stride, n) for t < %d.", name, tokens))
	}
	x, y, n := params3()
	ys := tokenRows(y, tokens)
	facc := make([]VecVirtual, tokens)
	for t := range facc {
		facc[t] = YMM()
		VXORPS(facc[t], facc[t], facc[t])
	}
	m4s := YMM()
	VMOVDQU(fours, m4s)

	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	s16 := q3KScales(x, nibbleMask)
	hm := YMM()
	VMOVDQU(Mem{Base: x}, hm)
	acc := make([]VecVirtual, tokens)
	for t := range acc {
		acc[t] = YMM()
		VPXOR(acc[t], acc[t], acc[t])
	}
	for h := 0; h < 2; h++ {
		sh := YMM()
		VPERMQ(U8([]int{0x44, 0xee}[h]), s16, sh) // scales 8h..8h+7 in both lanes
		for k := 0; k < 4; k++ {
			q := YMM()
			VMOVDQU(Mem{Base: x, Disp: 32 + 32*h}, q)
			if k > 0 {
				VPSRLW(U8(2*k), q, q)
			}
			VPAND(threes, q, q)
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
			VPAND(m4s, hb, hb)
			VPOR(hb, q, q)
			s := YMM()
			VPSHUFB(q2kShuf.Offset(32*k), sh, s)
			for t, yt := range ys {
				a := Mem{Base: yt, Disp: q8KQS + 128*h + 32*k}
				p, p4 := YMM(), YMM()
				VPMADDUBSW(a, q, p)
				VPMADDUBSW(a, m4s, p4)
				VPSUBW(p4, p, p)
				VPMADDWD(s, p, p)
				VPADDD(p, acc[t], acc[t])
			}
		}
	}
	g := GP32()
	MOVWLZX(Mem{Base: x, Disp: 108}, g)
	dd := XMM()
	VMOVD(g, dd)
	VCVTPH2PS(dd, dd)
	for t, yt := range ys {
		f := YMM()
		VCVTDQ2PS(acc[t], f)
		d := XMM()
		VMULSS(Mem{Base: yt}, dd, d) // y.d·f16(x.d)
		dy := YMM()
		VBROADCASTSS(d, dy)
		VFMADD231PS(dy, f, facc[t])
	}
	ADDQ(U32(q3KSize), x)
	for _, yt := range ys {
		ADDQ(U32(q8KSize), yt)
	}
	DECQ(n)
	JMP(LabelRef("loop"))

	Label("done")
	storeLaneSums(facc)
}

// dotQ3KAVX512 is dotQ3KAVX2 on 64 bytes at a time (AVX-512BW), for tokens
// activation rows (stride bytes apart): chunks 2p and 2p+1 of half h in one
// zmm (the 32 quant bytes broadcast and shifted per 256-bit half, the hmask bits
// likewise, each 128-bit lane's scale by VPERMW), int32 lane i + 8 then the
// lane k = i mod 8 of dotQ3KAVX2's, the two halves added at the block's end
// (exact integers), so each token gets the one-token kernel's bits.
func dotQ3KAVX512(tokens int) {
	evex = true
	defer func() { evex = false }()
	name := fmt.Sprintf("dotQ3KAVX512x%d", tokens)
	TEXT(name, NOSPLIT, "func(x, y *byte, n, stride int, out *float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets out[t] = dotQ3KAVX2(x, y+t·stride, n) for t < %d.", name, tokens))
	x, y, n := params3()
	ys := tokenRows(y, tokens)
	facc := make([]VecVirtual, tokens)
	for t := range facc {
		facc[t] = YMM()
		VXORPS(facc[t], facc[t], facc[t])
	}
	f4 := ZMM()
	VMOVDQU64(fours, f4)
	var idx [4]VecVirtual
	for i := range idx {
		idx[i] = ZMM()
		VMOVDQU64(q3kScaleIdx.Offset(64*i), idx[i])
	}

	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	s16 := q3KScales(x, nibbleMask)
	hm := [2]VecVirtual{ZMM(), ZMM()}
	VBROADCASTI64X4(Mem{Base: x}, hm[1])
	VPSLLW(U8(2), hm[1], hm[0])
	acc := make([]VecVirtual, tokens)
	for t := range acc {
		acc[t] = ZMM()
		VPXORD(acc[t], acc[t], acc[t])
	}
	for h := 0; h < 2; h++ {
		qq := ZMM()
		VBROADCASTI64X4(Mem{Base: x, Disp: 32 + 32*h}, qq)
		for p := 0; p < 2; p++ {
			u := ZMM()
			VPSRLVW(q3kShiftQ.Offset(64*p), qq, u)
			VPANDD(q3kThrees, u, u)
			hb := ZMM()
			VPSRLVW(q3kShiftH.Offset(64*(2*h+p)), hm[h], hb)
			VPANDD(f4, hb, hb)
			VPORD(hb, u, u)
			sc := ZMM()
			VPERMW(s16.AsZ(), idx[2*h+p], sc)
			for t, yt := range ys {
				a := Mem{Base: yt, Disp: q8KQS + 128*h + 64*p}
				pr, p4 := ZMM(), ZMM()
				VPMADDUBSW(a, u, pr)
				VPMADDUBSW(a, f4, p4)
				VPSUBW(p4, pr, pr)
				VPMADDWD(sc, pr, pr)
				VPADDD(pr, acc[t], acc[t])
			}
		}
	}
	g := GP32()
	MOVWLZX(Mem{Base: x, Disp: 108}, g)
	dd := XMM()
	VMOVD(g, dd)
	VCVTPH2PS(dd, dd)
	for t, yt := range ys {
		hi := YMM()
		VEXTRACTI64X4(U8(1), acc[t], hi)
		VPADDD(hi, acc[t].AsY(), hi)
		f := YMM()
		VCVTDQ2PS(hi, f)
		d := XMM()
		VMULSS(Mem{Base: yt}, dd, d) // y.d·f16(x.d)
		dy := YMM()
		VBROADCASTSS(d, dy)
		VFMADD231PS(dy, f, facc[t])
	}
	ADDQ(U32(q3KSize), x)
	for _, yt := range ys {
		ADDQ(U32(q8KSize), yt)
	}
	DECQ(n)
	JMP(LabelRef("loop"))

	Label("done")
	storeLaneSums(facc)
}
