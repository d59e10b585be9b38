package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// dotF16VecDotTail16AVX2 emits dotF16VecDotTail16AVX2t<tokens>, the AVX2 form of
// dotF16VecDotTail16AVX512t<tokens> (the same arguments and bits): eight rows at
// a time, each 8×16 block of binary16 values (a row to a register) transposed
// within the 128-bit lanes by three rounds of word, dword and qword unpacks, so
// that register j holds column j of the eight rows in its low lane and column
// 8+j in its high one; each column is converted to float64 once for all the
// tokens and added, column after column, to each token's two float64
// accumulators of four rows by a fused multiply-add of the broadcast float64
// activation (exact products, so ggml's sumf += (ggml_float)(x·y)). nr is a
// multiple of 8, n of 16.
func dotF16VecDotTail16AVX2(tokens int) {
	if tokens < 1 || tokens > 2 {
		panic("dotF16VecDotTail16AVX2: 1 or 2 tokens")
	}
	name := fmt.Sprintf("dotF16VecDotTail16AVX2t%d", tokens)
	TEXT(name, NOSPLIT, "func(out *float32, os int, rows *byte, rb int, x *float64, xs int, n int, nr int)")
	Pragma("noescape")
	Doc(name + " adds to out[t·os+r] (r < nr, a multiple of 8; t < " + fmt.Sprint(tokens) + ") the n (a multiple of 16) binary16 values at rows+r·rb times the float64s x[t·xs…] in ggml_vec_dot_f16's tail order (kernels.dotF16VecDotRows), as dotF16VecDotTail16AVX512t" + fmt.Sprint(tokens) + ".")
	out, os, rows, rb, x, xs, n, nr := GP64(), GP64(), GP64(), GP64(), GP64(), GP64(), GP64(), GP64()
	Load(Param("out"), out)
	Load(Param("os"), os)
	Load(Param("rows"), rows)
	Load(Param("rb"), rb)
	Load(Param("x"), x)
	Load(Param("xs"), xs)
	Load(Param("n"), n)
	Load(Param("nr"), nr)
	SHLQ(U8(2), os)
	SHLQ(U8(3), xs)
	rb3 := GP64()
	LEAQ(Mem{Base: rb, Index: rb, Scale: 2}, rb3)

	outMem := func(t, disp int) Mem {
		if t == 1 {
			return Mem{Base: out, Index: os, Scale: 1, Disp: disp}
		}
		return Mem{Base: out, Disp: disp}
	}

	Label(name + "_rows")
	CMPQ(nr, U8(8))
	JL(LabelRef(name + "_done"))
	acc := make([][2]VecVirtual, tokens)
	for t := range acc {
		acc[t] = [2]VecVirtual{YMM(), YMM()}
		VCVTPS2PD(outMem(t, 0), acc[t][0])
		VCVTPS2PD(outMem(t, 16), acc[t][1])
	}
	p, xp, c := GP64(), GP64(), GP64()
	MOVQ(rows, p)
	MOVQ(x, xp)
	MOVQ(n, c)

	Label(name + "_chunk")
	CMPQ(c, U8(16))
	JL(LabelRef(name + "_store"))
	{
		// Row r's 16 values at p + r·rb: rows 4k…4k+3 from q = p + 4k·rb.
		var in [8]VecVirtual
		q := GP64()
		MOVQ(p, q)
		for k := range 2 {
			if k > 0 {
				LEAQ(Mem{Base: q, Index: rb, Scale: 4}, q)
			}
			offs := []Mem{{Base: q}, {Base: q, Index: rb, Scale: 1}, {Base: q, Index: rb, Scale: 2}, {Base: q, Index: rb3, Scale: 1}}
			for h, o := range offs {
				in[4*k+h] = YMM()
				VMOVDQU(o, in[4*k+h])
			}
		}
		cols := transposeF16x8Lanes(in)
		for lane := range 2 {
			for j, v := range cols {
				if lane == 1 {
					// Column 8+j: the high lane, into the register's low one.
					VEXTRACTI128(U8(1), v, v.AsX())
				}
				f, d0, d1 := YMM(), YMM(), YMM()
				VCVTPH2PS(v.AsX(), f)
				VCVTPS2PD(f.AsX(), d0)
				VEXTRACTF128(U8(1), f, f.AsX())
				VCVTPS2PD(f.AsX(), d1)
				col := 8*lane + j
				for t := range acc {
					xm := Mem{Base: xp, Disp: 8 * col}
					if t == 1 {
						xm = Mem{Base: xp, Index: xs, Scale: 1, Disp: 8 * col}
					}
					xb := YMM()
					VBROADCASTSD(xm, xb)
					VFMADD231PD(xb, d0, acc[t][0])
					VFMADD231PD(xb, d1, acc[t][1])
				}
			}
		}
	}
	ADDQ(U8(32), p)
	ADDQ(U32(128), xp)
	SUBQ(U8(16), c)
	JMP(LabelRef(name + "_chunk"))

	Label(name + "_store")
	for t := range acc {
		for h := range 2 {
			r := XMM()
			VCVTPD2PSY(acc[t][h], r)
			VMOVUPS(r, outMem(t, 16*h))
		}
	}
	ADDQ(U8(32), out)
	rb8 := GP64()
	MOVQ(rb, rb8)
	SHLQ(U8(3), rb8)
	ADDQ(rb8, rows)
	SUBQ(U8(8), nr)
	JMP(LabelRef(name + "_rows"))

	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// transposeF16x8Lanes transposes, within each 128-bit lane, the 8×8 binary16
// blocks of in (register r row r, words 0…7 of the low lane columns 0…7, of the
// high lane columns 8…15): register j of the result holds column j of rows 0…7
// in its low lane (word r row r) and column 8+j in its high one. Round 1 pairs
// rows (2i, 2i+1) word by word, round 2 pairs those of rows 4k… dword by dword,
// round 3 the two halves of the rows qword by qword.
func transposeF16x8Lanes(in [8]VecVirtual) [8]VecVirtual {
	// op(b, a, dst) interleaves a's and b's elements (a's first) into dst.
	type op func(b, a, dst Op)
	round := func(src [8]VecVirtual, lo, hi op, pairs [4][2]int) [8]VecVirtual {
		var dst [8]VecVirtual
		for i, pr := range pairs {
			dst[2*i], dst[2*i+1] = YMM(), YMM()
			lo(src[pr[1]], src[pr[0]], dst[2*i])
			hi(src[pr[1]], src[pr[0]], dst[2*i+1])
		}
		return dst
	}
	// Round 1: t[2i], t[2i+1] = rows 2i, 2i+1's columns 0…3, 4…7 (words alternating rows).
	t := round(in, func(b, a, d Op) { VPUNPCKLWD(b, a, d) }, func(b, a, d Op) { VPUNPCKHWD(b, a, d) },
		[4][2]int{{0, 1}, {2, 3}, {4, 5}, {6, 7}})
	// Round 2: pairs (t0, t2) rows 0…3 columns 0…3 → columns 0,1 and 2,3; (t1, t3)
	// → columns 4,5 and 6,7; (t4, t6) and (t5, t7) the same for rows 4…7.
	u := round(t, func(b, a, d Op) { VPUNPCKLDQ(b, a, d) }, func(b, a, d Op) { VPUNPCKHDQ(b, a, d) },
		[4][2]int{{0, 2}, {1, 3}, {4, 6}, {5, 7}})
	// u: columns (0,1) (2,3) (4,5) (6,7) of rows 0…3, then of rows 4…7.
	// Round 3: (u[k], u[k+4]) → columns 2k and 2k+1 of rows 0…7.
	return round(u, func(b, a, d Op) { VPUNPCKLQDQ(b, a, d) }, func(b, a, d Op) { VPUNPCKHQDQ(b, a, d) },
		[4][2]int{{0, 4}, {1, 5}, {2, 6}, {3, 7}})
}
