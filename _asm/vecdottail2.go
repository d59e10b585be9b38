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

// dotF32VecDotTailAVX2 emits the first multiple of 8 values of the tails of
// ggml_vec_dot_f32 on AVX-512 (the values after the last multiple of 64, each
// product rounded, then added to the float32 sum in order: GCC's vectorized
// in-order reduction of sumf += x[i]*y[i]; kernels.f32TailAdd), eight rows at a time, a
// row to each float32 lane: each 8×8 block of float32 values (a row to a
// register) is transposed by unpcklps/unpckhps, unpcklpd/unpckhpd and
// vperm2f128, and its columns added in order. out[r] holds the row's sum so far,
// rows the row's first tail value, x the tail's n (a multiple of 8) activations;
// nr is a multiple of 8.
func dotF32VecDotTailAVX2() {
	TEXT("dotF32VecDotTailAVX2", NOSPLIT, "func(out *float32, rows *byte, rb int, x *float32, n int, nr int)")
	Pragma("noescape")
	Doc("dotF32VecDotTailAVX2 adds to out[r] (r < nr, a multiple of 8) the n (a multiple of 8) float32 values at rows+r·rb times x, each product rounded, then added, in ggml_vec_dot_f32's tail order (kernels.dotF32VecDotTail).")
	out, rows, rb, x, n, nr := GP64(), GP64(), GP64(), GP64(), GP64(), GP64()
	Load(Param("out"), out)
	Load(Param("rows"), rows)
	Load(Param("rb"), rb)
	Load(Param("x"), x)
	Load(Param("n"), n)
	Load(Param("nr"), nr)
	rb3 := GP64()
	LEAQ(Mem{Base: rb, Index: rb, Scale: 2}, rb3)

	Label("f32tail_rows")
	CMPQ(nr, U8(8))
	JL(LabelRef("f32tail_done"))
	acc := YMM()
	VMOVUPS(Mem{Base: out}, acc)
	p, xp, c := GP64(), GP64(), GP64()
	MOVQ(rows, p)
	MOVQ(x, xp)
	MOVQ(n, c)

	Label("f32tail_chunk")
	CMPQ(c, U8(8))
	JL(LabelRef("f32tail_store"))
	{
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
				VMOVUPS(o, in[4*k+h])
			}
		}
		// Round 1: t[2i], t[2i+1] = rows 2i, 2i+1's columns 0,1 and 2,3 (4,5 and 6,7
		// in the high lane), alternating rows.
		var t, u, cols [8]VecVirtual
		for i := range 4 {
			t[2*i], t[2*i+1] = YMM(), YMM()
			VUNPCKLPS(in[2*i+1], in[2*i], t[2*i])
			VUNPCKHPS(in[2*i+1], in[2*i], t[2*i+1])
		}
		// Round 2: u[c] (c < 4) = column c of rows 0…3 (c+4 in the high lane), u[4+c]
		// the same of rows 4…7.
		for h := range 2 {
			for k := range 2 {
				a, b := t[4*h+k], t[4*h+k+2]
				u[4*h+2*k], u[4*h+2*k+1] = YMM(), YMM()
				VUNPCKLPD(b, a, u[4*h+2*k])
				VUNPCKHPD(b, a, u[4*h+2*k+1])
			}
		}
		// Round 3: column c of rows 0…7 from the low lanes, c+4 from the high.
		for k := range 4 {
			cols[k], cols[k+4] = YMM(), YMM()
			VPERM2F128(U8(0x20), u[4+k], u[k], cols[k])
			VPERM2F128(U8(0x31), u[4+k], u[k], cols[k+4])
		}
		for j, v := range cols {
			xb := YMM()
			VBROADCASTSS(Mem{Base: xp, Disp: 4 * j}, xb)
			VMULPS(xb, v, v)
			VADDPS(v, acc, acc)
		}
	}
	ADDQ(U8(32), p)
	ADDQ(U8(32), xp)
	SUBQ(U8(8), c)
	JMP(LabelRef("f32tail_chunk"))

	Label("f32tail_store")
	VMOVUPS(acc, Mem{Base: out})
	ADDQ(U8(32), out)
	rb8 := GP64()
	MOVQ(rb, rb8)
	SHLQ(U8(3), rb8)
	ADDQ(rb8, rows)
	SUBQ(U8(8), nr)
	JMP(LabelRef("f32tail_rows"))

	Label("f32tail_done")
	VZEROUPPER()
	RET()
}

// dotQ8_0VecDotAVX2 emits ggml_vec_dot_q8_0_q8_0's AVX2 order (which its AVX-512
// builds take) for nr rows of nb Q8_0 blocks each against one token's q8Blocks:
// per block the products' signs moved to the activations (VPSIGNB), pairs summed
// by VPMADDUBSW and fours by VPMADDWD, converted to float and added to the 8
// lanes by a fused multiply-add of the two scales' product; the lanes reduced as
// sum8 (hsum_float_8).
func dotQ8_0VecDotAVX2() {
	TEXT("dotQ8_0VecDotAVX2", NOSPLIT, "func(out *float32, rows *byte, rb int, y *byte, nb int, nr int)")
	Pragma("noescape")
	Doc("dotQ8_0VecDotAVX2 sets out[r] (r < nr) to the nb Q8_0 blocks at rows+r·rb times the q8Blocks at y in ggml_vec_dot_q8_0_q8_0's order (kernels.dotQ8_0VecDotGeneric).")
	out, rows, rb, y, nb, nr := GP64(), GP64(), GP64(), GP64(), GP64(), GP64()
	Load(Param("out"), out)
	Load(Param("rows"), rows)
	Load(Param("rb"), rb)
	Load(Param("y"), y)
	Load(Param("nb"), nb)
	Load(Param("nr"), nr)
	ones := YMM()
	VPCMPEQW(ones, ones, ones)
	VPSRLW(U8(15), ones, ones) // 16-bit ones

	Label("q80vd_rows")
	TESTQ(nr, nr)
	JZ(LabelRef("q80vd_done"))
	acc := YMM()
	VXORPS(acc, acc, acc)
	p, yp, c := GP64(), GP64(), GP64()
	MOVQ(rows, p)
	MOVQ(y, yp)
	MOVQ(nb, c)

	Label("q80vd_blocks")
	TESTQ(c, c)
	JZ(LabelRef("q80vd_store"))
	{
		wq, ax, sy := YMM(), YMM(), YMM()
		VMOVDQU(Mem{Base: p, Disp: 2}, wq)
		VPSIGNB(wq, wq, ax)
		VMOVDQU(Mem{Base: yp, Disp: q8QS}, sy)
		VPSIGNB(wq, sy, sy)
		VPMADDUBSW(sy, ax, ax)
		VPMADDWD(ones, ax, ax)
		f := YMM()
		VCVTDQ2PS(ax, f)
		h := GP32()
		MOVWLZX(Mem{Base: p}, h)
		dx := XMM()
		VMOVD(h, dx)
		VCVTPH2PS(dx, dx)
		VMULSS(Mem{Base: yp}, dx, dx)
		d := YMM()
		VBROADCASTSS(dx, d)
		VFMADD231PS(f, d, acc)
	}
	ADDQ(U8(34), p)
	ADDQ(U8(q8Size), yp)
	DECQ(c)
	JMP(LabelRef("q80vd_blocks"))

	Label("q80vd_store")
	s := hsum8(acc)
	VMOVSS(s, Mem{Base: out})
	ADDQ(U8(4), out)
	ADDQ(rb, rows)
	DECQ(nr)
	JMP(LabelRef("q80vd_rows"))

	Label("q80vd_done")
	VZEROUPPER()
	RET()
}
