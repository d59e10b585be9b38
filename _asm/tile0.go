package main

import (
	"encoding/binary"
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Q8_0 and Q4_0 tiles (AVX-512): 8 weight rows × 1 token (decoding) and 1 row ×
// 16/8/4 tokens (prompts), with dotQ8_0AVX512's numerics: each pair of blocks is
// one 512-bit step (even block in the low half, odd in the high, a last odd block
// alone in the low half), its 16 int32 sums of 4 products converted and
// fused-multiply-added with f16(x.d)·y.d into the pair's accumulator, whose
// halves are added and reduced in sum8's order at the end. The integer sums are
// taken as VPDPBUSD of unsigned weights (Q8_0: x+128, Q4_0: the nibble q) with
// the signed activations, from an accumulator that starts at −128·Σy (Q8_0) or
// −8·Σy (Q4_0) over the same 4 bytes: the same int32 as the single-row kernels'.
//
// The prompt kernels read the activations as q8Pairs (engine/kernels), which
// q8PairsAVX512 makes from q8Blocks: the 64 quants of a pair of blocks with their
// 4-byte groups interleaved (even block's group i, then the odd block's), −8·Σy over
// each group as int16, and the two scales. The weights get the same interleave,
// and lanes 2i and 2i+1 of the accumulator are lanes i of the even and odd
// accumulators of the single-row kernel, separated again at the end.

const (
	q8PairSize = 128 // q8Pair: qs [64]int8, s [16]int16, d [2]float32, padding
	q8PairS    = 64
	q8PairD    = 96
)

var bytes80, tile0RowIdx, interleaveD, deinterleave Mem

func tile0Constants() {
	bytes80 = rodata("bytes80", repeat(0x80, 64))
	// tile0RowIdx: 8 VPERMPS indexes of 64 bytes; index r gives lanes 0-7
	// element r and lanes 8-15 element 8+r.
	var b []byte
	for r := 0; r < 8; r++ {
		for l := 0; l < 16; l++ {
			b = binary.LittleEndian.AppendUint32(b, uint32(r+8*(l/8)))
		}
	}
	tile0RowIdx = rodata("tile0RowIdx", b)
	b = nil
	for i := 0; i < 8; i++ {
		b = binary.LittleEndian.AppendUint32(b, uint32(i))
		b = binary.LittleEndian.AppendUint32(b, uint32(8+i))
	}
	interleaveD = rodata("interleaveD", b) // dwords e0 o0 e1 o1 ... of [e | o]
	b = nil
	for i := 0; i < 16; i++ {
		b = binary.LittleEndian.AppendUint32(b, uint32(2*(i%8)+i/8))
	}
	deinterleave = rodata("deinterleave", b) // the inverse
}

// hsum8x8 reduces each of 8 ymm in sum8's order, ((a0+a4)+(a2+a6)) +
// ((a1+a5)+(a3+a7)), and returns the 8 sums in a ymm, in order (attnScores'
// transposed reduction with EVEX-encodable instructions).
func hsum8x8(a []VecVirtual) VecVirtual {
	var b [4]VecVirtual
	for i := range b {
		lo, hi := YMM(), YMM()
		VSHUFF32X4(U8(0), a[2*i+1], a[2*i], lo)
		VSHUFF32X4(U8(3), a[2*i+1], a[2*i], hi)
		b[i] = YMM()
		VADDPS(hi, lo, b[i])
	}
	var c [2]VecVirtual
	for i := range c {
		x, y := YMM(), YMM()
		VSHUFPS(U8(0x44), b[2*i+1], b[2*i], x)
		VSHUFPS(U8(0xee), b[2*i+1], b[2*i], y)
		c[i] = YMM()
		VADDPS(y, x, c[i])
	}
	x, y := YMM(), YMM()
	VSHUFPS(U8(0x88), c[1], c[0], x)
	VSHUFPS(U8(0xdd), c[1], c[0], y)
	VADDPS(y, x, x)
	idx := YMM()
	vmovdqu(attnPermSum, idx)
	VPERMPS(x, idx, x)
	return x
}

// tile0Weights loads the unsigned weights of the block pair at m (blocks xs
// bytes apart; only the first when single): Q8_0's quants + 128, Q4_0's
// nibbles in element order.
func tile0Weights(typ string, m Mem, xs int, single bool, c80, m4, shr, zero VecVirtual) VecVirtual {
	return tile0WeightsX(typ, m, xs, single, c80, m4, shr, zero, nil)
}

// tile0WeightsX is tile0Weights, the 4-byte groups of the two blocks interleaved
// by il when it is set (Q8_0 then keeps its signed quants: no +128).
func tile0WeightsX(typ string, m Mem, xs int, single bool, c80, m4, shr, zero, il VecVirtual) VecVirtual {
	w := ZMM()
	if typ == "Q8_0" {
		if single {
			VINSERTI64X4(U8(0), m.Offset(2), zero, w)
		} else {
			vmovdqu(m.Offset(2), w)
			VINSERTI64X4(U8(1), m.Offset(xs+2), w, w)
		}
		if il != nil {
			VPERMD(w, il, w)
			return w
		}
		VPXORD(c80, w, w)
		return w
	}
	VBROADCASTI32X4(m.Offset(2), w)
	if !single {
		VINSERTI32X4(U8(2), m.Offset(xs+2), w, w)
		VINSERTI32X4(U8(3), m.Offset(xs+2), w, w)
	}
	VPSRLVW(shr, w, w)
	VPANDD(m4, w, w)
	if il != nil {
		VPERMD(w, il, w)
	}
	return w
}

// dot0Tile emits the Q8_0 or Q4_0 tile kernel for R = 8 rows × T = 1 token, or
// R = 1 row × T tokens.
func dot0Tile(typ string, R, T int) {
	evex = true
	defer func() { evex = false }()
	name := fmt.Sprintf("dot%sAVX512r%dt%d", typ, R, T)
	xs, konst := q80Size, bytes80
	if typ == "Q4_0" {
		xs, konst = q40Size, eights
	}
	if T == 1 {
		TEXT(name, NOSPLIT, "func(x *byte, rb int, y *byte, nb int, out *float32)")
		Doc(fmt.Sprintf("%s sets out[r] = dot%sAVX512(x + r·rb, y, nb) for r < %d.", name, typ, R))
	} else {
		TEXT(name, NOSPLIT, "func(x *byte, y *byte, ys int, nb int, out *float32, os int)")
		Doc(fmt.Sprintf("%s sets out[t·os] = dot%sAVX512(x, token t, nb) for t < %d, token t's", name, typ, T),
			"blocks as q8Pairs at y + t·ys.")
	}
	Pragma("noescape")
	load := func(name string) GPVirtual {
		r := GP64()
		Load(Param(name), r)
		return r
	}
	var rows, toks rowSet
	var y GPVirtual
	if T == 1 {
		rb := load("rb")
		rows = newRowSet(load("x"), rb, rowSetSize(R))
		y = load("y")
	} else {
		rows = newRowSet(load("x"), nil, 1)
		ys := load("ys")
		toks = newRowSet(load("y"), ys, T)
	}
	nb := load("nb")
	var c80, m4, shr, kc, zero, il VecVirtual
	if typ == "Q8_0" && T == 1 {
		c80 = ZMM()
		VMOVDQU64(bytes80, c80)
	} else if typ == "Q4_0" {
		m4, shr = ZMM(), ZMM()
		VMOVDQU64(nibbleMask, m4)
		VMOVDQU64(q40Shift, shr)
	}
	// (avo takes VPXORD r, r, r for a read of r: registers are zeroed by copying
	// zero, so that their live ranges start where they are set.)
	zero = ZMM()
	VPXORD(zero, zero, zero)
	if T == 1 {
		kc = ZMM()
		VBROADCASTI64X4(konst, kc) // 128 or 8 in every byte
	} else {
		il = ZMM()
		VMOVDQU64(interleaveD, il)
	}
	P := R * T
	acc := make([]VecVirtual, P)
	for p := range acc {
		acc[p] = ZMM()
		VPXORD(acc[p], acc[p], acc[p])
	}

	// step emits one pair of blocks (single: the last, odd block alone; the
	// high halves then add exact zeros).
	step := func(single bool) {
		if T == 1 {
			if typ == "Q8_0" {
				prefetchNext(rows, R, 0, 1)
			} else {
				prefetchNext(rows, R, 0)
			}
			// The token: its quants, −c·Σy over each 4 (c = 128 or 8), and y.d.
			yq, yd := ZMM(), ZMM()
			VBROADCASTSS(Mem{Base: y}, yd)
			if single {
				VINSERTI64X4(U8(0), Mem{Base: y, Disp: q8QS}, zero, yq)
				VINSERTF64X4(U8(1), zero.AsY(), yd, yd)
			} else {
				vmovdqu(Mem{Base: y, Disp: q8QS}, yq)
				VINSERTI64X4(U8(1), Mem{Base: y, Disp: q8Size + q8QS}, yq, yq)
				yo := YMM()
				VBROADCASTSS(Mem{Base: y, Disp: q8Size}, yo)
				VINSERTF64X4(U8(1), yo, yd, yd)
			}
			ns := ZMM()
			VMOVDQA32(zero, ns)
			raw("VPDPBUSD", yq, kc, ns)
			VPSUBD(ns, zero, ns)
			// f16(x.d)·y.d of the 8 rows: lanes 0-7 the even block, 8-15 the odd.
			g := GP32()
			gy := YMM()
			VMOVDQA32(zero.AsY(), gy)
			ge := gy.AsX()
			for r := 0; r < R; r++ {
				MOVWLZX(rows.at(r), g)
				VPINSRW(U8(r), g, ge, ge)
			}
			if !single {
				godd := XMM()
				for r := 0; r < R; r++ {
					MOVWLZX(rows.at(r).Offset(xs), g)
					if r == 0 {
						VMOVD(g, godd)
					} else {
						VPINSRW(U8(r), g, godd, godd)
					}
				}
				VINSERTI32X4(U8(1), godd, gy, gy)
			}
			gd := ZMM()
			VCVTPH2PS(gy, gd)
			VMULPS(yd, gd, gd)
			for r := 0; r < R; r++ {
				w := tile0Weights(typ, rows.at(r), xs, single, c80, m4, shr, zero)
				p := ZMM()
				VMOVDQA32(ns, p)
				raw("VPDPBUSD", yq, w, p)
				VCVTDQ2PS(p, p)
				d := ZMM()
				VMOVDQU64(tile0RowIdx.Offset(64*r), d)
				VPERMPS(gd, d, d)
				VFMADD231PS(p, d, acc[r])
			}
			return
		}
		w := tile0WeightsX(typ, rows.at(0), xs, single, c80, m4, shr, zero, il)
		var k Op
		if typ == "Q8_0" {
			// |x|, and y·sign(x) below (exact: the quantizer makes no −128).
			kk := K()
			VPMOVB2M(w, kk)
			VPABSB(w, w)
			k = kk
		}
		g := GP32()
		xh := XMM()
		VMOVDQA32(zero.AsX(), xh)
		MOVWLZX(rows.at(0), g)
		VPINSRW(U8(0), g, xh, xh)
		if !single {
			MOVWLZX(rows.at(0).Offset(xs), g)
			VPINSRW(U8(1), g, xh, xh)
		}
		xf, xd := XMM(), ZMM()
		VCVTPH2PS(xh, xf)
		VBROADCASTF32X2(xf, xd) // f16(x.d) of the even block, the odd, repeated
		for t := 0; t < T; t++ {
			yt := toks.at(t)
			p := ZMM()
			if typ == "Q8_0" {
				yq := ZMM()
				VMOVDQU8(yt, yq)
				VPSUBB(yq, zero, k, yq)
				VMOVDQA32(zero, p)
				raw("VPDPBUSD", yq, w, p)
			} else {
				VPMOVSXWD(yt.Offset(q8PairS), p) // −8·Σy
				raw("VPDPBUSD", yt, w, p)
			}
			VCVTDQ2PS(p, p)
			d := ZMM()
			VBROADCASTF32X2(yt.Offset(q8PairD), d)
			VMULPS(xd, d, d)
			VFMADD231PS(p, d, acc[t])
		}
	}

	Label("pairs")
	CMPQ(nb, U8(2))
	JL(LabelRef("last"))
	step(false)
	rows.advance(2 * xs)
	if T == 1 {
		ADDQ(U8(2*q8Size), y)
	} else {
		toks.advance(q8PairSize)
	}
	SUBQ(U8(2), nb)
	JMP(LabelRef("pairs"))
	Label("last")
	TESTQ(nb, nb)
	JZ(LabelRef("done"))
	step(true)

	Label("done")
	if T > 1 {
		dl := ZMM()
		VMOVDQU64(deinterleave, dl)
		for p := range acc {
			VPERMPS(acc[p], dl, acc[p])
		}
	}
	// acc0 + acc1 of each pair, reduced in sum8's order.
	a := make([]VecVirtual, P)
	for p := range acc {
		a[p] = YMM()
		VEXTRACTF64X4(U8(1), acc[p], a[p])
		VADDPS(a[p], acc[p].AsY(), a[p])
	}
	out := load("out")
	if T == 1 {
		VMOVUPS(hsum8x8(a), Mem{Base: out})
		VZEROUPPER()
		RET()
		return
	}
	os := load("os")
	SHLQ(U8(2), os)
	for g := 0; g < P; g += 8 {
		in := make([]VecVirtual, 8)
		for i := range in {
			in[i] = a[min(g+i, P-1)]
		}
		o := hsum8x8(in)
		for l := 0; l < min(8, P-g); l++ {
			if l == 4 {
				hi := XMM()
				VEXTRACTF32X4(U8(1), o, hi)
				o = hi
			}
			VEXTRACTPS(U8(l%4), o.AsX(), Mem{Base: out})
			ADDQ(os, out)
		}
	}
	VZEROUPPER()
	RET()
}

// q8Pairs emits the conversion of q8Blocks to q8Pairs for the prompt kernels.
func q8Pairs() {
	evex = true
	defer func() { evex = false }()
	TEXT("q8PairsAVX512", NOSPLIT, "func(y *byte, nb int, out *byte)")
	Pragma("noescape")
	Doc("q8PairsAVX512 converts nb q8Blocks at y to (nb+1)/2 q8Pairs at out (a last odd",
		"block's pair padded with zeros).")
	y := Load(Param("y"), GP64())
	nb := Load(Param("nb"), GP64())
	out := Load(Param("out"), GP64())
	e8, zero, il := ZMM(), ZMM(), ZMM()
	VBROADCASTI64X4(eights, e8)
	VPXORD(zero, zero, zero)
	VMOVDQU64(interleaveD, il)
	pair := func(single bool) {
		q, s := ZMM(), ZMM()
		d := XMM()
		VMOVSS(Mem{Base: y}, d)
		if single {
			VINSERTI64X4(U8(0), Mem{Base: y, Disp: q8QS}, zero, q)
		} else {
			vmovdqu(Mem{Base: y, Disp: q8QS}, q)
			VINSERTI64X4(U8(1), Mem{Base: y, Disp: q8Size + q8QS}, q, q)
			VINSERTPS(U8(0x10), Mem{Base: y, Disp: q8Size}, d, d)
		}
		VPERMD(q, il, q)
		VMOVDQA32(zero, s)
		raw("VPDPBUSD", q, e8, s)
		VPSUBD(s, zero, s)
		VMOVDQU64(q, Mem{Base: out})
		VPMOVDW(s, Mem{Base: out, Disp: q8PairS})
		VMOVQ(d, Mem{Base: out, Disp: q8PairD})
	}
	Label("pairs")
	CMPQ(nb, U8(2))
	JL(LabelRef("last"))
	pair(false)
	ADDQ(U8(2*q8Size), y)
	ADDQ(U32(q8PairSize), out)
	SUBQ(U8(2), nb)
	JMP(LabelRef("pairs"))
	Label("last")
	TESTQ(nb, nb)
	JZ(LabelRef("done"))
	pair(true)
	Label("done")
	VZEROUPPER()
	RET()
}
