package main

import (
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// dotIQ1MAVX512 emits the IQ1_M decoding kernel for AVX-512 (BW, BMI2):
// dotIQ1MAVX2's integer sums and float steps, with the block's per-group work
// done once per block in vectors instead of per sub-block in general-purpose
// registers. Per block: the 32 grid indices (qs | (qh nibble & 7)<<8: the qh
// bytes widened, each repeated by VPERMW and shifted by 0 or 4 per word) into
// a stack array, the shifts' signs (bit 3 of each nibble) into a 32-bit mask
// (VPTESTMW), and for each 64 values the pair-sum multipliers: 8·ls for the
// grid's products and ±ls − 8·ls for the activations' own pair sums. Per 64
// values: the 8 grid entries looked up, plus one (0, 1 or 2: unsigned), times
// the quants by VPMADDUBSW, the quants' pair sums likewise by ones, so that
// ls8·Σ(g+1)q + (±ls − ls8)·Σq = ls8·Σg·q ± ls·Σq: 8·sumi1 + sumi2 exactly,
// then the block's float step float(it)·0.125·(d·y.d), dotIQ1MAVX2's.
func dotIQ1MAVX512() {
	evex = true
	defer func() { evex = false }()
	var dup, qhShift, scShift []byte
	for k := 0; k < 32; k++ {
		dup = append(dup, byte(k/2), 0)
		qhShift = append(qhShift, byte(4*(k%2)), 0)
		scShift = append(scShift, byte(3*(k/8)), 0)
	}
	dupIdx := rodata("iq1mDupIdx", dup)
	qhShifts := rodata("iq1mQhShifts", qhShift)
	scShifts := rodata("iq1mScShifts", scShift)

	TEXT("dotIQ1MAVX512", NOSPLIT, "func(x, y *byte, n int, grid *byte) float32")
	Pragma("noescape")
	Doc("dotIQ1MAVX512 is dotIQ1MAVX2 with AVX-512 (the same bits).")
	x, y, n, grid := latticeParams()
	idx := AllocLocal(64)
	w := func(v uint32) VecVirtual { // a zmm of the word v
		g, z := GP32(), ZMM()
		MOVL(U32(v), g)
		VPBROADCASTW(g, z)
		return z
	}
	ones, sevens, eights := w(1), w(7), w(8)
	onesB := ZMM()
	{
		g := GP32()
		MOVL(U32(0x01010101), g)
		VPBROADCASTD(g, onesB)
	}
	zero, dupV := ZMM(), ZMM()
	VPXORD(zero, zero, zero)
	VMOVDQU64(dupIdx, dupV)
	nib := GP64()
	MOVQ(U64(0x11111111), nib)
	eighth := XMM()
	{
		g := GP32()
		MOVL(U32(math.Float32bits(0.125)), g)
		VMOVD(g, eighth)
	}
	sum := XMM()
	VXORPS(sum, sum, sum)

	Label("iq1m512_loop")
	TESTQ(n, n)
	JZ(LabelRef("iq1m512_done"))
	// The 32 grid indices, and the shifts' signs.
	qsw, qhw, t := ZMM(), ZMM(), ZMM()
	VPMOVZXBW(Mem{Base: x}, qsw)
	VPMOVZXBW(Mem{Base: x, Disp: 32}, qhw.AsY())
	VPERMW(qhw, dupV, t)
	VPSRLVW(qhShifts, t, t)
	kneg := K()
	VPTESTMW(eights, t, kneg)
	VPANDD(sevens, t, t)
	VPSLLW(U8(8), t, t)
	VPORD(qsw, t, t)
	VMOVDQU64(t, idx)
	neg := GP32()
	KMOVD(kneg, neg)
	// The multipliers of 64 values z: words 32z+j take scale 4z + j/8, group 8z + j/4.
	var ls8, cp [4]VecVirtual
	for z := 0; z < 4; z++ {
		s := ZMM()
		VPBROADCASTW(Mem{Base: x, Disp: 48 + 2*z}, s)
		VPSRLVW(scShifts, s, s)
		VPANDD(sevens, s, s)
		VPADDW(s, s, s)
		VPADDW(ones, s, s) // ls
		ls8[z] = ZMM()
		VPSLLW(U8(3), s, ls8[z])
		m := GP32()
		MOVL(neg, m)
		if z > 0 {
			SHRL(U8(8*z), m)
		}
		ANDL(U32(0xff), m)
		PDEPL(nib.As32(), m, m)
		IMUL3L(U32(15), m, m)
		kz := K()
		KMOVD(m, kz)
		VPSUBW(s, zero, kz, s) // ±ls
		cp[z] = ZMM()
		VPSUBW(ls8[z], s, cp[z])
	}
	acc := ZMM()
	VPXORD(acc, acc, acc)
	for z := 0; z < 4; z++ {
		half := func(h int) VecVirtual {
			return gather8x(grid, func(l int) GPVirtual {
				r := GP64()
				MOVWQZX(idx.Offset(2*(8*z+4*h+l)), r)
				return r
			})
		}
		lo := half(0)
		hi := half(1)
		g := ZMM()
		VINSERTI64X4(U8(1), hi, lo.AsZ(), g)
		VPADDB(onesB, g, g) // g+1: 0, 1 or 2
		q := ZMM()
		VMOVDQU64(Mem{Base: y, Disp: q8KQS + 64*z}, q)
		p1, pq := ZMM(), ZMM()
		VPMADDUBSW(q, g, p1)
		VPMADDUBSW(q, onesB, pq)
		VPMADDWD(ls8[z], p1, p1)
		VPMADDWD(cp[z], pq, pq)
		VPADDD(p1, acc, acc)
		VPADDD(pq, acc, acc)
	}
	// The f16 scale: the top nibbles of the four scale words.
	d16, u := GP64(), GP64()
	MOVWQZX(Mem{Base: x, Disp: 48}, d16)
	SHRQ(U8(12), d16)
	for k := 1; k < 4; k++ {
		MOVWQZX(Mem{Base: x, Disp: 48 + 2*k}, u)
		if k < 3 {
			SHRQ(U8(12-4*k), u)
		}
		ANDQ(U32(0xf000>>(12-4*k)), u)
		ORQ(u, d16)
	}
	d0 := XMM()
	VMOVD(d16.As32(), d0)
	VCVTPH2PS(d0, d0)
	d := XMM()
	VMULSS(Mem{Base: y}, d0, d)
	h8 := YMM()
	VEXTRACTI64X4(U8(1), acc, h8)
	VPADDD(h8, acc.AsY(), h8)
	s := hsumIntX(h8)
	VMULSS(eighth, s, s)
	VMULSS(s, d, d)
	VADDSS(d, sum, sum)
	ADDQ(U32(q8KSize), y)
	ADDQ(U32(56), x)
	DECQ(n)
	JMP(LabelRef("iq1m512_loop"))

	Label("iq1m512_done")
	storeSums([]VecVirtual{sum})
}
