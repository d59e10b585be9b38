package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// scoresKVTile emits dot<typ>AVX2x8t<T> (typ Q8_0 or Q4_0, T = 1..4), the AVX2
// counterpart of dot0Outer's tiles for the scores of attention over a quantized K
// cache: 8 K rows (positions) × T queries (a GQA group's heads) as outer
// products, with no horizontal sums. Each block's quants of the 8 rows are
// transposed so that register g holds bytes 4g..4g+3 of every row (lane r: row
// r), and a query's 4 bytes, broadcast, meet them in one VPMADDUBSW and one
// VPMADDWD: lane r of the query's accumulator ends at row r's exact isum.
//   - Q8_0: VPMADDUBSW takes |x| (unsigned) against y·sign(x) (VPSIGNB), dot0Lanes'
//     trick: each pair sums to at most 2·128·127 < 2^15, no saturation.
//   - Q4_0: the nibbles q (0..15) against y, the accumulator started at c·8 =
//     −8·Σy (the q8Block's c is −Σy here: kvState quantizes with shift 0), which
//     makes it Σ(q−8)·y.
//
// The float steps then run on the 8 rows at once, each lane the operations of
// attnScores<typ>AVX2 (hence dot<typ>RowGeneric's bits): per block sum +=
// (f16(x.d)·y.d)·isum, in block order; at the end out = sum·scale.
func scoresKVTile(typ string, T int) {
	name := fmt.Sprintf("dot%sAVX2x8t%d", typ, T)
	TEXT(name, NOSPLIT, "func(x *byte, rb int, y *byte, ys int, nb int, scale float32, out *float32, os int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets out[t·os + r] = attnScores%sAVX2's score of the row at x + r·rb (nb blocks)", name, typ),
		fmt.Sprintf("against the q8Blocks at y + t·ys, times scale, for r < 8, t < %d.", T))
	xs := map[string]int{"Q8_0": q80Size, "Q4_0": q40Size}[typ]
	load := func(name string) GPVirtual {
		r := GP64()
		Load(Param(name), r)
		return r
	}
	rb := load("rb")
	rows := newRowSet(load("x"), rb, 8)
	var ys GPVirtual
	if T > 1 {
		ys = load("ys")
	}
	toks := newRowSet(load("y"), ys, T)
	nb := load("nb")
	sums := make([]VecVirtual, T)
	for t := range sums {
		sums[t] = YMM()
		VXORPS(sums[t], sums[t], sums[t])
	}

	Label("loop")
	TESTQ(nb, nb)
	JZ(LabelRef("done"))
	// transpose loads 16 bytes at off of the 8 rows, lane L of a[k] holding row
	// 4L+k, then transposes the 32-bit groups within the 128-bit lanes: w[g]
	// holds bytes off+4g.. of rows 0..7 in its lanes 0..7.
	transpose := func(off int) [4]VecVirtual {
		var a [4]VecVirtual
		for k := range a {
			lo := XMM()
			VMOVDQU(rows.at(k).Offset(off), lo)
			a[k] = YMM()
			VINSERTI128(U8(1), rows.at(4+k).Offset(off), lo.AsY(), a[k])
		}
		return unpackDwords4(a, YMM)
	}
	accs := make([]VecVirtual, T)
	for t := range accs {
		accs[t] = YMM()
		if typ == "Q8_0" {
			VPXOR(accs[t], accs[t], accs[t])
		} else {
			VPBROADCASTD(toks.at(t).Offset(q8C), accs[t])
			VPSLLD(U8(3), accs[t], accs[t]) // −8·Σy
		}
	}
	// mac adds, for each query, the products of its bytes yoff+4g.. (broadcast)
	// with w (x bytes, lanes the rows) to its accumulator.
	mac := func(w VecVirtual, yoff int) {
		var ax VecVirtual
		if typ == "Q8_0" {
			ax = YMM()
			VPABSB(w, ax)
		}
		for t := range accs {
			yb, p := YMM(), YMM()
			VPBROADCASTD(toks.at(t).Offset(q8QS+yoff), yb)
			if typ == "Q8_0" {
				VPSIGNB(w, yb, yb) // y·sign(x)
				VPMADDUBSW(yb, ax, p)
			} else {
				VPMADDUBSW(yb, w, p)
			}
			VPMADDWD(ones16, p, p)
			VPADDD(p, accs[t], accs[t])
		}
	}
	if typ == "Q8_0" {
		for h := 0; h < 2; h++ {
			w := transpose(2 + 16*h)
			for g := range w {
				mac(w[g], 16*h+4*g)
			}
		}
	} else {
		w := transpose(2)
		for g := range w {
			lo, hi := YMM(), YMM()
			VPAND(nibbleMask, w[g], lo) // elements 4g..4g+3
			mac(lo, 4*g)
			VPSRLW(U8(4), w[g], hi)
			VPAND(nibbleMask, hi, hi) // elements 16+4g..
			mac(hi, 16+4*g)
		}
	}
	// f16(x.d) of the 8 rows.
	g := GP32()
	h, xd := XMM(), YMM()
	MOVWLZX(rows.at(0), g)
	VMOVD(g, h)
	for r := 1; r < 8; r++ {
		VPINSRW(U8(r), rows.at(r), h, h)
	}
	VCVTPH2PS(h, xd)
	for t := range accs {
		d := YMM()
		VBROADCASTSS(toks.at(t), d)
		VMULPS(d, xd, d) // f16(x.d)·y.d
		VCVTDQ2PS(accs[t], accs[t])
		blockStep(typ, accs[t], d, sums[t])
	}
	rows.advance(xs)
	toks.advance(q8Size)
	DECQ(nb)
	JMP(LabelRef("loop"))

	Label("done")
	sc := YMM()
	VBROADCASTSS(NewParamAddr("scale", 40), sc)
	out := load("out")
	var os GPVirtual
	if T > 1 {
		os = load("os")
		SHLQ(U8(2), os)
	}
	for t := range sums {
		VMULPS(sc, sums[t], sums[t])
		VMOVUPS(sums[t], Mem{Base: out})
		if t+1 < T {
			ADDQ(os, out)
		}
	}
	VZEROUPPER()
	RET()
}
