package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Tiles: the K-quant kernels for R weight rows × T activation rows at once (R = 8
// rows of one token when decoding, T = 4-16 tokens of one row for a prompt). Each
// (row, token) pair keeps its own integer accumulators, exact; at the end of a
// block the pairs' int32 lanes are reduced together (a transposed horizontal sum),
// and the reference's float operations run on a vector of pairs, lane by lane:
// every output gets the bits of the single-row kernel and of the Go reference.

// rowSet addresses n rows (or activation blocks) stride bytes apart: base
// registers for each group of four, and the stride and three times it as
// indexes.
type rowSet struct {
	bases      []GPVirtual
	stride, s3 GPVirtual
}

func newRowSet(base, stride GPVirtual, n int) rowSet {
	rs := rowSet{bases: []GPVirtual{base}, stride: stride}
	if n > 1 {
		rs.s3 = GP64()
		LEAQ(Mem{Base: stride, Index: stride, Scale: 2}, rs.s3)
	}
	for g := 1; 4*g < n; g++ {
		b := GP64()
		LEAQ(Mem{Base: rs.bases[g-1], Index: stride, Scale: 4}, b)
		rs.bases = append(rs.bases, b)
	}
	return rs
}

// rowSetSize is how many rows a kernel of R rows addresses: with several rows
// (decoding), twice as many, to prefetch the next group's (see prefetchNext).
func rowSetSize(R int) int {
	if R > 1 {
		return 2 * R
	}
	return R
}

// prefetchNext prefetches, for each of the R rows, the bytes at offsets lines·64
// from the current position in the row R rows further on: the rows of the next
// call. Rows are short (a few KiB), so the hardware's stream prefetchers, which
// learn each of the R streams anew, would start too late on each.
func prefetchNext(rows rowSet, R int, lines ...int) {
	if R == 1 {
		return
	}
	for r := 0; r < R; r++ {
		for _, l := range lines {
			PREFETCHT2(rows.at(R + r).Offset(64 * l))
		}
	}
}

// at is row i's address.
func (rs rowSet) at(i int) Mem {
	b := rs.bases[i/4]
	switch i % 4 {
	case 1:
		return Mem{Base: b, Index: rs.stride, Scale: 1}
	case 2:
		return Mem{Base: b, Index: rs.stride, Scale: 2}
	case 3:
		return Mem{Base: b, Index: rs.s3, Scale: 1}
	}
	return Mem{Base: b}
}

func (rs rowSet) advance(bytes int) {
	for _, b := range rs.bases {
		ADDQ(U32(bytes), b)
	}
}

// q4KScalesAt is q4KScales of the block at m.
func q4KScalesAt(m Mem) VecVirtual {
	b := XMM()
	vmovdqu(m.Offset(4), b)
	a := XMM()
	VPSHUFB(q4kGatherLow, b, a)
	t := XMM()
	VPSRLW(U8(4), a, t)
	vpand(q4kMaskHigh, t, t)
	vpand(q4kMaskLow, a, a)
	vpor(t, a, a)
	c := XMM()
	VPSHUFB(q4kGatherTop, b, c)
	VPSRLW(U8(2), c, c)
	vpand(bits45Mask, c, c)
	vpor(c, a, a)
	return a
}

// reducePairs sums, for each pair p, lanes 0-7 of z[p] into I[p] and lanes 8-15
// into M[p] (len(z) is 4, 8 or 16; the lanes of I and M past len(z) are
// undefined). Integer sums: any order gives the same result.
func reducePairs(z []VecVirtual) (I, M VecVirtual) {
	var s []VecVirtual
	for k := 0; k < len(z); k += 2 {
		a, b := ZMM(), ZMM()
		VPUNPCKLDQ(z[k+1], z[k], a)
		VPUNPCKHDQ(z[k+1], z[k], b)
		VPADDD(b, a, a)
		s = append(s, a)
	}
	var r []VecVirtual // lane L of r[k]: the sums of 128-bit lane L of z[4k..4k+3]
	for k := 0; k < len(s); k += 2 {
		a, b := ZMM(), ZMM()
		VPUNPCKLQDQ(s[k+1], s[k], a)
		VPUNPCKHQDQ(s[k+1], s[k], b)
		VPADDD(b, a, a)
		r = append(r, a)
	}
	// Lanes 0+1 are the I parts, 2+3 the M parts.
	var q []VecVirtual
	if len(r) == 1 {
		r = append(r, r[0])
	}
	for k := 0; k < len(r); k += 2 {
		a, b := ZMM(), ZMM()
		VSHUFI32X4(U8(0x88), r[k+1], r[k], a)
		VSHUFI32X4(U8(0xdd), r[k+1], r[k], b)
		VPADDD(b, a, a) // I(4k..), M(4k..), I(4k+4..), M(4k+4..)
		q = append(q, a)
	}
	if len(q) == 1 {
		q = append(q, q[0])
	}
	I, M = ZMM(), ZMM()
	VSHUFI32X4(U8(0x88), q[1], q[0], I)
	VSHUFI32X4(U8(0xdd), q[1], q[0], M)
	return I, M
}

// tileParams loads the parameters of a tile kernel.
func tileParams(R, T int) (rows, toks rowSet, yd, yds, nb GPVirtual) {
	load := func(name string) GPVirtual {
		r := GP64()
		Load(Param(name), r)
		return r
	}
	var rb, ys GPVirtual
	if R > 1 {
		rb = load("rb")
	}
	rows = newRowSet(load("x"), rb, rowSetSize(R))
	if T > 1 {
		ys, yd, yds = load("ys"), load("yd"), load("yds")
	}
	toks = newRowSet(load("y"), ys, T)
	nb = load("nb")
	return
}

// tileRowScales returns, for the blocks at rows, a vector whose lane p = t·R+r
// holds the f16 value at offset off (0 or 2) of row r's block, as float32.
func tileRowScales(rows rowSet, R int, off int) VecVirtual {
	h := XMM()
	g := GP32()
	for r := 0; r < R && r < 4; r++ {
		MOVWLZX(rows.at(r).Offset(off), g)
		if r == 0 {
			VMOVD(g, h)
		} else {
			VPINSRW(U8(r), g, h, h)
		}
	}
	for r := 4; r < R; r++ {
		MOVWLZX(rows.at(r).Offset(off), g)
		VPINSRW(U8(r), g, h, h)
	}
	f := ZMM()
	VCVTPH2PS(h, f.AsY())
	switch R {
	case 1:
		VBROADCASTSS(f.AsX(), f)
	default: // T = 1: lane r is row r already
	}
	return f
}

// tileTokenScales returns a vector whose lane p = t·R+r holds token t's y.d.
func tileTokenScales(toks rowSet, yd GPVirtual, T int) VecVirtual {
	f := ZMM()
	switch T {
	case 1:
		VBROADCASTSS(toks.at(0), f)
	case 4:
		VMOVUPS(Mem{Base: yd}, f.AsX())
	case 8:
		VMOVUPS(Mem{Base: yd}, f.AsY())
	default:
		VMOVUPS(Mem{Base: yd}, f)
	}
	return f
}

// tileStore stores lane p = t·R+r of s to out[t·os + r].
func tileStore(s VecVirtual, R, T int) {
	out := GP64()
	Load(Param("out"), out)
	switch {
	case T == 1 && R == 4:
		VMOVUPS(s.AsX(), Mem{Base: out})
	case T == 1 && R == 8:
		VMOVUPS(s.AsY(), Mem{Base: out})
	default: // R = 1
		os := GP64()
		Load(Param("os"), os)
		SHLQ(U8(2), os)
		for l := 0; 4*l < T; l++ {
			x := XMM()
			VEXTRACTF32X4(U8(l), s, x)
			for i := 0; i < 4 && 4*l+i < T; i++ {
				VEXTRACTPS(U8(i), x, Mem{Base: out})
				ADDQ(os, out)
			}
		}
	}
	VZEROUPPER()
	RET()
}

// tileText declares a tile kernel: out[t·os + r] = dot(row r, token t) over nb
// blocks, row r at x + r·rb, token t's blocks at y + t·ys and its block scales at
// yd + b·yds + 4t (the scales of block b of the T tokens side by side).
func tileText(name string, R, T int, what string) {
	TEXT(name, NOSPLIT, "func(x *byte, rb int, y *byte, ys int, yd *float32, yds int, nb int, out *float32, os int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets out[t·os + r] = %s(x + r·rb, y + t·ys, nb) for r < %d, t < %d;", name, what, R, T),
		"yd + b·yds holds y.d of block b of the tokens, one float32 per token.")
}

// dotKTile emits the Q4_K, Q5_K or Q6_K kernel for R rows × T tokens (R = 1 or
// T = 1). Q5_K is Q4_K with a fifth bit per quant (qh) and its quants 32 bytes
// further on.
func dotKTile(typ string, R, T int) {
	evex = true
	defer func() { evex = false }()
	name := fmt.Sprintf("dot%sAVX512r%dt%d", typ, R, T)
	tileText(name, R, T, "dot"+typ+"AVX512")
	rows, toks, yd, yds, nb := tileParams(R, T)
	P := R * T
	sum := ZMM()
	VPXORD(sum, sum, sum)
	var m4, shr4, ones VecVirtual
	k4 := typ == "Q4K" || typ == "Q5K" // the Q4_K form: scales and mins
	if k4 {
		m4, shr4 = ZMM(), ZMM()
		VMOVDQU64(nibbleMask, m4)
		VMOVDQU64(q4kShiftHigh, shr4)
	}
	if typ == "Q5K" {
		ones = ZMM()
		VMOVDQU64(byteOnes, ones)
	}
	// Q6_K's constants, in registers while there are enough of them.
	q6m4, q6m30, q6shl, q6shr := Op(nibbleMask), Op(bits45Mask), Op(q6kShiftLow), Op(q6kShiftHigh)
	if typ == "Q6K" && P <= 16 {
		regs := []VecVirtual{ZMM(), ZMM(), ZMM(), ZMM()}
		for i, m := range []Mem{nibbleMask, bits45Mask, q6kShiftLow, q6kShiftHigh} {
			VMOVDQU64(m, regs[i])
		}
		q6m4, q6m30, q6shl, q6shr = regs[0], regs[1], regs[2], regs[3]
	}

	Label("loop")
	TESTQ(nb, nb)
	JZ(LabelRef("done"))
	acc := make([]VecVirtual, P) // pair t·R+r
	for p := range acc {
		acc[p] = ZMM()
		VPXORD(acc[p], acc[p], acc[p])
	}
	// Per row, the words whose products with a token's bsums make the pair's
	// second sum: Q4_K's mins (each twice: its sub-block's two bsums), Q6_K's
	// scales (for its −32 offset).
	if k4 {
		prefetchNext(rows, R, 0, 1, 2)
	} else {
		prefetchNext(rows, R, 0, 1, 2, 3)
	}
	second := make([]VecVirtual, R)
	for r := 0; r < R; r++ {
		xr := rows.at(r)
		if k4 {
			qsOff := 16
			if typ == "Q5K" {
				qsOff = 48
			}
			u := q4KScalesAt(xr)
			md := XMM()
			VPSHUFB(q4kMinPairs, u, md)
			second[r] = YMM()
			VPMOVZXBW(md, second[r])
			smw := YMM()
			VPMOVZXBW(u, smw)
			sc := ZMM()
			VSHUFI64X2(U8(0), smw.AsZ(), smw.AsZ(), sc)
			for j := 0; j < 4; j++ {
				qq := ZMM()
				VBROADCASTI64X4(xr.Offset(qsOff+32*j), qq)
				VPSRLVW(shr4, qq, qq)
				VPANDD(m4, qq, qq)
				if typ == "Q5K" {
					// Bit 2j (low half) or 2j+1 (high half) of qh[l], as 16.
					hb := ZMM()
					VBROADCASTI64X4(xr.Offset(16), hb)
					VPSRLVW(q5kShiftBits.Offset(64*j), hb, hb)
					VPANDD(ones, hb, hb)
					VPSLLW(U8(4), hb, hb)
					VPORD(hb, qq, qq)
				}
				s := ZMM()
				VPSHUFB(q4kShuf512.Offset(64*j), sc, s)
				for t := 0; t < T; t++ {
					p := ZMM()
					VPMADDUBSW(toks.at(t).Offset(q8KQS+64*j), qq, p)
					raw("VPDPWSSD", s, p, acc[t*R+r])
				}
			}
			continue
		}
		sw := ZMM()
		VPMOVSXBW(xr.Offset(192), sw.AsY())
		second[r] = sw.AsY().(VecVirtual)
		for h := 0; h < 2; h++ {
			ql, qh := ZMM(), ZMM()
			VMOVDQU64(xr.Offset(64*h), ql)
			VBROADCASTI64X4(xr.Offset(128+32*h), qh)
			lo, hi := ZMM(), ZMM()
			VPANDD(q6m4, ql, lo)
			VPSRLW(U8(4), ql, hi)
			VPANDD(q6m4, hi, hi)
			tt := ZMM()
			VPSLLVW(q6shl, qh, tt)
			VPANDD(q6m30, tt, tt)
			VPORD(tt, lo, lo)
			VPSRLVW(q6shr, qh, tt)
			VPANDD(q6m30, tt, tt)
			VPORD(tt, hi, hi)
			for k, v := range []VecVirtual{lo, hi} {
				s := ZMM()
				VMOVDQU64(q6kPerm.Offset(64*(2*h+k)), s)
				VPERMW(sw, s, s)
				for t := 0; t < T; t++ {
					p := ZMM()
					VPMADDUBSW(toks.at(t).Offset(q8KQS+128*h+64*k), v, p)
					raw("VPDPWSSD", s, p, acc[t*R+r])
				}
			}
		}
	}
	// Each pair: [its 16 product lanes folded to 8 | its 8 bsum lanes].
	for t := 0; t < T; t++ {
		for r := 0; r < R; r++ {
			a := acc[t*R+r]
			h := YMM()
			VEXTRACTI64X4(U8(1), a, h)
			VPADDD(a.AsY(), h, h)
			m8 := YMM()
			VPMADDWD(toks.at(t).Offset(q8KBsums), second[r], m8)
			VINSERTI64X4(U8(1), m8, h.AsZ(), a)
		}
	}
	is, ms := reducePairs(acc)
	ydv := tileTokenScales(toks, yd, T)
	if k4 {
		// sum += (f16(x.d)·y.d)·isum − (f16(x.dmin)·y.d)·msum, lane by lane.
		d := tileRowScales(rows, R, 0)
		dm := tileRowScales(rows, R, 2)
		VMULPS(ydv, d, d)
		VMULPS(ydv, dm, dm)
		VCVTDQ2PS(is, is)
		VCVTDQ2PS(ms, ms)
		VMULPS(is, d, d)
		VMULPS(ms, dm, dm)
		VSUBPS(dm, d, d)
		VADDPS(d, sum, sum)
	} else {
		// isum −= 32·Σ scale·bsum; sum += (f16(x.d)·y.d)·isum.
		VPSLLD(U8(5), ms, ms)
		VPSUBD(ms, is, is)
		d := tileRowScales(rows, R, 208)
		VMULPS(ydv, d, d)
		VCVTDQ2PS(is, is)
		VMULPS(is, d, d)
		VADDPS(d, sum, sum)
	}

	if typ == "Q4K" {
		rows.advance(q4KSize)
	} else if typ == "Q5K" {
		rows.advance(q5KSize)
	} else {
		rows.advance(q6KSize)
	}
	toks.advance(q8KSize)
	if T > 1 {
		ADDQ(yds, yd)
	}
	DECQ(nb)
	JMP(LabelRef("loop"))

	Label("done")
	tileStore(sum, R, T)
}
