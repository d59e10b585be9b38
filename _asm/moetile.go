package main

import (
	"bytes"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The few-token Q4_K tile: 4 weight rows × 4 tokens at once (16 (row, token)
// pairs, pair p = 4t + r in a vector's lane p). A mixture of experts' products are
// short (an expert gets 1-7 tokens of a 16-sequence decode step, 20-40 of a
// prompt's), and the one-row kernels for 4 tokens spend most of their time on
// the row's unpacking and on reductions of four pairs in vectors of sixteen
// lanes; here the four rows' scales are unpacked in one vector, and the block's
// reduction and float operations take all sixteen lanes. Each pair's integer
// sums are exact and its float operations those of the one-row kernels, lane by
// lane: every output has the reference's bits.

var (
	q4kGatherLow4, q4kGatherTop4, q4kMaskLow4, q4kMaskHigh4 Mem
	q4kScaleWords, q4kMinWords, q4kHalfPerm, q4kTokLanes    Mem
)

func moeTileConstants() {
	x4 := func(b []byte) []byte { return bytes.Repeat(b, 4) }
	q4kGatherLow4 = rodata("q4kGatherLow4", x4([]byte{0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11}))
	q4kGatherTop4 = rodata("q4kGatherTop4", x4([]byte{0x80, 0x80, 0x80, 0x80, 0, 1, 2, 3, 0x80, 0x80, 0x80, 0x80, 4, 5, 6, 7}))
	q4kMaskLow4 = rodata("q4kMaskLow4", x4([]byte{63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0}))
	q4kMaskHigh4 = rodata("q4kMaskHigh4", x4([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15}))
	// q4kScaleWords: 4 masks of 64 bytes over a lane holding one row's unpacked
	// scales (bytes 0-7) and mins (8-15); mask j makes the int16 scale 2j in the
	// low 256 bits and 2j+1 in the high 256 bits (0x80: a zero byte).
	var b []byte
	for j := 0; j < 4; j++ {
		b = append(b, bytes.Repeat([]byte{byte(2 * j), 0x80}, 16)...)
		b = append(b, bytes.Repeat([]byte{byte(2*j + 1), 0x80}, 16)...)
	}
	q4kScaleWords = rodata("q4kScaleWords", b)
	// q4kMinWords: each min as an int16 twice (the two bsums of its sub-block),
	// mins 0-3 in the low 128 bits, 4-7 in the high.
	b = nil
	for k := 0; k < 8; k++ {
		b = append(b, byte(8+k), 0x80, byte(8+k), 0x80)
	}
	q4kMinWords = rodata("q4kMinWords", b)
	// q4kHalfPerm: the d and dmin halves of four rows' dwords, d0-d3 then
	// dmin0-dmin3.
	q4kHalfPerm = rodata("q4kHalfPerm", []byte{0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15})
	// q4kTokLanes: VPERMILPS control giving 128-bit lane t element t's value.
	b = nil
	for t := 0; t < 4; t++ {
		for i := 0; i < 4; i++ {
			b = append(b, byte(t), 0, 0, 0)
		}
	}
	q4kTokLanes = rodata("q4kTokLanes", b)
}

// dotQ4KTile44 emits dotQ4KAVX512r4t4: out[t·os + r] = dotQ4KAVX512(row r, token
// t) for 4 rows × 4 tokens (tileText's parameters).
func dotQ4KTile44() {
	evex = true
	defer func() { evex = false }()
	const R, T = 4, 4
	tileText("dotQ4KAVX512r4t4", R, T, "dotQ4KAVX512")
	rows, toks, yd, yds, nb := tileParams(R, T)
	sum := ZMM()
	VPXORD(sum, sum, sum)
	m4, shr4 := ZMM(), ZMM()
	VMOVDQU64(nibbleMask, m4)
	VMOVDQU64(q4kShiftHigh, shr4)

	Label("loop")
	TESTQ(nb, nb)
	JZ(LabelRef("done"))
	acc := make([]VecVirtual, R*T) // pair t·R+r
	for p := range acc {
		acc[p] = ZMM()
		VPXORD(acc[p], acc[p], acc[p])
	}
	prefetchNext(rows, R, 0, 1, 2)
	// The four rows' scales and mins, row r in 128-bit lane r (q4KScales on
	// four lanes).
	raw4 := ZMM()
	VMOVDQU32(rows.at(0).Offset(4), raw4.AsX())
	for r := 1; r < R; r++ {
		VINSERTI32X4(U8(r), rows.at(r).Offset(4), raw4, raw4)
	}
	u := ZMM()
	VPSHUFB(q4kGatherLow4, raw4, u)
	t4 := ZMM()
	VPSRLW(U8(4), u, t4)
	VPANDD(q4kMaskHigh4, t4, t4)
	VPANDD(q4kMaskLow4, u, u)
	VPORD(t4, u, u)
	VPSHUFB(q4kGatherTop4, raw4, raw4)
	VPSRLW(U8(2), raw4, raw4)
	VPANDD(bits45Mask, raw4, raw4)
	VPORD(raw4, u, u)
	for r := 0; r < R; r++ {
		xr := rows.at(r)
		br := ZMM()
		VSHUFI64X2(U8(0x55*r), u, u, br) // row r's lane in every lane
		for j := 0; j < 4; j++ {
			qq := ZMM()
			VBROADCASTI64X4(xr.Offset(16+32*j), qq)
			VPSRLVW(shr4, qq, qq)
			VPANDD(m4, qq, qq)
			s := ZMM()
			VPSHUFB(q4kScaleWords.Offset(64*j), br, s)
			for t := 0; t < T; t++ {
				p := ZMM()
				VPMADDUBSW(toks.at(t).Offset(q8KQS+64*j), qq, p)
				raw("VPDPWSSD", s, p, acc[t*R+r])
			}
		}
	}
	// Each pair: [its 16 product lanes folded to 8 | its 8 min·bsum lanes].
	for r := 0; r < R; r++ {
		br := YMM()
		VSHUFI64X2(U8(0x55*r), u, u, br.AsZ())
		mw := YMM()
		VPSHUFB(q4kMinWords, br, mw)
		for t := 0; t < T; t++ {
			a := acc[t*R+r]
			h := YMM()
			VEXTRACTI64X4(U8(1), a, h)
			VPADDD(a.AsY(), h, h)
			m8 := YMM()
			VPMADDWD(toks.at(t).Offset(q8KBsums), mw, m8)
			VINSERTI64X4(U8(1), m8, h.AsZ(), a)
		}
	}
	is, ms := reducePairs(acc)
	// Token scales: lane 4t+r holds token t's y.d.
	ydv := ZMM()
	VMOVUPS(Mem{Base: yd}, ydv.AsX())
	VSHUFF32X4(U8(0), ydv, ydv, ydv)
	VPERMILPS(q4kTokLanes, ydv, ydv)
	// Row scales: lane 4t+r holds row r's f16 d (dmin), as float32.
	hv := XMM()
	VMOVD(rows.at(0), hv)
	for r := 1; r < R; r++ {
		VPINSRD(U8(r), rows.at(r), hv, hv)
	}
	VPSHUFB(q4kHalfPerm, hv, hv)
	f := ZMM()
	VCVTPH2PS(hv, f.AsY())
	d, dm := ZMM(), ZMM()
	VSHUFF32X4(U8(0x00), f, f, d)
	VSHUFF32X4(U8(0x55), f, f, dm)
	// sum += (f16(x.d)·y.d)·isum − (f16(x.dmin)·y.d)·msum, lane by lane.
	VMULPS(ydv, d, d)
	VMULPS(ydv, dm, dm)
	VCVTDQ2PS(is, is)
	VCVTDQ2PS(ms, ms)
	VMULPS(is, d, d)
	VMULPS(ms, dm, dm)
	VSUBPS(dm, d, d)
	VADDPS(d, sum, sum)

	rows.advance(q4KSize)
	toks.advance(q8KSize)
	ADDQ(yds, yd)
	DECQ(nb)
	JMP(LabelRef("loop"))

	Label("done")
	out, os := GP64(), GP64()
	Load(Param("out"), out)
	Load(Param("os"), os)
	SHLQ(U8(2), os)
	for t := 0; t < T; t++ {
		x := XMM()
		VEXTRACTF32X4(U8(t), sum, x)
		VMOVUPS(x, Mem{Base: out})
		if t < T-1 {
			ADDQ(os, out)
		}
	}
	VZEROUPPER()
	RET()
}

// dotQ4KTile16m emits dotQ4KAVX512r1t16m: dotQ4KAVX512r1t16 (one row × 16
// tokens) with the mins' products from the tokens' bsums laid out by sub-block
// pair (bs + b·4·gs + i·gs + 4t: token t's two int16 sums of sub-blocks 2i and
// 2i+1, acts.bsT), so that they take four multiply-adds for all sixteen tokens,
// and each pair's product lanes go whole into one transposed reduction: no
// per-pair folding, about a fifth fewer instructions per block. The same integer
// sums and float operations: the reference's bits.
func dotQ4KTile16m() {
	evex = true
	defer func() { evex = false }()
	const T = 16
	TEXT("dotQ4KAVX512r1t16m", NOSPLIT, "func(x *byte, y *byte, ys int, yd *float32, yds int, bs *int32, gs int, nb int, out *float32, os int)")
	Pragma("noescape")
	Doc("dotQ4KAVX512r1t16m sets out[t·os] = dotQ4KAVX512(x, y + t·ys, nb) for t < 16; yd + b·yds",
		"holds y.d of block b of the tokens, one float32 per token, and bs + b·4·gs + i·gs + 4t",
		"token t's two int16 sums of the activations of sub-blocks 2i and 2i+1 of block b.")
	x, toks, yd, yds, bs, gs, gs3, nb := q4KTokenArgs(T)
	sum := ZMM()
	VPXORD(sum, sum, sum)
	m4, shr4 := ZMM(), ZMM()
	VMOVDQU64(nibbleMask, m4)
	VMOVDQU64(q4kShiftHigh, shr4)

	Label("loop")
	TESTQ(nb, nb)
	JZ(LabelRef("done"))
	acc := make([]VecVirtual, T)
	for p := range acc {
		acc[p] = ZMM()
		VPXORD(acc[p], acc[p], acc[p])
	}
	xr := Mem{Base: x}
	u := q4KScalesAt(xr)
	smw := YMM()
	VPMOVZXBW(u, smw)
	sc := ZMM()
	VSHUFI64X2(U8(0), smw.AsZ(), smw.AsZ(), sc)
	for j := 0; j < 4; j++ {
		qq := ZMM()
		VBROADCASTI64X4(xr.Offset(16+32*j), qq)
		VPSRLVW(shr4, qq, qq)
		VPANDD(m4, qq, qq)
		s := ZMM()
		VPSHUFB(q4kShuf512.Offset(64*j), sc, s)
		for t := 0; t < T; t++ {
			p := ZMM()
			VPMADDUBSW(toks.at(t).Offset(q8KQS+64*j), qq, p)
			raw("VPDPWSSD", s, p, acc[t])
		}
	}
	// msum for the 16 tokens: Σ_i (min 2i, min 2i+1) · their dword at bs + i·gs.
	mins := ZMM()
	VSHUFI64X2(U8(0x55), smw.AsZ(), smw.AsZ(), mins) // the mins' words (lane 1) in every lane
	ms := ZMM()
	VPXORD(ms, ms, ms)
	for i := 0; i < 4; i++ {
		mb := ZMM()
		VPSHUFD(U8(0x55*i), mins, mb)
		var m Mem
		switch i {
		case 0:
			m = Mem{Base: bs}
		case 1:
			m = Mem{Base: bs, Index: gs, Scale: 1}
		case 2:
			m = Mem{Base: bs, Index: gs, Scale: 2}
		default:
			m = Mem{Base: bs, Index: gs3, Scale: 1}
		}
		raw("VPDPWSSD", m, mb, ms)
	}
	// isum: each token's 16 lanes summed, token t in lane t.
	is := reduceTokens(acc)
	ydv := ZMM()
	VMOVUPS(Mem{Base: yd}, ydv)
	d := tileRowScales(rowSet{bases: []GPVirtual{x}}, 1, 0)
	dm := tileRowScales(rowSet{bases: []GPVirtual{x}}, 1, 2)
	VMULPS(ydv, d, d)
	VMULPS(ydv, dm, dm)
	VCVTDQ2PS(is, is)
	VCVTDQ2PS(ms, ms)
	VMULPS(is, d, d)
	VMULPS(ms, dm, dm)
	VSUBPS(dm, d, d)
	VADDPS(d, sum, sum)

	ADDQ(U32(q4KSize), x)
	toks.advance(q8KSize)
	ADDQ(yds, yd)
	LEAQ(Mem{Base: bs, Index: gs, Scale: 4}, bs)
	DECQ(nb)
	JMP(LabelRef("loop"))

	Label("done")
	tileStore(sum, 1, T)
}

// reduceTokens returns the int32 sums of the 16 lanes of each of z[0..n-1]
// (n ≤ 16), z[t]'s in lane t; the lanes from n on are zero.
func reduceTokens(z []VecVirtual) VecVirtual {
	zs := make([]VecVirtual, 16) // nil: a zero vector, never built
	copy(zs, z)
	var zero VecVirtual
	or0 := func(v VecVirtual) VecVirtual {
		if v != nil {
			return v
		}
		if zero == nil {
			zero = ZMM()
			VPXORD(zero, zero, zero)
		}
		return zero
	}
	// step combines pairs (v[k], v[k+1]) with lo and hi, adding the results.
	step := func(v []VecVirtual, lo, hi func(b, a, dst VecVirtual)) []VecVirtual {
		var out []VecVirtual
		for k := 0; k < len(v); k += 2 {
			if v[k] == nil && v[k+1] == nil {
				out = append(out, nil)
				continue
			}
			a, b := ZMM(), ZMM()
			lo(or0(v[k+1]), or0(v[k]), a)
			hi(or0(v[k+1]), or0(v[k]), b)
			VPADDD(b, a, a)
			out = append(out, a)
		}
		return out
	}
	op := func(f func(ops ...Op)) func(b, a, dst VecVirtual) {
		return func(b, a, dst VecVirtual) { f(b, a, dst) }
	}
	shuf := func(imm uint8) func(b, a, dst VecVirtual) {
		return func(b, a, dst VecVirtual) { VSHUFI32X4(U8(imm), b, a, dst) }
	}
	s := step(zs, op(VPUNPCKLDQ), op(VPUNPCKHDQ))
	r := step(s, op(VPUNPCKLQDQ), op(VPUNPCKHQDQ)) // 128-bit lane L of r[k]: z[4k..4k+3]'s sums over their lane L
	q := step(r, shuf(0x88), shuf(0xdd))           // lanes: r[2k] over lanes 0+1, 2+3, r[2k+1] over 0+1, 2+3
	return step(q, shuf(0x88), shuf(0xdd))[0]      // r0 L01, r1 L01, … + r0 L23, …
}

var q4kPermIdx, q4kShiftHalves Mem

func vnniTileConstants() {
	// q4kPermIdx: 4 VPERMI2B index vectors over a Q4_K block's 128 quant bytes;
	// vector j puts bytes 32g+8j … 32g+8j+7 at 16g and again at 16g+8 (g < 4):
	// the eight quants 8j … 8j+7 of sub-blocks 2g (low nibbles) and 2g+1 (high).
	var b []byte
	for j := 0; j < 4; j++ {
		for g := 0; g < 4; g++ {
			for h := 0; h < 2; h++ {
				for i := 0; i < 8; i++ {
					b = append(b, byte(32*g+8*j+i))
				}
			}
		}
	}
	q4kPermIdx = rodata("q4kPermIdx", b)
	// q4kShiftHalves: word shifts 0 for the first 8 bytes of each 16, 4 for the
	// second 8 (their high nibbles).
	b = nil
	for g := 0; g < 4; g++ {
		b = append(b, bytes.Repeat([]byte{0, 0}, 4)...)
		b = append(b, bytes.Repeat([]byte{4, 0}, 4)...)
	}
	q4kShiftHalves = rodata("q4kShiftHalves", b)
}
