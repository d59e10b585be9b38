package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

var q4kScaleWordIdx Mem

// q4KPackedConstants emits the constant of dotQ4KTileP's kernels.
func q4KPackedConstants() {
	// q4kScaleWordIdx: VPERMW indexes over the block's scales as words (word k:
	// scale k): for each 128-bit lane l the words s2l s2l s2l+1 s2l+1 twice, the
	// scales of a VPACKSSDW pair of accumulators (lane l: dwords 4l … 4l+3 of
	// one token, then of the other).
	var b []byte
	for l := 0; l < 4; l++ {
		for h := 0; h < 2; h++ {
			for _, k := range []int{0, 0, 1, 1} {
				b = append(b, byte(2*l+k), 0)
			}
		}
	}
	q4kScaleWordIdx = rodata("q4kScaleWordIdx", b)
}

// q4KPrefetch is how far ahead of the block it works on (in bytes) dotQ4KTileP's
// kernels prefetch the row: about 14 blocks. Without it, a CPU profile of a
// 1b k = 8 verification step put half of dotQ4KAVX512r1t9p's samples on the
// loads of the row's quants (Zen5, one thread, loaded).
const q4KPrefetch = 2048

// dotQ4KTileP emits dotQ4KAVX512r1t{T}p, 2 ≤ T ≤ 16: one Q4_K row × T tokens
// with one VPDPBUSD per 64 quants and token. The tokens' quants come permuted
// (acts.q8kP: per block, part j holds quants 8j … 8j+7 of each sub-block in
// turn), the row's by VPERMI2B the same way, so that int32 lanes 2k and 2k+1 of
// a token's accumulator collect sub-block k alone. Mins from bsT as
// dotQ4KAVX512r1t16m; the scales and bsums of tokens T … 15 are not read (a mask
// register keeps their loads to the first T lanes). After a block's VPDPBUSDs every int32 lane of a
// token's accumulator holds 16 products of a quant (0 … 15) and an activation
// (−128 … 127), so it fits an int16: VPACKSSDW packs two tokens' accumulators
// into one vector without saturating, one VPMADDWD applies the scales to both
// (word pairs 2k, 2k+1 of the pack are one token's lanes of one sub-block), and
// the transposed reduction starts from T/2 vectors, the first step a VSHUFPS
// pair per two packs. The same integer sums (exact, so in any order) and the
// same float operations per token: dotQ4KAVX512's bits.
func dotQ4KTileP(T int) {
	evex = true
	defer func() { evex = false }()
	name := fmt.Sprintf("dotQ4KAVX512r1t%dp", T)
	TEXT(name, NOSPLIT, "func(x *byte, y *byte, ys int, yd *float32, yds int, bs *int32, gs int, nb int, out *float32, os int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets out[t·os] = dotQ4KAVX512(x, token t, nb) for t < %d, token t's", name, T),
		"quants of block b permuted (acts.q8kP) at y + t·ys + 256b, y.d at yd + b·yds + 4t, and",
		"bs + b·4·gs + i·gs + 4t its two int16 sums of sub-blocks 2i and 2i+1 of block b; two",
		"tokens' accumulators packed into one vector for the scales and the reduction.")
	x, toks, yd, yds, bs, gs, gs3, nb := q4KTokenArgs(T)
	var k Op
	if T < 16 {
		kk := K()
		g := GP32()
		MOVL(U32(1<<T-1), g)
		KMOVW(g, kk)
		k = kk
	}
	masked := func(m Mem, float bool) VecVirtual {
		v := ZMM()
		switch {
		case k == nil && float:
			VMOVUPS(m, v)
		case k == nil:
			VMOVDQU32(m, v)
		case float:
			VMOVUPS_Z(m, k, v)
		default:
			VMOVDQU32_Z(m, k, v)
		}
		return v
	}
	sum := ZMM()
	VPXORD(sum, sum, sum)
	m4, shr, widx := ZMM(), ZMM(), ZMM()
	VMOVDQU64(nibbleMask, m4)
	VMOVDQU64(q4kShiftHalves, shr)
	VMOVDQU64(q4kScaleWordIdx, widx)
	var zero VecVirtual
	if T%4 != 0 {
		zero = ZMM()
		VPXORD(zero, zero, zero)
	}

	Label("loop")
	TESTQ(nb, nb)
	JZ(LabelRef("done"))
	acc := make([]VecVirtual, T)
	for p := range acc {
		acc[p] = ZMM()
		VPXORD(acc[p], acc[p], acc[p])
	}
	xr := Mem{Base: x}
	// The row's blocks stream from memory once per product (a verification
	// step's weights are read once for all its tokens): prefetch them
	// q4KPrefetch bytes ahead, past the row's end into the next row's (the
	// caller's next), three lines per 144-byte block.
	for o := 0; o < 3; o++ {
		PREFETCHT0(xr.Offset(q4KPrefetch + 64*o))
	}
	qa, qb := ZMM(), ZMM()
	VMOVDQU64(xr.Offset(16), qa)
	VMOVDQU64(xr.Offset(80), qb)
	for j := 0; j < 4; j++ {
		qq := ZMM()
		VMOVDQU64(q4kPermIdx.Offset(64*j), qq)
		VPERMI2B(qb, qa, qq)
		VPSRLVW(shr, qq, qq)
		VPANDD(m4, qq, qq)
		for t := 0; t < T; t++ {
			raw("VPDPBUSD", toks.at(t).Offset(64*j), qq, acc[t])
		}
	}
	is, smw := q4KPackedScaledSums(acc, xr, widx, zero)
	// msum for the T tokens, as dotQ4KAVX512r1t16m.
	mins := ZMM()
	VSHUFI64X2(U8(0x55), smw.AsZ(), smw.AsZ(), mins)
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
		if k == nil {
			raw("VPDPWSSD", m, mb, ms)
		} else {
			raw("VPDPWSSD", masked(m, false), mb, ms)
		}
	}
	ydv := masked(Mem{Base: yd}, true)
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
	toks.advance(256)
	ADDQ(yds, yd)
	LEAQ(Mem{Base: bs, Index: gs, Scale: 4}, bs)
	DECQ(nb)
	JMP(LabelRef("loop"))

	Label("done")
	tileStore(sum, 1, T)
}

// reduceLaneQuads finishes reduceTokens from its third step: r[c] (c < 4, nil
// for none) holds in 128-bit lane L tokens 4c … 4c+3's sums over lane L; the
// result token t's total in lane t (zero: a zero vector, used when r has gaps).
func reduceLaneQuads(r []VecVirtual, zero VecVirtual) VecVirtual {
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
	step := func(v []VecVirtual) []VecVirtual {
		var out []VecVirtual
		for c := 0; c < len(v); c += 2 {
			if v[c] == nil && v[c+1] == nil {
				out = append(out, nil)
				continue
			}
			a, b := ZMM(), ZMM()
			VSHUFI32X4(U8(0x88), or0(v[c+1]), or0(v[c]), a)
			VSHUFI32X4(U8(0xdd), or0(v[c+1]), or0(v[c]), b)
			VPADDD(b, a, a)
			out = append(out, a)
		}
		return out
	}
	return step(step(r))[0]
}

// q4KTokenArgs loads the arguments of the Q4_K kernels of one row against T
// tokens with transposed bsums (dotQ4KAVX512r1t16m, dotQ4KAVX512r1t{T}p): the
// row, the tokens, their y.d and bsums (gs3 = 3·gs) and the block count.
func q4KTokenArgs(T int) (x GPVirtual, toks rowSet, yd, yds, bs, gs, gs3, nb GPVirtual) {
	load := func(name string) GPVirtual {
		r := GP64()
		Load(Param(name), r)
		return r
	}
	x = load("x")
	ys := load("ys")
	toks = newRowSet(load("y"), ys, T)
	yd, yds = load("yd"), load("yds")
	bs, gs = load("bs"), load("gs")
	gs3 = GP64()
	LEAQ(Mem{Base: gs, Index: gs, Scale: 2}, gs3)
	nb = load("nb")
	return
}

// q4KPackedScaledSums applies a Q4_K block's scales (at xr, widx the word
// permutation) to the T packed tokens' accumulators acc and reduces them: is holds
// each token's scaled integer sum in its lane, smw the block's scales and mins
// widened to words (zero: a zeroed register, or nil when T is a multiple of 4).
// dotQ4KTileP and dotQ4KTileP2 end their blocks with it.
func q4KPackedScaledSums(acc []VecVirtual, xr Mem, widx, zero VecVirtual) (is, smw VecVirtual) {
	T := len(acc)
	u := q4KScalesAt(xr)
	smw = YMM()
	VPMOVZXBW(u, smw)
	scw := ZMM()
	VPERMW(smw.AsZ(), widx, scw)
	// Pack tokens 2i and 2i+1 (lanes 4l … 4l+3 of each in 128-bit lane l) and
	// apply the scales: dwords 4l, 4l+1 of the result token 2i's, 4l+2, 4l+3
	// token 2i+1's.
	var packs []VecVirtual
	for t := 0; t < T; t += 2 {
		hi := zero
		if t+1 < T {
			hi = acc[t+1]
		}
		VPACKSSDW(hi, acc[t], acc[t])
		VPMADDWD(scw, acc[t], acc[t])
		packs = append(packs, acc[t])
	}
	// r[c]: 128-bit lane L holds tokens 4c … 4c+3's sums over lane L.
	r := make([]VecVirtual, 4)
	for c := 0; 2*c < len(packs); c++ {
		a, b := packs[2*c], zero
		if 2*c+1 < len(packs) {
			b = packs[2*c+1]
		}
		lo, hi := ZMM(), ZMM()
		VSHUFPS(U8(0x88), b, a, lo) // a0 a2 b0 b2
		VSHUFPS(U8(0xdd), b, a, hi) // a1 a3 b1 b3
		VPADDD(hi, lo, lo)
		r[c] = lo
	}
	return reduceLaneQuads(r, zero), smw
}
