package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// dotQ6KAVX2Tokens emits dotQ6KAVX2x4 or dotQ6KAVX2x8: one Q6_K row against T = 4
// or 8 activation rows (stride bytes apart) on AVX2, for the few-token products
// of a speculative verification step. Each 32-quant chunk of the weight block is
// unpacked once for the T tokens, and each token keeps its own int32 lanes
// (exact: any order of the integer sums gives the same lanes). At the end of a
// block each token's lanes go through q6KLanes, the one-token kernel's float
// steps (the bsum correction, the conversion, y.d·f16(x.d) and one fused
// multiply-add into its 8 float lanes), and the lanes are reduced as in
// dotQ6KAVX2: out[t] has the bits of dotQ6KAVX2 on token t alone (and of the Go
// reference, dotQ6KRowGeneric), whatever T.
//
// The registers: the T int accumulators, the scales and a few temporaries live
// through the block; the masks are memory operands, the scales·bsums products
// are taken at the block's end, and with T = 8 the float lanes wait on the
// stack (a load and a store per token and block).
func dotQ6KAVX2Tokens(T int) {
	name := fmt.Sprintf("dotQ6KAVX2x%d", T)
	TEXT(name, NOSPLIT, "func(x, y *byte, n, stride int, out *float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets out[t] = dotQ6KAVX2(x, y+t·stride, n) for t < %d (one", name, T),
		"weight block unpacked for all the tokens; each token's float steps as there).")
	x, y, n := params3()
	stride := GP64()
	Load(Param("stride"), stride)
	toks := newRowSet(y, stride, T)

	spill := T > 4
	var facc []VecVirtual
	var local Mem
	if spill {
		local = AllocLocal(32 * T)
		z := YMM()
		VXORPS(z, z, z)
		for t := 0; t < T; t++ {
			VMOVUPS(z, local.Offset(32*t))
		}
	} else {
		facc = make([]VecVirtual, T)
		for t := range facc {
			facc[t] = YMM()
			VXORPS(facc[t], facc[t], facc[t])
		}
	}

	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	scales := XMM()
	VMOVDQU(Mem{Base: x, Disp: 192}, scales)
	acc := make([]VecVirtual, T)
	for t := range acc {
		acc[t] = YMM()
		VPXOR(acc[t], acc[t], acc[t])
	}
	for h := 0; h < 2; h++ {
		for k := 0; k < 4; k++ {
			// As dotQ6KAVX2 (q6KChunk).
			v, sw := q6KChunk(x, scales, h, k, nibbleMask, bits45Mask)
			for t := 0; t < T; t++ {
				p := YMM()
				VPMADDUBSW(toks.at(t).Offset(q8KQS+128*h+32*k), v, p)
				VPMADDWD(sw, p, p)
				VPADDD(p, acc[t], acc[t])
			}
		}
	}
	sw16 := YMM()
	VPMOVSXBW(scales, sw16)
	dd := q6KD(x)
	for t := 0; t < T; t++ {
		yt := GP64()
		LEAQ(toks.at(t), yt)
		bc := YMM()
		VPMADDWD(Mem{Base: yt, Disp: q8KBsums}, sw16, bc)
		if spill {
			f := YMM()
			VMOVUPS(local.Offset(32*t), f)
			q6KLanes(yt, dd, acc[t], bc, f)
			VMOVUPS(f, local.Offset(32*t))
		} else {
			q6KLanes(yt, dd, acc[t], bc, facc[t])
		}
	}

	ADDQ(U32(q6KSize), x)
	toks.advance(q8KSize)
	DECQ(n)
	JMP(LabelRef("loop"))

	Label("done")
	if spill {
		facc = make([]VecVirtual, T)
		for t := range facc {
			facc[t] = YMM()
			VMOVUPS(local.Offset(32*t), facc[t])
		}
	}
	storeLaneSums(facc)
}

// q6KChunk unpacks chunk k of half h of the Q6_K block at x: elements 128h+32k+l,
// low bits in ql[32(k&1)+l] (low nibble for k<2), top two bits at bit 2k of qh[l],
// moved to bits 4-5 (m4: the nibble mask, m30: bits 4-5); it returns the 32 6-bit
// quants and the chunk's two scales widened to words (scales: the block's 16).
func q6KChunk(x GPVirtual, scales VecVirtual, h, k int, m4, m30 Op) (v, sw VecVirtual) {
	v = YMM()
	VMOVDQU(Mem{Base: x, Disp: 64*h + 32*(k&1)}, v)
	if k >= 2 {
		VPSRLW(U8(4), v, v)
	}
	VPAND(m4, v, v)
	hb := YMM()
	VMOVDQU(Mem{Base: x, Disp: 128 + 32*h}, hb)
	switch k {
	case 0:
		VPSLLW(U8(4), hb, hb)
	case 1:
		VPSLLW(U8(2), hb, hb)
	case 3:
		VPSRLW(U8(2), hb, hb)
	}
	VPAND(m30, hb, hb)
	VPOR(hb, v, v)
	s := XMM()
	VPSHUFB(q6kShuf.Offset(16*(4*h+k)), scales, s)
	sw = YMM()
	VPMOVSXBW(s, sw)
	return v, sw
}

// dotQ6KAVX512Tokens emits dotQ6KAVX512x8, x9 or x16: one Q6_K row against
// T = 8, 9 or 16 activation rows (stride bytes apart) with AVX-512BW and VNNI,
// for decoding steps of many sequences, prompts and (x9) a k = 8 verification
// step's 9 positions. Each block half is
// unpacked once for the T tokens as dotQ6KAVX512 unpacks it (64 quants per
// register, the scales by VPERMW), and each token keeps its own int32 lanes in
// a 512-bit register (exact in any order; the first product of a block is
// VPMADDWD's, the others VPDPWSSD's, so nothing is zeroed). At the block's end
// q6KLanes' steps run on two tokens per 512-bit register, lane by lane with the
// same results (q6KPairLanes). So out[t] has the bits of dotQ6KAVX2 and
// dotQ6KAVX512 on token t alone (and of dotQ6KRowGeneric), whatever T.
//
// The registers: the T accumulators, the nibble mask, the block's scales and a
// few temporaries; the other masks and the scale permutations are memory
// operands. The tokens' float lanes, a pair per 512-bit register, stay in
// registers with 8 tokens (x8 took 0.9× the CPU with them on the stack) and
// wait on the stack, 64 bytes a pair, with 16. With an odd T the last token
// fills both halves of its pair's registers (q6KPairLanes on it twice: the same
// operations in each half) and only its first half is stored.
func dotQ6KAVX512Tokens(T int) {
	evex = true
	defer func() { evex = false }()
	name := fmt.Sprintf("dotQ6KAVX512x%d", T)
	TEXT(name, NOSPLIT, "func(x, y *byte, n, stride int, out *float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets out[t] = dotQ6KAVX512(x, y+t·stride, n) for t < %d (one", name, T),
		"weight block unpacked for all the tokens; each token's float steps as there).")
	x, y, n := params3()
	stride := GP64()
	Load(Param("stride"), stride)
	toks := newRowSet(y, stride, T)

	// The float lanes: with 16 tokens avo finds no allocation for more than one
	// pair's in registers (and one gave nothing).
	inRegs := T <= 9
	pacc := make([]Op, (T+1)/2)
	var local Mem
	if !inRegs {
		local = AllocLocal(32 * T)
	}
	z := ZMM()
	VPXORD(z, z, z)
	for i := range pacc {
		if inRegs {
			r := ZMM()
			VMOVAPS(z, r)
			pacc[i] = r
		} else {
			pacc[i] = local.Offset(64 * i)
			VMOVDQU64(z, pacc[i])
		}
	}
	m4 := ZMM()
	VMOVDQU64(nibbleMask, m4)
	second := upperLanes()

	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	if T == 9 {
		// A verification step's weights stream from memory once: prefetch
		// them as dotQ4KTileP does (four lines per 210-byte block, past the
		// row's end into the next row's).
		for o := 0; o < 4; o++ {
			PREFETCHT0(Mem{Base: x, Disp: q4KPrefetch + 64*o})
		}
	}
	sw16 := ZMM()
	VPMOVSXBW(Mem{Base: x, Disp: 192}, sw16.AsY())
	acc := make([]VecVirtual, T)
	for h := 0; h < 2; h++ {
		lo, hi := q6KHalfQuants(x, m4, h)
		for k, v := range []VecVirtual{lo, hi} {
			s := ZMM()
			VMOVDQU64(q6kPerm.Offset(64*(2*h+k)), s)
			VPERMW(sw16, s, s)
			for t := range acc {
				p := ZMM()
				VPMADDUBSW(toks.at(t).Offset(q8KQS+128*h+64*k), v, p)
				if h == 0 && k == 0 {
					acc[t] = ZMM()
					VPMADDWD(s, p, acc[t])
				} else {
					raw("VPDPWSSD", s, p, acc[t])
				}
			}
		}
	}
	// −32 times the scales (|−32·s| ≤ 4096 fits a word) in both halves, so that
	// VPMADDWD with two tokens' bsums gives their −32·bc.
	swn, zw := ZMM(), ZMM()
	VPSLLW(U8(5), sw16.AsY(), swn.AsY())
	VPXORD(zw, zw, zw)
	VPSUBW(swn.AsY(), zw.AsY(), swn.AsY())
	VINSERTI64X4(U8(1), swn.AsY(), swn, swn)
	ddv := ZMM()
	VBROADCASTSS(q6KD(x), ddv)
	for i := 0; i < T/2; i++ {
		q6KPairLanes(swn, ddv, acc[2*i], acc[2*i+1], toks.at(2*i), toks.at(2*i+1), second, pacc[i])
	}
	if T%2 == 1 {
		q6KPairLanes(swn, ddv, acc[T-1], acc[T-1], toks.at(T-1), toks.at(T-1), second, pacc[T/2])
	}

	ADDQ(U32(q6KSize), x)
	toks.advance(q8KSize)
	DECQ(n)
	JMP(LabelRef("loop"))

	Label("done")
	facc := make([]VecVirtual, 2*len(pacc))
	for i, a := range pacc {
		facc[2*i], facc[2*i+1] = YMM(), YMM()
		if r, ok := a.(VecVirtual); ok {
			VMOVAPS(r.AsY(), facc[2*i])
			VEXTRACTF64X4(U8(1), r, facc[2*i+1])
		} else {
			m := a.(Mem)
			VMOVUPS(m, facc[2*i])
			VMOVUPS(m.Offset(32), facc[2*i+1])
		}
	}
	storeLaneSums(facc[:T])
}

// upperLanes returns a mask register of dword lanes 8-15: a 512-bit register's
// second token in q6KPairLanes.
func upperLanes() Register {
	g := GP32()
	MOVL(U32(0xff00), g)
	k := K()
	KMOVW(g, k)
	return k
}

// q6KPairLanes is q6KLanes for two tokens a and b (their q8KBlocks at ya, yb) of
// the AVX-512 Q6_K token kernels, in 512-bit registers: lanes 0-7 token a's,
// 8-15 token b's. acca and accb hold the tokens' 16 int32 lanes of a block
// (lanes k and k+8: positions 4k..4k+3 of the two 32-element chunks of each
// 64, so their sum is the AVX2 kernel's lane k); swn holds −32 times the
// block's 16 scales as words, twice; ddv f16(x.d) in every lane; second masks
// lanes 8-15; fa (a register or 64 bytes) holds token a's 8 float lanes, then
// b's. Each lane gets q6KLanes' integer (the lanes less 32·bc), its
// conversion, and one fused multiply-add of y.d·f16(x.d): the one-token
// kernel's operations on the same values.
func q6KPairLanes(swn, ddv, acca, accb VecVirtual, ya, yb Mem, second Register, fa Op) {
	bc := ZMM()
	VMOVDQU64(ya.Offset(q8KBsums), bc.AsY())
	VINSERTI64X4(U8(1), yb.Offset(q8KBsums), bc, bc)
	VPMADDWD(swn, bc, bc)
	lo, hi := ZMM(), ZMM()
	VINSERTI64X4(U8(1), accb.AsY(), acca, lo)
	VSHUFI64X2(U8(0xee), accb, acca, hi)
	VPADDD(hi, lo, lo)
	VPADDD(bc, lo, lo)
	f := ZMM()
	VCVTDQ2PS(lo, f)
	dy := ZMM()
	VBROADCASTSS(ya, dy)
	VBROADCASTSS(yb, second, dy)
	VMULPS(ddv, dy, dy) // y.d·f16(x.d), as q6KLanes' VMULSS
	if m, ok := fa.(Mem); ok {
		acc := ZMM()
		VMOVUPS(m, acc)
		VFMADD231PS(dy, f, acc)
		VMOVUPS(acc, m)
	} else {
		VFMADD231PS(dy, f, fa)
	}
}

// addTokenLanes ends a block of the AVX-512 Q5_K/Q6_K token kernels: each token's
// 16 int32 lanes folded to 8, converted to float and added into its 8 float lanes
// in local (32 bytes per token) as fa += (y.d·d)·f, one fused multiply-add, where
// ddv holds the block's d broadcast.
func addTokenLanes(acc []VecVirtual, ddv VecVirtual, toks rowSet, local Mem) {
	for t := range acc {
		a8 := YMM()
		VEXTRACTI64X4(U8(1), acc[t], a8)
		VPADDD(a8, acc[t].AsY(), a8)
		f := YMM()
		VCVTDQ2PS(a8, f)
		dy := YMM()
		VMULPS_BCST(toks.at(t), ddv, dy)
		fa := YMM()
		VMOVUPS(local.Offset(32*t), fa)
		VFMADD231PS(dy, f, fa)
		VMOVUPS(fa, local.Offset(32*t))
	}
}

// q6KPairBytes is one block of two tokens in the activation layout of
// dotQ6KAVX512x16p (acts.q6P): the eight 32-byte chunks of quants, token a's
// then token b's for each; their bsums, a's 16 then b's; their y.d, a's in 8
// lanes then b's.
const (
	q6KPairBytes = 640
	q6KPairBsums = 512
	q6KPairD     = 576
)

// dotQ6KAVX512PairTokens emits dotQ6KAVX512x16p: dotQ6KAVX512x16 on the
// activations of 16 tokens laid out by pairs (q6KPairBytes; 8 pairs, stride
// bytes apart). Each 32-quant chunk of the weight block, and its scales, fill
// both halves of a 512-bit register, so each product's lanes 0-7 are token a's
// and 8-15 token b's from the start: the lanes are the AVX2 kernel's (exact:
// the integer sums in any order), one VPMADDWD takes both tokens' bsum
// correction, one multiply both tokens' y.d·f16(x.d), and one fused
// multiply-add both tokens' float lanes: q6KLanes' operations on the same
// values, lane by lane. So out[t] has dotQ6KAVX2's bits on token t alone.
func dotQ6KAVX512PairTokens() {
	evex = true
	defer func() { evex = false }()
	const P = 8
	name := "dotQ6KAVX512x16p"
	TEXT(name, NOSPLIT, "func(x, y *byte, n, stride int, out *float32)")
	Pragma("noescape")
	Doc(name+" sets out[t] = dotQ6KAVX512(x, token t, n) for t < 16, the tokens'",
		"blocks by pairs at y (acts.q6P, stride bytes a pair).")
	x, y, n := params3()
	stride := GP64()
	Load(Param("stride"), stride)
	pairs := newRowSet(y, stride, P)

	facc := make([]VecVirtual, P)
	for i := range facc {
		facc[i] = ZMM()
		VPXORD(facc[i], facc[i], facc[i])
	}
	m4 := ZMM()
	VMOVDQU64(nibbleMask, m4)

	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	sw16 := ZMM()
	VPMOVSXBW(Mem{Base: x, Disp: 192}, sw16.AsY())
	acc := make([]VecVirtual, P)
	for h := 0; h < 2; h++ {
		lo, hi := q6KHalfQuants(x, m4, h)
		for k, v := range []VecVirtual{lo, hi} {
			s := ZMM()
			VMOVDQU64(q6kPerm.Offset(64*(2*h+k)), s)
			VPERMW(sw16, s, s)
			for c := 0; c < 2; c++ {
				// Chunk 4h+2k+c (32 quants) and its scales in both halves.
				imm := U8(0x44)
				if c == 1 {
					imm = U8(0xee)
				}
				vb, sb := ZMM(), ZMM()
				VSHUFI64X2(imm, v, v, vb)
				VSHUFI64X2(imm, s, s, sb)
				for i := range acc {
					p := ZMM()
					VPMADDUBSW(pairs.at(i).Offset(64*(4*h+2*k+c)), vb, p)
					if h == 0 && k == 0 && c == 0 {
						acc[i] = ZMM()
						VPMADDWD(sb, p, acc[i])
					} else {
						raw("VPDPWSSD", sb, p, acc[i])
					}
				}
			}
		}
	}
	// −32 times the scales in both halves (as dotQ6KAVX512x16).
	swn, zw := ZMM(), ZMM()
	VPSLLW(U8(5), sw16.AsY(), swn.AsY())
	VPXORD(zw, zw, zw)
	VPSUBW(swn.AsY(), zw.AsY(), swn.AsY())
	VINSERTI64X4(U8(1), swn.AsY(), swn, swn)
	ddv := ZMM()
	VBROADCASTSS(q6KD(x), ddv)
	for i := range acc {
		bc := ZMM()
		VPMADDWD(pairs.at(i).Offset(q6KPairBsums), swn, bc)
		VPADDD(bc, acc[i], acc[i])
		f := ZMM()
		VCVTDQ2PS(acc[i], f)
		dy := ZMM()
		VMULPS(pairs.at(i).Offset(q6KPairD), ddv, dy) // y.d·f16(x.d), as q6KLanes' VMULSS
		VFMADD231PS(dy, f, facc[i])
	}

	ADDQ(U32(q6KSize), x)
	pairs.advance(q6KPairBytes)
	DECQ(n)
	JMP(LabelRef("loop"))

	Label("done")
	out := make([]VecVirtual, 2*P)
	for i, a := range facc {
		out[2*i], out[2*i+1] = YMM(), YMM()
		VMOVAPS(a.AsY(), out[2*i])
		VEXTRACTF64X4(U8(1), a, out[2*i+1])
	}
	storeLaneSums(out)
}

// q6KHalfQuants unpacks half h of the Q6_K block at x (its 128 quants, 0 … 63,
// as dotQ6KAVX512 does): lo the quants of the low nibbles of ql's 64 bytes, hi
// those of the high nibbles, each with its two bits of qh (m4: nibbleMask).
func q6KHalfQuants(x GPVirtual, m4 VecVirtual, h int) (lo, hi VecVirtual) {
	ql, qh := ZMM(), ZMM()
	VMOVDQU64(Mem{Base: x, Disp: 64 * h}, ql)
	VBROADCASTI64X4(Mem{Base: x, Disp: 128 + 32*h}, qh)
	lo, hi = ZMM(), ZMM()
	VPANDD(m4, ql, lo)
	VPSRLW(U8(4), ql, hi)
	VPANDD(m4, hi, hi)
	tt := ZMM()
	VPSLLVW(q6kShiftLow, qh, tt)
	VPANDD(bits45Mask, tt, tt)
	VPORD(tt, lo, lo)
	VPSRLVW(q6kShiftHigh, qh, tt)
	VPANDD(bits45Mask, tt, tt)
	VPORD(tt, hi, hi)
	return lo, hi
}
