package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// dotQ4KAVX2Tokens emits dotQ4KAVX2x4 or dotQ4KAVX2x8: one Q4_K row against T = 4
// or 8 activation rows (stride bytes apart) on AVX2, for the few-token products
// of a speculative verification step. The weight block is unpacked once for the
// T tokens (dotQ4KAVX2x2's way), and each token keeps its own int32 lanes, exact;
// at the end of a block the T tokens' lanes are reduced together (VPHADDD, then
// the two 128-bit halves) into one vector of isums and one of msums, and the
// reference's float operations run on that vector, token t in lane t:
// sum += (f16(x.d)·y.d)·isum − (f16(x.dmin)·y.d)·msum, each a separate rounding as
// in dotQ4KAVX2 (no fused multiply-add). So out[t] has the bits of dotQ4KAVX2 on
// token t alone (and of the Go reference), whatever T.
func dotQ4KAVX2Tokens(T int) {
	name := fmt.Sprintf("dotQ4KAVX2x%d", T)
	TEXT(name, NOSPLIT, "func(x, y *byte, n, stride int, out *float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets out[t] = dotQ4KAVX2(x, y+t·stride, n) for t < %d (one", name, T),
		"weight block unpacked for all the tokens; their float steps lane by lane).")
	x, y, n := GP64(), GP64(), GP64()
	Load(Param("x"), x)
	Load(Param("y"), y)
	Load(Param("n"), n)
	stride := GP64()
	Load(Param("stride"), stride)
	toks := newRowSet(y, stride, T)

	var sum VecVirtual
	if T == 8 {
		sum = YMM()
	} else {
		sum = XMM()
	}
	VXORPS(sum, sum, sum)

	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	u := q4KScales(x)
	smw := YMM()
	VPMOVZXBW(u, smw) // scales then mins, as int16
	sc := YMM()
	VPERMQ(U8(0x44), smw, sc) // the scales in both lanes

	acc := make([]VecVirtual, T)
	for t := range acc {
		acc[t] = YMM()
		VPXOR(acc[t], acc[t], acc[t])
	}
	for j := 0; j < 4; j++ {
		qr := YMM()
		VMOVDQU(Mem{Base: x, Disp: 16 + 32*j}, qr)
		// The low nibbles (sub-block 2j), then the high ones (2j+1) in place
		// of the loaded bytes: few registers live beside the T accumulators.
		for half := 0; half < 2; half++ {
			q := YMM()
			if half == 0 {
				VPAND(nibbleMask, qr, q)
			} else {
				VPSRLW(U8(4), qr, q)
				VPAND(nibbleMask, q, q)
			}
			s := YMM()
			VPSHUFB(q4kShuf.Offset(64*j+32*half), sc, s)
			for t := 0; t < T; t++ {
				p := YMM()
				VPMADDUBSW(toks.at(t).Offset(q8KQS+64*j+32*half), q, p)
				VPMADDWD(s, p, p)
				VPADDD(p, acc[t], acc[t])
			}
		}
	}
	is := reduceQ4KTokens(acc)
	// The mins' products with each token's bsums, reduced the same way.
	md := XMM()
	VPSHUFB(q4kMinPairs, u, md) // each min twice, for the two bsums of its sub-block
	mw := YMM()
	VPMOVZXBW(md, mw)
	m8 := make([]VecVirtual, T)
	for t := range m8 {
		m8[t] = YMM()
		VPMADDWD(toks.at(t).Offset(q8KBsums), mw, m8[t])
	}
	ms := reduceQ4KTokens(m8)

	// d = f16(x.d)·y.d and dmin = f16(x.dmin)·y.d per token, then
	// sum += d·float32(isum) − dmin·float32(msum), lane by lane.
	g := GP32()
	MOVL(Mem{Base: x}, g)
	dd := XMM()
	VMOVD(g, dd)
	VCVTPH2PS(dd, dd) // d dmin
	dmx := XMM()
	VMOVSHDUP(dd, dmx)
	ydv := q4KTokenScales(toks, T)
	d, dm := like(sum), like(sum)
	VBROADCASTSS(dd, d)
	VBROADCASTSS(dmx, dm)
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
	DECQ(n)
	JMP(LabelRef("loop"))

	Label("done")
	out := GP64()
	Load(Param("out"), out)
	VMOVUPS(sum, Mem{Base: out})
	VZEROUPPER()
	RET()
}

// like returns a new vector register of v's width (xmm or ymm).
func like(v VecVirtual) VecVirtual {
	if v.Size() == 32 {
		return YMM()
	}
	return XMM()
}

// reduceQ4KTokens sums the 8 int32 lanes of each of the 4 or 8 ymm in a: lane t of
// the result (an xmm for 4, a ymm for 8) is a[t]'s total. Integer sums: any
// order gives the same result.
func reduceQ4KTokens(a []VecVirtual) VecVirtual {
	var h []VecVirtual
	for k := 0; k < len(a); k += 2 {
		v := YMM()
		VPHADDD(a[k+1], a[k], v) // a[k] pairs, a[k+1] pairs, in each 128-bit half
		h = append(h, v)
	}
	var g []VecVirtual // half L of g[i]: the sums of half L of a[4i..4i+3]
	for k := 0; k < len(h); k += 2 {
		v := YMM()
		VPHADDD(h[k+1], h[k], v)
		g = append(g, v)
	}
	if len(g) == 1 {
		hi := XMM()
		VEXTRACTI128(U8(1), g[0], hi)
		r := XMM()
		VPADDD(hi, g[0].AsX(), r)
		return r
	}
	lo, hi := YMM(), YMM()
	VPERM2I128(U8(0x20), g[1], g[0], lo) // the low halves of a[0..3], a[4..7]
	VPERM2I128(U8(0x31), g[1], g[0], hi) // the high halves
	VPADDD(hi, lo, lo)
	return lo
}

// q4KTokenScales returns the y.d of the current block of each of the T tokens, token
// t in lane t (an xmm for 4, a ymm for 8).
func q4KTokenScales(toks rowSet, T int) VecVirtual {
	var parts []VecVirtual
	for g := 0; g < T/4; g++ {
		v := XMM()
		VMOVSS(toks.at(4*g), v)
		for i := 1; i < 4; i++ {
			VINSERTPS(U8(i<<4), toks.at(4*g+i), v, v)
		}
		parts = append(parts, v)
	}
	if T == 4 {
		return parts[0]
	}
	v := YMM()
	VINSERTF128(U8(1), parts[1], parts[0].AsY(), v)
	return v
}
