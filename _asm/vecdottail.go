package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
)

// dotF16VecDotTailAVX512 emits the tails of ggml_vec_dot_f16 (the values after
// the last multiple of 64: each product of two binary16 values, exact in float32,
// added one by one to a float64 sum, rounded to float32 at the end), eight rows
// at a time, a row to each float64 lane: rows of a LoRA adapter's B (rank 16)
// are all tail. out[r] holds the row's float32 sum so far (its first values'),
// rows the row's first tail value, x the tail's n activations; nr is a multiple
// of 8 and n at least 2. Each column of the eight rows is gathered (two columns a
// dword, so that no read goes past a row's tail; an odd last column is the high
// half of the dword before it).
func dotF16VecDotTailAVX512() {
	TEXT("dotF16VecDotTailAVX512", NOSPLIT, "func(out *float32, rows *byte, rb int, x *float32, n int, nr int)")
	Pragma("noescape")
	Doc("dotF16VecDotTailAVX512 adds to out[r] (r < nr, a multiple of 8) the n (at least 2) binary16 values at rows+r·rb times x in ggml_vec_dot_f16's tail order (kernels.dotF16VecDotRows).")
	out, rows, rb, x, n, nr := GP64(), GP64(), GP64(), GP64(), GP64(), GP64()
	Load(Param("out"), out)
	Load(Param("rows"), rows)
	Load(Param("rb"), rb)
	Load(Param("x"), x)
	Load(Param("n"), n)
	Load(Param("nr"), nr)

	// idx: the eight rows' byte offsets r·rb; perm: the even lanes, then the odd.
	idx, perm := YMM(), ZMM()
	VPBROADCASTD(rb.As32(), idx)
	VPMULLD(tailLanes.Offset(0), idx, idx)
	VMOVDQU32(tailPerm.Offset(0), perm)
	rb8 := GP64()
	MOVQ(rb, rb8)
	SHLQ(U8(3), rb8)

	Label("f16tail_rows")
	CMPQ(nr, U8(8))
	JL(LabelRef("f16tail_done"))
	acc := ZMM()
	VCVTPS2PD(Mem{Base: out}, acc)
	p, xp, c := GP64(), GP64(), GP64()
	MOVQ(rows, p)
	MOVQ(x, xp)
	MOVQ(n, c)

	Label("f16tail_pairs")
	CMPQ(c, U8(2))
	JL(LabelRef("f16tail_last"))
	{
		k, g, f, xs, d, h := K(), YMM(), ZMM(), ZMM(), ZMM(), YMM()
		KXNORB(k, k, k)
		VPXORD(g, g, g)
		VPGATHERDD(Mem{Base: p, Index: idx, Scale: 1}, k, g)
		VCVTPH2PS(g, f)
		VBROADCASTSD(Mem{Base: xp}, xs)
		VMULPS(xs, f, f)
		VPERMPS(f, perm, f)
		VCVTPS2PD(f.AsY(), d)
		VADDPD(d, acc, acc)
		VEXTRACTF32X8(U8(1), f, h)
		VCVTPS2PD(h, d)
		VADDPD(d, acc, acc)
	}
	ADDQ(U8(4), p)
	ADDQ(U8(8), xp)
	SUBQ(U8(2), c)
	JMP(LabelRef("f16tail_pairs"))

	Label("f16tail_last")
	CMPQ(c, U8(1))
	JL(LabelRef("f16tail_store"))
	{
		// The last column is the high half of the dword at the one before it.
		k, g, w, f, xs, d := K(), YMM(), XMM(), YMM(), YMM(), ZMM()
		KXNORB(k, k, k)
		VPXORD(g, g, g)
		VPGATHERDD(Mem{Base: p, Index: idx, Scale: 1, Disp: -2}, k, g)
		VPSRLD(U8(16), g, g)
		VPMOVDW(g, w)
		VCVTPH2PS(w, f)
		VBROADCASTSS(Mem{Base: xp}, xs)
		VMULPS(xs, f, f)
		VCVTPS2PD(f, d)
		VADDPD(d, acc, acc)
	}

	Label("f16tail_store")
	r := YMM()
	VCVTPD2PS(acc, r)
	VMOVUPS(r, Mem{Base: out})
	ADDQ(U8(32), out)
	ADDQ(rb8, rows)
	SUBQ(U8(8), nr)
	JMP(LabelRef("f16tail_rows"))

	Label("f16tail_done")
	VZEROUPPER()
	RET()
}

var tailLanes, tailPerm Mem

func vecDotTailConstants() {
	var lanes, perm []byte
	for i := range 8 {
		lanes = append(lanes, byte(i), 0, 0, 0)
	}
	for i := range 16 {
		j := 2 * i
		if i >= 8 {
			j = 2*(i-8) + 1
		}
		perm = append(perm, byte(j), 0, 0, 0)
	}
	tailLanes = rodata("f16TailLanes", lanes)
	tailPerm = rodata("f16TailPerm", perm)
}
