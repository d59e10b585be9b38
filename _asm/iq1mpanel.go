package main

import (
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The IQ1_M byte panels' constants: iq1mTrans[l] = 4·(l%4) + l/4 (lane 4·row +
// token to 4·token + row); for the decoder's 32 words of a block's ±scales
// (group g of 8 values), the scale word g/8 (iq1mScIdx) and its shift
// 3·((g/2)%4) (iq1mScSh), the qh byte g/2 (iq1mQhIdx) and the sign bit of its
// nibble (iq1mQhBit).
var iq1mTrans, iq1mScIdx, iq1mScSh, iq1mQhIdx, iq1mQhBit Mem

func iq1mBytePanelConstants() {
	var tr, si, ss, qi, qb []byte
	for l := 0; l < 16; l++ {
		tr = append(tr, byte(4*(l%4)+l/4), 0, 0, 0)
	}
	for g := 0; g < 32; g++ {
		si = append(si, byte(g/8), 0)
		ss = append(ss, byte(3*((g/2)%4)), 0)
		qi = append(qi, byte(g/2), 0)
		qb = append(qb, byte(8<<(4*(g%2))), 0)
	}
	iq1mTrans = rodata("iq1mTrans", tr)
	iq1mScIdx = rodata("iq1mScIdx", si)
	iq1mScSh = rodata("iq1mScSh", ss)
	iq1mQhIdx = rodata("iq1mQhIdx", qi)
	iq1mQhBit = rodata("iq1mQhBit", qb)
}

// iq1mPanelAVX512r4t4 emits IQ1_M's byte-panel kernel (engine/kernels/
// iq1mpanel.go): 4 decoded rows (bytes 8·ls·grid, |v| ≤ 120; rows 2q and 2q+1
// interleaved by sub-block) by 4 tokens' unsigned quants q+128 (acts.q8kU),
// each token's 32 quants of a sub-block broadcast to both halves of a register
// and met by one VPDPBUSD per pair of rows, into an accumulator started at the
// two rows' −128·Σv of each lane; then the shifts' Σ ls·delta·(sum of 8 quants)
// of the block's 32 groups by two VPDPWSSD per pair of rows and token (the
// rows' ±scales, the tokens' sums of 8, acts.q8kS8). Every accumulator's
// dwords then add up to dotIQ1MBlock's 8·sumi1 + sumi2 for its row and token,
// exactly; a tree of shuffles gives the 16 block sums, and the float step is
// iqPanelSumFAVX512r4t4's: sum += (f16(x.d)·y.d)·(float(block sum)·0.125).
func iq1mPanelAVX512r4t4() {
	evex = true
	defer func() { evex = false }()
	const name = "iq1mPanelAVX512r4t4"
	TEXT(name, NOSPLIT, "func(w *byte, c *int32, dl *int16, dx *float32, a *byte, ts int, s8 *int16, dy *float32, dys, nb int, out *float32)")
	Pragma("noescape")
	Doc(name+" sets out[4·t+i] to the dot product (dotIQ1MRow's bits) of the byte-panel",
		"rows i < 4 at w (block b at w + b·iqPanelGroup·256, lane starts c, ±scales dl,",
		"scales dx[b·iqPanelGroup+i]) and the unsigned quants of tokens t < 4 at a + t·ts",
		"(sums of 8 at s8 + t·ts/4, scale dy[b·dys/4+t]) (AVX-512 VNNI).")
	w := Load(Param("w"), GP64())
	c := Load(Param("c"), GP64())
	dl := Load(Param("dl"), GP64())
	dx := Load(Param("dx"), GP64())
	a := Load(Param("a"), GP64())
	ts := Load(Param("ts"), GP64())
	s8 := Load(Param("s8"), GP64())
	dy := Load(Param("dy"), GP64())
	dys := Load(Param("dys"), GP64())
	n := Load(Param("nb"), GP64())
	ts3, ss, ss3 := GP64(), GP64(), GP64()
	LEAQ(Mem{Base: ts, Index: ts, Scale: 2}, ts3)
	MOVQ(ts, ss)
	SHRQ(U8(2), ss)
	LEAQ(Mem{Base: ss, Index: ss, Scale: 2}, ss3)
	tok := func(base, s, s3 Register, t, disp int) Mem {
		switch t {
		case 0:
			return Mem{Base: base, Disp: disp}
		case 1:
			return Mem{Base: base, Index: s, Scale: 1, Disp: disp}
		case 2:
			return Mem{Base: base, Index: s, Scale: 2, Disp: disp}
		}
		return Mem{Base: base, Index: s3, Scale: 1, Disp: disp}
	}
	factor, tokIdx, facc := ZMM(), ZMM(), ZMM()
	{
		g := GP32()
		MOVL(U32(math.Float32bits(0.125)), g)
		VPBROADCASTD(g, factor)
	}
	VMOVDQU32(iqPanelTokIdx, tokIdx)
	VPXORD(facc, facc, facc)

	Label(name + "_loop")
	var I [2][4]VecVirtual // row pair q, token t
	for q := range I {
		for t := range I[q] {
			I[q][t] = ZMM()
			VMOVDQU32(Mem{Base: c, Disp: 64 * q}, I[q][t])
		}
	}
	for j := 0; j < 8; j++ {
		for t := 0; t < 4; t++ {
			u := ZMM()
			VBROADCASTI64X4(tok(a, ts, ts3, t, 32*j), u)
			for q := range I {
				raw("VPDPBUSD", Mem{Base: w, Disp: 512*q + 64*j}, u, I[q][t])
			}
		}
	}
	for h := 0; h < 2; h++ {
		for t := 0; t < 4; t++ {
			u := ZMM()
			VBROADCASTI64X4(tok(s8, ss, ss3, t, 32*h), u)
			for q := range I {
				raw("VPDPWSSD", Mem{Base: dl, Disp: 128*q + 64*h}, u, I[q][t])
			}
		}
	}
	// V[t]: 128-bit lane k holds 4 partial sums of row k, token t.
	var V [4]VecVirtual
	for t := range V {
		p, q := ZMM(), ZMM()
		VSHUFI64X2(U8(0x88), I[1][t], I[0][t], p)
		VSHUFI64X2(U8(0xdd), I[1][t], I[0][t], q)
		VPADDD(q, p, p)
		V[t] = p
	}
	// W[h]: lane k holds row k's two partial sums of tokens 2h and 2h+1.
	var W [2]VecVirtual
	for h := range W {
		lo, hi := ZMM(), ZMM()
		VPUNPCKLQDQ(V[2*h+1], V[2*h], lo)
		VPUNPCKHQDQ(V[2*h+1], V[2*h], hi)
		VPADDD(hi, lo, lo)
		W[h] = lo
	}
	sums, hi := ZMM(), ZMM()
	VSHUFPS(U8(0x88), W[1], W[0], sums)
	VSHUFPS(U8(0xdd), W[1], W[0], hi)
	VPADDD(hi, sums, sums) // lane 4i+t: row i, token t
	VCVTDQ2PS(sums, sums)
	dxv, dx4, dyv := ZMM(), XMM(), ZMM()
	VMOVUPS(Mem{Base: dx}, dx4)
	VPERMPS(dx4.AsZ(), tokIdx, dxv)
	VBROADCASTF32X4(Mem{Base: dy}, dyv)
	VMULPS(dyv, dxv, dxv) // f16(x.d)·y.d
	VMULPS(factor, sums, sums)
	VMULPS(sums, dxv, dxv)
	VADDPS(dxv, facc, facc)
	ADDQ(U32(iqPanelGroup*256), w)
	ADDQ(U32(iqPanelGroup*32), c)
	ADDQ(U32(iqPanelGroup*64), dl)
	ADDQ(U8(4*iqPanelGroup), dx)
	ADDQ(U32(256), a)
	ADDQ(U8(64), s8)
	ADDQ(dys, dy)
	DECQ(n)
	JNZ(LabelRef(name + "_loop"))
	tr := ZMM()
	VMOVDQU32(iq1mTrans, tr)
	VPERMPS(facc, tr, facc)
	out := Load(Param("out"), GP64())
	VMOVUPS(facc, Mem{Base: out})
	VZEROUPPER()
	RET()
}

// decodeIQ1MBytesAVX512 emits the IQ1_M byte-panel decoder
// (decodeIQ1MBytePanel): per sub-block the four 8-byte grid entries (-1, 0,
// 1), times 8·ls of their 16 values (8·ls broadcast, zeroed where the grid
// byte is 0 and negated where it is -1), stored 64 bytes apart (w points at
// the slot's half of its row pair); the lanes' starts −128·Σv from one
// VPDPBUSD of ones by the values per sub-block; the 32 groups' ±scales
// ls·delta as words, groups 0-15 at dl, 16-31 at dl+64; the f16 scale.
func decodeIQ1MBytesAVX512() {
	evex = true
	defer func() { evex = false }()
	TEXT("decodeIQ1MBytesAVX512", NOSPLIT, "func(x *byte, nb int, w *byte, c *int32, dl *int16, dx *float32, grid *byte)")
	Pragma("noescape")
	Doc("decodeIQ1MBytesAVX512 writes the nb IQ1_M blocks at x into a slot of the byte panel",
		"(decodeIQ1MBytePanel's values, lane starts, ±scales and scales) (AVX-512 VNNI).")
	x := GP64()
	Load(Param("x"), x)
	n := Load(Param("nb"), GP64())
	w := Load(Param("w"), GP64())
	c := Load(Param("c"), GP64())
	dl := Load(Param("dl"), GP64())
	dx := Load(Param("dx"), GP64())
	grid := GP64()
	Load(Param("grid"), grid)
	ones, zero := YMM(), ZMM()
	sevenW, oneW := ZMM(), ZMM()
	scIdx, scSh, qhIdx, qhBit := ZMM(), ZMM(), ZMM(), ZMM()
	khi := K()
	{
		g := GP32()
		MOVL(U32(0x01010101), g)
		VPBROADCASTD(g, ones)
		MOVL(U32(0x00070007), g)
		VPBROADCASTD(g, sevenW)
		MOVL(U32(0x00010001), g)
		VPBROADCASTD(g, oneW)
		MOVL(U32(0xffff0000), g)
		KMOVD(g, khi)
	}
	VPXORD(zero, zero, zero)
	VMOVDQU16(iq1mScIdx, scIdx)
	VMOVDQU16(iq1mScSh, scSh)
	VMOVDQU16(iq1mQhIdx, qhIdx)
	VMOVDQU16(iq1mQhBit, qhBit)

	Label("decode_IQ1MB")
	{
		d16, t := GP64(), GP64()
		MOVWQZX(Mem{Base: x, Disp: 48}, d16)
		SHRQ(U8(12), d16)
		for k, sh := range []uint8{8, 4, 0} {
			MOVWQZX(Mem{Base: x, Disp: 50 + 2*k}, t)
			if sh != 0 {
				SHRQ(U8(sh), t)
			}
			ANDQ(U32(0xf0<<(4*k)), t)
			ORQ(t, d16)
		}
		d := XMM()
		VMOVD(d16.As32(), d)
		VCVTPH2PS(d, d)
		VMOVSS(d, Mem{Base: dx})
	}
	acc := YMM()
	VPXORD(acc, acc, acc)
	for ib := 0; ib < 8; ib++ {
		g := gather8x(grid, func(l int) GPVirtual {
			r, t := GP64(), GP64()
			MOVBQZX(Mem{Base: x, Disp: 32 + 2*ib + l/2}, t)
			if l%2 == 1 {
				SHRQ(U8(4), t)
			}
			ANDQ(U8(7), t)
			SHLQ(U8(8), t)
			MOVBQZX(Mem{Base: x, Disp: 4*ib + l}, r)
			ORQ(t, r)
			return r
		})
		// 8·ls of the low 16 values in bytes 0-15, of the high 16 in bytes 16-31.
		lo, hi := GP64(), GP64()
		MOVWQZX(Mem{Base: x, Disp: 48 + 2*(ib/2)}, lo)
		if ib%2 == 1 {
			SHRQ(U8(6), lo)
		}
		MOVQ(lo, hi)
		SHRQ(U8(3), hi)
		ANDQ(U8(7), lo)
		ANDQ(U8(7), hi)
		LEAQ(Mem{Base: lo, Index: lo, Scale: 1, Disp: 1}, lo)
		LEAQ(Mem{Base: hi, Index: hi, Scale: 1, Disp: 1}, hi)
		SHLQ(U8(3), lo)
		SHLQ(U8(3), hi)
		neg, nz := K(), K()
		VPMOVB2M(g, neg)
		VPTESTMB(g, g, nz)
		v := YMM()
		VPBROADCASTB(lo.As32(), v)
		VPBROADCASTB(hi.As32(), khi, v)
		VMOVDQU8_Z(v, nz, v)          // 0 where the grid byte is 0
		VPSUBB(v, zero.AsY(), neg, v) // negated where it is -1
		VMOVDQU8(v, Mem{Base: w, Disp: 64 * ib})
		raw("VPDPBUSD", v, ones, acc)
	}
	VPSLLD(U8(7), acc, acc)
	VPSUBD(acc, zero.AsY(), acc)
	VMOVDQU32(acc, Mem{Base: c})
	{
		sc, l := XMM(), ZMM()
		VMOVQ(Mem{Base: x, Disp: 48}, sc)
		VPERMW(sc.AsZ(), scIdx, l)
		VPSRLVW(scSh, l, l)
		VPANDD(sevenW, l, l)
		VPADDW(l, l, l)
		VPORD(oneW, l, l) // ls = 2s+1 of group g's 16 values
		qh, s := YMM(), ZMM()
		VPMOVZXBW(Mem{Base: x, Disp: 32}, qh)
		VPERMW(qh.AsZ(), qhIdx, s)
		neg := K()
		VPTESTMW(qhBit, s, neg)
		VPSUBW(l, zero, neg, l) // negated where the group's sign bit is set
		VMOVDQU16(l.AsY(), Mem{Base: dl})
		VEXTRACTI64X4(U8(1), l, Mem{Base: dl, Disp: 64})
	}
	ADDQ(U32(56), x)
	ADDQ(U32(iqPanelGroup*256), w)
	ADDQ(U32(iqPanelGroup*32), c)
	ADDQ(U32(iqPanelGroup*64), dl)
	ADDQ(U8(4*iqPanelGroup), dx)
	DECQ(n)
	JNZ(LabelRef("decode_IQ1MB"))
	VZEROUPPER()
	RET()
}
