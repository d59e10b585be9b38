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
// qh nibbles in words (the qh bytes widened, each repeated by VPERMW and
// shifted by 0 or 4 per word), the 32 grid indices qs | (nibble & 7)<<8 looked
// up by gather32f, the shifts' signs (bit 3 of each nibble) as -1/0 words, the
// 16 scales in a ymm
// of words, and, spread from these by VPERMW for each 64 values, the pair-sum
// multipliers: 8·ls for the grid's products and
// ±ls − 8·ls for the activations' own pair sums. Per 64 values: the 8 grid
// entries plus one (0, 1 or 2: unsigned) times the quants by VPMADDUBSW, the
// quants' pair sums likewise by ones, so that ls8·Σ(g+1)q + (±ls − ls8)·Σq =
// ls8·Σg·q ± ls·Σq: 8·sumi1 + sumi2 exactly, then the block's float step
// float(it)·0.125·(d·y.d), dotIQ1MAVX2's.
func dotIQ1MAVX512r() {
	var dup, qhShift, scDup, scShift, sgPerm []byte
	for k := 0; k < 32; k++ {
		dup = append(dup, byte(k/2), 0)
		qhShift = append(qhShift, byte(4*(k%2)), 0)
	}
	for h := 0; h < 16; h++ {
		scDup = append(scDup, byte(h/4), 0)
		scShift = append(scShift, byte(3*(h%4)), 0)
	}
	for z := 0; z < 4; z++ {
		for j := 0; j < 32; j++ {
			sgPerm = append(sgPerm, byte(8*z+j/4), 0)
		}
	}
	dupIdx := rodata("iq1mDupIdx", dup)
	qhShifts := rodata("iq1mQhShifts", qhShift)
	scDups := rodata("iq1mScDup", scDup)
	scShifts := rodata("iq1mScShifts", scShift)
	sgPerms := rodata("iq1mSgPerm", sgPerm)

	latticeDec512Step("dotIQ1MAVX512r", "IQ1M", 56, func(c *dec512) decBlock512 {
		sevens := wordConst(7)
		onesB := ZMM()
		{
			g := GP32()
			MOVL(U32(0x01010101), g)
			VPBROADCASTD(g, onesB)
		}
		dupV, scDupV, scShiftV := ZMM(), YMM(), YMM()
		VMOVDQU64(dupIdx, dupV)
		VMOVDQU64(scDups, scDupV)
		VMOVDQU64(scShifts, scShiftV)
		var sgPermV [4]VecVirtual
		for z := range sgPermV {
			sgPermV[z] = ZMM()
			VMOVDQU64(sgPerms.Offset(64*z), sgPermV[z])
		}
		return func(x, y, grid GPVirtual, acc VecVirtual) {
			// Word g of nb: group g's qh nibble.
			qhw, nb := ZMM(), ZMM()
			VPMOVZXBW(Mem{Base: x, Disp: 32}, qhw.AsY())
			VPERMW(qhw, dupV, nb)
			VPSRLVW(qhShifts, nb, nb)
			// The 32 grid indices in the words of a zmm, moved out four at
			// a time.
			qsw, idx := ZMM(), ZMM()
			VPMOVZXBW(Mem{Base: x}, qsw)
			VPANDD(sevens, nb, idx)
			VPSLLW(U8(8), idx, idx)
			VPORD(qsw, idx, idx)
			g := gather32f(grid, quadIndex(vecQuads(idx)))
			// The shifts' signs: word g of sg is -1 where group g's is
			// negative (bit 3 of its nibble).
			sg := ZMM()
			VPSLLW(U8(12), nb, sg)
			VPSRAW(U8(15), sg, sg)
			// The 16 scales ls = 2s+1 in the words of a ymm.
			sw, ls16 := XMM(), YMM()
			VMOVQ(Mem{Base: x, Disp: 48}, sw)
			VPERMW(sw.AsY(), scDupV, ls16)
			VPSRLVW(scShiftV, ls16, ls16)
			VPANDD(sevens.AsY(), ls16, ls16)
			VPADDW(ls16, ls16, ls16)
			VPORD(c.ones16.AsY(), ls16, ls16)
			for z := 0; z < 4; z++ {
				// The multipliers of 64 values z: 8·ls for the grid's
				// pair sums, ±ls − 8·ls for the quants' own.
				ls, ls8, m, cp := ZMM(), ZMM(), ZMM(), ZMM()
				VPERMW(ls16.AsZ(), c.scPerm[z], ls)
				VPSLLW(U8(3), ls, ls8)
				VPERMW(sg, sgPermV[z], m)
				VPXORD(m, ls, cp)
				VPSUBW(m, cp, cp) // ±ls
				VPSUBW(ls8, cp, cp)
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
