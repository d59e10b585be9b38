package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// dotIQ1MAVX512r emits the IQ1_M decoding kernel for AVX-512 (BW, BMI2, VNNI)
// in latticeDec512Step's frame (many rows a call): dotIQ1MAVX2's integer sums
// and float steps, with the block's per-group work done once per block in
// vectors instead of per sub-block in general-purpose registers. Per block: the
// 32 grid indices (qs | (qh nibble & 7)<<8: the qh bytes widened, each
// repeated by VPERMW and shifted by 0 or 4 per word) looked up by gather32f, the
// shifts' signs (bit 3 of each nibble) into a 32-bit mask (VPTESTMW), and for
// each 64 values the pair-sum multipliers: 8·ls for the grid's products and
// ±ls − 8·ls for the activations' own pair sums. Per 64 values: the 8 grid
// entries plus one (0, 1 or 2: unsigned) times the quants by VPMADDUBSW, the
// quants' pair sums likewise by ones, so that ls8·Σ(g+1)q + (±ls − ls8)·Σq =
// ls8·Σg·q ± ls·Σq: 8·sumi1 + sumi2 exactly, then the block's float step
// float(it)·0.125·(d·y.d), dotIQ1MAVX2's.
func dotIQ1MAVX512r() {
	var dup, qhShift, scShift []byte
	for k := 0; k < 32; k++ {
		dup = append(dup, byte(k/2), 0)
		qhShift = append(qhShift, byte(4*(k%2)), 0)
		scShift = append(scShift, byte(3*(k/8)), 0)
	}
	dupIdx := rodata("iq1mDupIdx", dup)
	qhShifts := rodata("iq1mQhShifts", qhShift)
	scShifts := rodata("iq1mScShifts", scShift)

	latticeDec512Step("dotIQ1MAVX512r", "IQ1M", 56, func(c *dec512) decBlock512 {
		sevens, eights := wordConst(7), wordConst(8)
		onesB := ZMM()
		{
			g := GP32()
			MOVL(U32(0x01010101), g)
			VPBROADCASTD(g, onesB)
		}
		dupV := ZMM()
		VMOVDQU64(dupIdx, dupV)
		nib := GP64()
		MOVQ(U64(0x11111111), nib)
		return func(x, y, grid GPVirtual, acc VecVirtual) {
			// The 32 grid indices, four a time in the words of a register
			// (PEXT drops the signs' bits, PDEP spreads the rest), and
			// the shifts' signs.
			g := gather32f(grid, quadIndex(func(k int) GPVirtual {
				h, q := GP64(), GP64()
				MOVWLZX(Mem{Base: x, Disp: 32 + 2*k}, h.As32())
				PEXTL(decQHNib, h.As32(), h.As32())
				PDEPQ(decQH3, h, h)
				MOVLQZX(Mem{Base: x, Disp: 4 * k}, q)
				PDEPQ(decLoBytes, q, q)
				ORQ(h, q)
				return q
			}))
			qhw, t := ZMM(), ZMM()
			VPMOVZXBW(Mem{Base: x, Disp: 32}, qhw.AsY())
			VPERMW(qhw, dupV, t)
			VPSRLVW(qhShifts, t, t)
			kneg := K()
			VPTESTMW(eights, t, kneg)
			neg := GP32()
			KMOVD(kneg, neg)
			for z := 0; z < 4; z++ {
				// The multipliers of 64 values z: words 32z+j take scale 4z + j/8, group 8z + j/4.
				s := ZMM()
				VPBROADCASTW(Mem{Base: x, Disp: 48 + 2*z}, s)
				VPSRLVW(scShifts, s, s)
				VPANDD(sevens, s, s)
				VPADDW(s, s, s)
				VPADDW(c.ones16, s, s) // ls
				ls8 := ZMM()
				VPSLLW(U8(3), s, ls8)
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
				VPSUBW(s, c.zero, kz, s) // ±ls
				cp := ZMM()
				VPSUBW(ls8, s, cp)
				VPADDB(onesB, g[z], g[z]) // g+1: 0, 1 or 2
				q := ZMM()
				VMOVDQU64(Mem{Base: y, Disp: q8KQS + 64*z}, q)
				p1, pq := ZMM(), ZMM()
				VPMADDUBSW(q, g[z], p1)
				VPMADDUBSW(q, onesB, pq)
				raw("VPDPWSSD", ls8, p1, acc)
				raw("VPDPWSSD", cp, pq, acc)
			}
		}
	}, func(x, y GPVirtual, s VecVirtual) VecVirtual {
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
		d := XMM()
		VMOVD(d16.As32(), d)
		VCVTPH2PS(d, d)
		VMULSS(Mem{Base: y}, d, d)
		VMULSS(decEighth, s, s)
		VMULSS(s, d, d)
		return d
	})
}
