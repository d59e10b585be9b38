package main

import (
	"encoding/binary"
	"fmt"
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Attention over a binary16 KV cache, a chunk of positions at a time, in three
// kernels (engine/kernels/attend.go drives them): the scores of the chunk, their
// online-softmax factors (attnExpf), and the update of the accumulator. Each gives the
// bits of the Go loop of attnSpanGeneric, operation for operation: the scores'
// products and sums rounded to float32 one by one in attnScore's tree, the
// accumulator updated by a fused multiply-add and rounded to binary16 after every
// update (llama.cpp's order).

var (
	attnNegInf, attnPermSum, attnShift1, attnShift2, attnShift4, attnLast Mem
	expfConsts, attnShift512                                              Mem
)

// Offsets of the float32 constants of expf in expfConsts.
const (
	ecLog2e = 4 * iota
	ecHalf
	ecC1
	ecC2
	ecP0
	ecP1
	ecP2
	ecP3
	ecP4
	ecP5
	ecOne
	ecHi
	ecLo
	ecInf
	ecSign
	ecBias // int32 127
	ecCount
)

func attnConstants() {
	f32s := func(name string, v ...float32) Mem {
		b := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		return rodata(name, b)
	}
	i32s := func(name string, v ...int32) Mem {
		b := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
		}
		return rodata(name, b)
	}
	inf := float32(math.Inf(1))
	attnNegInf = f32s("attnNegInf", -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf)
	// The 8 sums of attnScores come out as o0 o2 o4 o6 | o1 o3 o5 o7.
	attnPermSum = i32s("attnPermSum", 0, 4, 1, 5, 2, 6, 3, 7)
	attnShift1 = i32s("attnShift1", 0, 0, 1, 2, 3, 4, 5, 6)
	attnShift2 = i32s("attnShift2", 0, 0, 0, 1, 2, 3, 4, 5)
	attnShift4 = i32s("attnShift4", 0, 0, 0, 0, 0, 1, 2, 3)
	attnLast = i32s("attnLast", 7, 7, 7, 7, 7, 7, 7, 7)
	// VPERMT2PS indexes shifting 16 lanes up by 1, 2, 4 and 8 (the lanes below
	// from the second table), then VPERMPS's broadcast of lane 15.
	var sh []int32
	for _, k := range []int{1, 2, 4, 8} {
		for l := 0; l < 16; l++ {
			if l < k {
				sh = append(sh, int32(l)) // table 1 (the filler)
			} else {
				sh = append(sh, int32(16+l-k)) // table 2 (the scores)
			}
		}
	}
	for l := 0; l < 16; l++ {
		sh = append(sh, 15)
	}
	attnShift512 = i32s("attnShift512", sh...)
	// expf's constants (engine/kernels/expf.go), each broadcast from here.
	c := make([]float32, ecCount/4)
	c[ecLog2e/4] = 1.44269504088896341
	c[ecHalf/4] = 0.5
	c[ecC1/4] = 0.693359375
	c[ecC2/4] = -2.12194440e-4
	c[ecP0/4] = 1.9875691500e-4
	c[ecP1/4] = 1.3981999507e-3
	c[ecP2/4] = 8.3334519073e-3
	c[ecP3/4] = 4.1665795894e-2
	c[ecP4/4] = 1.6666665459e-1
	c[ecP5/4] = 5.0000001201e-1
	c[ecOne/4] = 1
	c[ecHi/4] = 88.72283
	c[ecLo/4] = -87.33654
	c[ecInf/4] = inf
	c[ecSign/4] = math.Float32frombits(1 << 31)
	c[ecBias/4] = math.Float32frombits(127)
	if len(c)%2 == 1 {
		c = append(c, 0)
	}
	expfConsts = f32s("expfConsts", c...)
}

// ec broadcasts expf constant off to a ymm.
func ec(off int) VecVirtual {
	r := YMM()
	VBROADCASTSS(expfConsts.Offset(off), r)
	return r
}

// attnExpD holds attnExpf's float64 constants (engine/kernels/expf.go), each
// repeated 8 times (a 512-bit operand, its first half a 256-bit one), at the
// offsets below; attnExpClamp its float32 bounds 100 and −104, 16 of each.
var attnExpD, attnExpClamp Mem

const (
	edLog2e = 64 * iota
	edLn2Hi
	edLn2Lo
	edPoly                   // 13 slots: 1/12!, 1/11!, …, 1/0!
	edBias  = edPoly + 64*13 // int64 1023
	edCount = edBias + 64
)

func attnExpConstants() {
	var d []float64
	d = append(d, 1.44269504088896338700e+00, 6.93147180369123816490e-01, 1.90821492927058770002e-10)
	var poly [13]float64
	f := 1.0
	for n := 0; n <= 12; n++ {
		if n > 0 {
			f *= float64(n)
		}
		poly[12-n] = 1 / f
	}
	d = append(d, poly[:]...)
	b := make([]byte, 0, edCount)
	for _, x := range d {
		for i := 0; i < 8; i++ {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
		}
	}
	for i := 0; i < 8; i++ {
		b = binary.LittleEndian.AppendUint64(b, 1023)
	}
	attnExpD = rodata("attnExpD", b)
	c := make([]byte, 0, 128)
	for _, x := range []float32{100, -104} {
		for i := 0; i < 16; i++ {
			c = binary.LittleEndian.AppendUint32(c, math.Float32bits(x))
		}
	}
	attnExpClamp = rodata("attnExpClamp", c)
}

// expPD computes attnExpf's float64 steps on h (4 or 8 float64 lanes, the
// clamped x) in place of p, and returns p·2**k: k = round(h·log2e), r = h − k·ln2
// (two fused steps), Horner's fused steps over the 13 coefficients, 2**k built
// from k's bits. ki is a register of half h's width for k as int32s and kq one of
// h's width for it as int64s.
func expPD(h, ki, kq VecVirtual, avx512 bool) VecVirtual {
	kk, r, p := newLike(h), newLike(h), newLike(h)
	VMULPD(attnExpD.Offset(edLog2e), h, kk)
	if avx512 {
		VRNDSCALEPD(U8(8), kk, kk) // nearest, ties to even
	} else {
		VROUNDPD(U8(8), kk, kk)
	}
	VMOVAPD(h, r)
	VFNMADD231PD(attnExpD.Offset(edLn2Hi), kk, r)
	VFNMADD231PD(attnExpD.Offset(edLn2Lo), kk, r)
	VMOVUPD(attnExpD.Offset(edPoly), p)
	for i := 1; i < 13; i++ {
		VFMADD213PD(attnExpD.Offset(edPoly+64*i), r, p)
	}
	if avx512 {
		VCVTPD2DQ(kk, ki)
	} else {
		VCVTPD2DQY(kk, ki)
	}
	VPMOVSXDQ(ki, kq)
	VPADDQ(attnExpD.Offset(edBias), kq, kq)
	VPSLLQ(U8(52), kq, kq)
	VMULPD(kq, p, p)
	return p
}

func newLike(v VecVirtual) VecVirtual {
	if v.Size() == 64 {
		return ZMM()
	}
	return YMM()
}

// expf8CR returns attnExpf of the 8 float32 of x (engine/kernels/expf.go): every
// operation that of the Go code, in its order, hence its bits.
func expf8CR(x VecVirtual) VecVirtual {
	t := YMM()
	VMINPS(attnExpClamp, x, t)
	VMAXPS(attnExpClamp.Offset(64), t, t)
	var out [2]VecVirtual
	for i := range out {
		h := YMM()
		if i == 0 {
			VCVTPS2PD(t.AsX(), h)
		} else {
			hx := XMM()
			VEXTRACTF128(U8(1), t, hx)
			VCVTPS2PD(hx, h)
		}
		p := expPD(h, XMM(), YMM(), false)
		out[i] = XMM()
		VCVTPD2PSY(p, out[i])
	}
	res := YMM()
	VINSERTF128(U8(1), out[1], out[0].AsY(), res)
	m := YMM()
	VCMPPS(U8(3), x, x, m) // NaN
	VBLENDVPS(m, x, res, res)
	return res
}

// expfZCR is expf8CR on the 16 float32 of a 512-bit register.
func expfZCR(x VecVirtual) VecVirtual {
	t := ZMM()
	VMINPS(attnExpClamp, x, t)
	VMAXPS(attnExpClamp.Offset(64), t, t)
	var out [2]VecVirtual
	for i := range out {
		h := ZMM()
		if i == 0 {
			VCVTPS2PD(t.AsY(), h)
		} else {
			hy := YMM()
			VEXTRACTF64X4(U8(1), t, hy)
			VCVTPS2PD(hy, h)
		}
		p := expPD(h, YMM(), ZMM(), true)
		out[i] = YMM()
		VCVTPD2PS(p, out[i])
	}
	res := ZMM()
	VINSERTF64X4(U8(1), out[1], out[0].AsZ(), res)
	m := K()
	VCMPPS(U8(3), x, x, m) // NaN
	VMOVAPS(x, m, res)
	return res
}

// attnScores emits the scores of n positions: s[j] = sum8(lanes_j)·scale, lane l
// of position j summing k_j[i]·q[i] over i%8 == l in index order. Eight positions
// go side by side; their lanes are then reduced together in sum8's order.
func attnScores() {
	TEXT("attnScoresF16", NOSPLIT, "func(k *uint16, q *float32, hd, n, stride int, scale float32, s *float32)")
	Pragma("noescape")
	Doc("attnScoresF16 sets s[j] = scale·(q·k_j) for j < n, k_j the hd binary16 values at",
		"k + j·stride (hd a multiple of 8), as attnSpanGeneric computes it.")
	k := Load(Param("k"), GP64())
	q := Load(Param("q"), GP64())
	hd := Load(Param("hd"), GP64())
	n := Load(Param("n"), GP64())
	sb := Load(Param("stride"), GP64())
	SHLQ(U8(1), sb)
	scx := Load(Param("scale"), XMM())
	s := Load(Param("s"), GP64())
	sc := YMM()
	VBROADCASTSS(scx, sc)
	s3 := GP64()
	LEAQ(Mem{Base: sb, Index: sb, Scale: 2}, s3)

	// Head sizes that are a multiple of 64 take llama.cpp's K·q order (attnScore).
	TESTQ(U32(63), hd)
	JNZ(LabelRef("blk8"))
	attnScoresGGML(k.(GPVirtual), q.(GPVirtual), hd.(GPVirtual), n.(GPVirtual), sb.(GPVirtual), s3, s.(GPVirtual), sc)

	Label("blk8")
	CMPQ(n, U8(8))
	JL(LabelRef("tail"))
	// The next 8 keys, on their way from memory while these are computed (a
	// key's two lines: head sizes up to 64 in full).
	pf := GP64()
	LEAQ(Mem{Base: k, Index: sb, Scale: 8}, pf)
	for i := 0; i < 2; i++ {
		for _, m := range []Mem{{Base: pf}, {Base: pf, Index: sb, Scale: 1}, {Base: pf, Index: sb, Scale: 2}, {Base: pf, Index: s3, Scale: 1}} {
			PREFETCHT0(m)
			PREFETCHT0(m.Offset(64))
		}
		if i == 0 {
			LEAQ(Mem{Base: pf, Index: sb, Scale: 4}, pf)
		}
	}
	r0, r4, qp, g := GP64(), GP64(), GP64(), GP64()
	MOVQ(k, r0)
	LEAQ(Mem{Base: k, Index: sb, Scale: 4}, r4)
	MOVQ(q, qp)
	MOVQ(hd, g)
	var acc [8]VecVirtual
	for p := range acc {
		acc[p] = YMM()
		VXORPS(acc[p], acc[p], acc[p])
	}
	addr := func(p int) Mem {
		switch p {
		case 0:
			return Mem{Base: r0}
		case 1:
			return Mem{Base: r0, Index: sb, Scale: 1}
		case 2:
			return Mem{Base: r0, Index: sb, Scale: 2}
		case 3:
			return Mem{Base: r0, Index: s3, Scale: 1}
		case 4:
			return Mem{Base: r4}
		case 5:
			return Mem{Base: r4, Index: sb, Scale: 1}
		case 6:
			return Mem{Base: r4, Index: sb, Scale: 2}
		}
		return Mem{Base: r4, Index: s3, Scale: 1}
	}
	Label("g8")
	qg := YMM()
	VMOVUPS(Mem{Base: qp}, qg)
	for p := range acc {
		t := YMM()
		VCVTPH2PS(addr(p), t)
		VMULPS(qg, t, t)
		VADDPS(t, acc[p], acc[p])
	}
	ADDQ(U8(16), r0)
	ADDQ(U8(16), r4)
	ADDQ(U8(32), qp)
	SUBQ(U8(8), g)
	JNZ(LabelRef("g8"))
	idx := YMM()
	VMOVDQU(attnPermSum, idx)
	x := hsum8x8Scaled(acc[:], idx, sc)
	VMOVUPS(x, Mem{Base: s})
	ADDQ(U8(32), s)
	LEAQ(Mem{Base: k, Index: sb, Scale: 8}, k)
	SUBQ(U8(8), n)
	JMP(LabelRef("blk8"))

	Label("tail")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	MOVQ(k, r0)
	MOVQ(q, qp)
	MOVQ(hd, g)
	a := YMM()
	VXORPS(a, a, a)
	Label("g1")
	t := YMM()
	VCVTPH2PS(Mem{Base: r0}, t)
	VMULPS(Mem{Base: qp}, t, t)
	VADDPS(t, a, a)
	ADDQ(U8(16), r0)
	ADDQ(U8(32), qp)
	SUBQ(U8(8), g)
	JNZ(LabelRef("g1"))
	s1 := hsum8(a)
	VMULSS(sc.AsX(), s1, s1)
	VMOVSS(s1, Mem{Base: s})
	ADDQ(U8(4), s)
	ADDQ(sb, k)
	DECQ(n)
	JMP(LabelRef("tail"))

	Label("done")
	VZEROUPPER()
	RET()
}

// attnScoresGGML emits attnScoresF16 for a head size that is a multiple of 64, in
// attnScore's order: for each position, lane l of H_g sums lane l of the products
// of values 8g..8g+7 of each 64 (the first block's product, then each later
// block's added), u = ((H0+H4)+(H2+H6)) + ((H1+H5)+(H3+H7)); 8 positions' u go
// through hsum8x8Scaled (sum8's order, then ·scale), a lone one through hsum8.
// It returns through "done".
func attnScoresGGML(k, q, hd, n, sb, s3, s GPVirtual, sc VecVirtual) {
	local := AllocLocal(8 * 32)
	idx := YMM()
	VMOVDQU(attnPermSum, idx)
	kp := GP64()
	CMPQ(hd, U8(64))
	JNE(LabelRef("gblk8"))
	Label("hblk8")
	CMPQ(n, U8(8))
	JL(LabelRef("gtail"))
	{
		pf := GP64()
		LEAQ(Mem{Base: k, Index: sb, Scale: 8}, pf)
		for i := 0; i < 2; i++ {
			for _, m := range []Mem{{Base: pf}, {Base: pf, Index: sb, Scale: 1}, {Base: pf, Index: sb, Scale: 2}, {Base: pf, Index: s3, Scale: 1}} {
				PREFETCHT0(m)
				PREFETCHT0(m.Offset(64))
			}
			if i == 0 {
				LEAQ(Mem{Base: pf, Index: sb, Scale: 4}, pf)
			}
		}
		r4 := GP64()
		LEAQ(Mem{Base: k, Index: sb, Scale: 4}, r4)
		at := func(p int) Mem {
			base := k
			if p >= 4 {
				base = r4
			}
			switch p % 4 {
			case 1:
				return Mem{Base: base, Index: sb, Scale: 1}
			case 2:
				return Mem{Base: base, Index: sb, Scale: 2}
			case 3:
				return Mem{Base: base, Index: s3, Scale: 1}
			}
			return Mem{Base: base}
		}
		// The tree a half at a time, the half's four query slices in registers:
		// G_a + G_b as a product then a fused multiply-add (the products are
		// exact: the bits of a sum of two products).
		var qr [4]VecVirtual
		pairSum := func(p, ga, gb int, qa, qb VecVirtual) VecVirtual {
			r := YMM()
			VCVTPH2PS(at(p).Offset(16*ga), r)
			VMULPS(qa, r, r)
			x := YMM()
			VCVTPH2PS(at(p).Offset(16*gb), x)
			VFMADD231PS(qb, x, r)
			return r
		}
		for i, g := range []int{0, 4, 2, 6} {
			qr[i] = YMM()
			VMOVUPS(Mem{Base: q, Disp: 32 * g}, qr[i])
		}
		var u [8]VecVirtual
		for p := range u {
			u[p] = pairSum(p, 0, 4, qr[0], qr[1])
			t := pairSum(p, 2, 6, qr[2], qr[3])
			VADDPS(t, u[p], u[p])
		}
		for i, g := range []int{1, 5, 3, 7} {
			VMOVUPS(Mem{Base: q, Disp: 32 * g}, qr[i])
		}
		for p := range u {
			b := pairSum(p, 1, 5, qr[0], qr[1])
			c := pairSum(p, 3, 7, qr[2], qr[3])
			VADDPS(c, b, b)
			VADDPS(b, u[p], u[p])
		}
		ix, scl := YMM(), YMM()
		VMOVDQU(attnPermSum, ix)
		scp, err := Param("scale").Resolve()
		if err != nil {
			panic(err)
		}
		VBROADCASTSS(scp.Addr, scl) // VEX: no SSE instruction between AVX ones
		VMOVUPS(hsum8x8Scaled(u[:], ix, scl), Mem{Base: s})
		ADDQ(U8(32), s)
		LEAQ(Mem{Base: k, Index: sb, Scale: 8}, k)
		SUBQ(U8(8), n)
		JMP(LabelRef("hblk8"))
	}
	Label("gblk8")
	CMPQ(n, U8(8))
	JL(LabelRef("gtail"))
	pf := GP64()
	LEAQ(Mem{Base: k, Index: sb, Scale: 8}, pf)
	for i := 0; i < 2; i++ {
		for _, m := range []Mem{{Base: pf}, {Base: pf, Index: sb, Scale: 1}, {Base: pf, Index: sb, Scale: 2}, {Base: pf, Index: s3, Scale: 1}} {
			PREFETCHT0(m)
			PREFETCHT0(m.Offset(64))
		}
		if i == 0 {
			LEAQ(Mem{Base: pf, Index: sb, Scale: 4}, pf)
		}
	}
	MOVQ(k, kp)
	for p := 0; p < 8; p++ {
		u := attnScoreLanes(Mem{Base: kp}, q, hd, fmt.Sprintf("gp%d", p))
		VMOVUPS(u, local.Offset(32*p))
		if p < 7 {
			ADDQ(sb, kp)
		}
	}
	var y [8]VecVirtual
	for p := range y {
		y[p] = YMM()
		VMOVUPS(local.Offset(32*p), y[p])
	}
	VMOVUPS(hsum8x8Scaled(y[:], idx, sc), Mem{Base: s})
	ADDQ(U8(32), s)
	LEAQ(Mem{Base: k, Index: sb, Scale: 8}, k)
	SUBQ(U8(8), n)
	JMP(LabelRef("gblk8"))

	Label("gtail")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	u := attnScoreLanes(Mem{Base: k}, q, hd, "gt")
	s1 := hsum8(u)
	VMULSS(sc.AsX(), s1, s1)
	VMOVSS(s1, Mem{Base: s})
	ADDQ(U8(4), s)
	ADDQ(sb, k)
	DECQ(n)
	JMP(LabelRef("gtail"))
}

// attnScoreLanes emits the 8 lanes u of attnScore for the key at kp (hd binary16
// values, hd a multiple of 64) and the rounded query at q; tag names its labels.
// With hd nil the head size is 64.
func attnScoreLanes(kp Mem, q, hd GPVirtual, tag string) VecVirtual {
	var h [8]VecVirtual
	for g := range h {
		h[g] = YMM()
		VCVTPH2PS(kp.Offset(16*g), h[g])
		VMULPS(Mem{Base: q, Disp: 32 * g}, h[g], h[g])
	}
	if hd == nil {
		return attnTree(h[:])
	}
	r, kb, qb := GP64(), GP64(), GP64()
	MOVQ(hd, r)
	SUBQ(U8(64), r)
	JZ(LabelRef(tag + "d"))
	LEAQ(kp.Offset(128), kb)
	LEAQ(Mem{Base: q, Disp: 256}, qb)
	Label(tag + "l")
	for g := range h {
		t := YMM()
		VCVTPH2PS(Mem{Base: kb, Disp: 16 * g}, t)
		VMULPS(Mem{Base: qb, Disp: 32 * g}, t, t)
		VADDPS(t, h[g], h[g])
	}
	ADDQ(U32(128), kb)
	ADDQ(U32(256), qb)
	SUBQ(U8(64), r)
	JNZ(LabelRef(tag + "l"))
	Label(tag + "d")
	return attnTree(h[:])
}

// attnScoreLanes64 is attnScoreLanes for head size 64, its products taken in the
// tree's order so that four registers suffice (8 positions' lanes then stay in
// registers on AVX2).
// q(g) is the query's values 8g..8g+7: in memory or a register.
func attnScoreLanes64(kp Mem, q func(g int) Op) VecVirtual {
	prod := func(g int) VecVirtual {
		x := YMM()
		VCVTPH2PS(kp.Offset(16*g), x)
		VMULPS(q(g), x, x)
		return x
	}
	add := func(a, b VecVirtual) VecVirtual {
		VADDPS(b, a, a)
		return a
	}
	a := add(prod(0), prod(4))
	a = add(a, add(prod(2), prod(6)))
	b := add(prod(1), prod(5))
	b = add(b, add(prod(3), prod(7)))
	return add(a, b)
}

// attnTree adds 8 lane vectors (or their 512-bit pairs) in attnScore's tree,
// ((h0+h4)+(h2+h6)) + ((h1+h5)+(h3+h7)), into h[0].
func attnTree(h []VecVirtual) VecVirtual {
	VADDPS(h[4], h[0], h[0])
	VADDPS(h[6], h[2], h[2])
	VADDPS(h[2], h[0], h[0])
	VADDPS(h[5], h[1], h[1])
	VADDPS(h[7], h[3], h[3])
	VADDPS(h[3], h[1], h[1])
	VADDPS(h[1], h[0], h[0])
	return h[0]
}

// attnExp emits the online-softmax step of a chunk of scores: with m_j the
// running maximum before position j (m_{-1} = *mx), a new maximum (s_j > m_j)
// gives e_j = expf(m_j − s_j) and sets bit j of the mask, any other score gives
// e_j = expf(s_j − m_j); s is overwritten by e, *mx becomes the maximum. The
// running maxima come from a prefix-maximum scan, 8 scores at a time, which NaN
// scores do not enter (the Go loop never takes one as its maximum).
func attnExp() {
	TEXT("attnExpF16", NOSPLIT, "func(s *float32, n int, mx *float32, mask *uint8)")
	Pragma("noescape")
	Doc("attnExpF16 replaces the n scores at s (padded with -Inf to a multiple of 8) by",
		"their online-softmax factors and sets the bits of the new maxima in mask",
		"(one byte per 8 scores), starting from and updating the running maximum *mx.")
	s := Load(Param("s"), GP64())
	n := Load(Param("n"), GP64())
	mxp := Load(Param("mx"), GP64())
	mk := Load(Param("mask"), GP64())
	m := YMM()
	VBROADCASTSS(Mem{Base: mxp}, m)
	ninf := YMM()
	VMOVUPS(attnNegInf, ninf)
	Label("loop")
	TESTQ(n, n)
	JLE(LabelRef("done"))
	sv := YMM()
	VMOVUPS(Mem{Base: s}, sv)
	u, sm := YMM(), YMM()
	VCMPPS(U8(3), sv, sv, u)
	VBLENDVPS(u, ninf, sv, sm) // NaN scores as -Inf
	// Inclusive prefix maximum.
	for i, sh := range []Mem{attnShift1, attnShift2, attnShift4} {
		idx, t := YMM(), YMM()
		VMOVDQU(sh, idx)
		VPERMPS(sm, idx, t)
		VBLENDPS(U8(1<<(1<<i)-1), ninf, t, t)
		VMAXPS(t, sm, sm)
	}
	// Exclusive, from the running maximum.
	idx, e := YMM(), YMM()
	VMOVDQU(attnShift1, idx)
	VPERMPS(sm, idx, e)
	VBLENDPS(U8(1), ninf, e, e)
	VMAXPS(m, e, e)
	last := YMM()
	VMOVDQU(attnLast, idx)
	VPERMPS(sm, idx, last)
	VMAXPS(last, m, m)
	nw, d, nd := YMM(), YMM(), YMM()
	VCMPPS(U8(0x1e), e, sv, nw) // s > m_j (GT_OQ)
	VSUBPS(e, sv, d)
	VXORPS(ec(ecSign), d, nd)
	VBLENDVPS(nw, nd, d, d)
	VMOVUPS(expf8CR(d), Mem{Base: s})
	bits := GP32()
	VMOVMSKPS(nw, bits)
	MOVB(bits.As8(), Mem{Base: mk})
	ADDQ(U8(32), s)
	INCQ(mk)
	SUBQ(U8(8), n)
	JMP(LabelRef("loop"))
	Label("done")
	VMOVSS(m.AsX(), Mem{Base: mxp})
	VZEROUPPER()
	RET()
}

// round16 rounds the float32 lanes of a to binary16 precision (nearest even) in
// place.
func round16(a VecVirtual) {
	var h VecVirtual
	switch a.Size() {
	case 64:
		h = YMM()
	default:
		h = XMM()
	}
	VCVTPS2PH(U8(0), a, h)
	VCVTPH2PS(h, a)
}

// attnAccum emits the accumulator update of a chunk: for each position j, a new
// maximum (mask bit j) scales acc by e_j, rounding to binary16, then acc gets
// v_j·(1 or e_j) added, rounded again; sum becomes sum·e_j + 1 or sum + e_j. The
// columns go in slabs of 64 (eight registers, so that eight rounding chains
// overlap), then of 8.
func attnAccum(name string, avx512 bool) {
	if avx512 {
		evex = true
		defer func() { evex = false }()
	}
	TEXT(name, NOSPLIT, "func(acc *float32, v *uint16, hd, n, stride int, e *float32, mask uint64, sum *float32)")
	Pragma("noescape")
	Doc(name+" adds the n positions of a chunk to the accumulator acc (hd float32s",
		"of binary16 values, hd a multiple of 8) and to *sum: v_j is the hd binary16",
		"values at v + j·stride, e_j and bit j of mask come from attnExpF16.")
	acc := Load(Param("acc"), GP64())
	v := Load(Param("v"), GP64())
	hd := Load(Param("hd"), GP64())
	n := Load(Param("n"), GP64())
	sb := Load(Param("stride"), GP64())
	SHLQ(U8(1), sb)
	e := Load(Param("e"), GP64())
	mask := Load(Param("mask"), GP64())
	sump := Load(Param("sum"), GP64())

	// The sum, a scalar chain of its own.
	sum, one := XMM(), XMM()
	VMOVSS(Mem{Base: sump}, sum)
	VMOVSS(expfConsts.Offset(ecOne), one)
	j := GP64()
	XORQ(j, j)
	Label("sum")
	CMPQ(j, n)
	JGE(LabelRef("sumdone"))
	BTQ(j, mask)
	JCS(LabelRef("sumnew"))
	VADDSS(Mem{Base: e, Index: j, Scale: 4}, sum, sum)
	INCQ(j)
	JMP(LabelRef("sum"))
	Label("sumnew")
	VMULSS(Mem{Base: e, Index: j, Scale: 4}, sum, sum)
	VADDSS(one, sum, sum)
	INCQ(j)
	JMP(LabelRef("sum"))
	Label("sumdone")
	VMOVSS(sum, Mem{Base: sump})

	type slab struct{ regs, width int } // width: floats per register
	slabs := []slab{{8, 8}, {1, 8}}
	if avx512 {
		slabs = []slab{{8, 16}, {4, 16}, {1, 8}}
	}
	for _, sl := range slabs {
		name := func(s string) string { return fmt.Sprintf("%s%d_%d", s, sl.regs, sl.width) }
		vec := func() VecVirtual {
			if sl.width == 16 {
				return ZMM()
			}
			return YMM()
		}
		cols := sl.regs * sl.width
		Label(name("slab"))
		CMPQ(hd, U32(cols))
		JL(LabelRef(name("slabdone")))
		a := make([]VecVirtual, sl.regs)
		for i := range a {
			a[i] = vec()
			VMOVUPS(Mem{Base: acc, Disp: 4 * sl.width * i}, a[i])
		}
		vp := GP64()
		MOVQ(v, vp)
		XORQ(j, j)
		Label(name("pos"))
		CMPQ(j, n)
		JGE(LabelRef(name("posdone")))
		for l := 0; l < (2*cols+63)/64; l++ { // the value 8 positions on
			PREFETCHT0(Mem{Base: vp, Index: sb, Scale: 8, Disp: 64 * l})
		}
		ej := vec()
		VBROADCASTSS(Mem{Base: e, Index: j, Scale: 4}, ej)
		BTQ(j, mask)
		JCS(LabelRef(name("new")))
		for i := range a {
			w := vec()
			VCVTPH2PS(Mem{Base: vp, Disp: 2 * sl.width * i}, w)
			VFMADD231PS(ej, w, a[i]) // ggml_vec_mad_f16's fused multiply-add
			round16(a[i])
		}
		Label(name("next"))
		ADDQ(sb, vp)
		INCQ(j)
		JMP(LabelRef(name("pos")))
		Label(name("new"))
		for i := range a {
			VMULPS(ej, a[i], a[i])
			round16(a[i])
			w := vec()
			VCVTPH2PS(Mem{Base: vp, Disp: 2 * sl.width * i}, w)
			VADDPS(w, a[i], a[i])
			round16(a[i])
		}
		JMP(LabelRef(name("next")))
		Label(name("posdone"))
		for i := range a {
			VMOVUPS(a[i], Mem{Base: acc, Disp: 4 * sl.width * i})
		}
		ADDQ(U32(4*cols), acc)
		ADDQ(U32(2*cols), v)
		SUBQ(U32(cols), hd)
		JMP(LabelRef(name("slab")))
		Label(name("slabdone"))
	}
	VZEROUPPER()
	RET()
}

// attnExp512 emits attnExp on 512-bit registers, 16 scores a step (expfZCR): the
// same operations, lane by lane, hence the same bits.
func attnExp512() {
	evex = true
	defer func() { evex = false }()
	TEXT("attnExpF16AVX512", NOSPLIT, "func(s *float32, n int, mx *float32, mask *uint8)")
	Pragma("noescape")
	Doc("attnExpF16AVX512 is attnExpF16 16 scores a step (s padded with -Inf to a multiple",
		"of 16; a mask byte per 8 scores).")
	s := Load(Param("s"), GP64())
	n := Load(Param("n"), GP64())
	mxp := Load(Param("mx"), GP64())
	mk := Load(Param("mask"), GP64())
	c := map[int]VecVirtual{}
	for _, off := range []int{ecInf, ecSign} {
		c[off] = ZMM()
		VBROADCASTSS(expfConsts.Offset(off), c[off])
	}
	ninf := ZMM()
	VXORPS(c[ecInf], c[ecSign], ninf) // −Inf
	m := ZMM()
	VBROADCASTSS(Mem{Base: mxp}, m)

	Label("loop")
	TESTQ(n, n)
	JLE(LabelRef("done"))
	sv := ZMM()
	VMOVUPS(Mem{Base: s}, sv)
	k := K()
	VCMPPS(U8(3), sv, sv, k) // NaN
	sm := ZMM()
	VMOVAPS(sv, sm)
	VMOVAPS(ninf, k, sm) // NaN scores as -Inf
	// Inclusive prefix maximum: lanes shifted up by 1, 2, 4, 8, -Inf coming in.
	for i := 0; i < 4; i++ {
		idx, t := ZMM(), ZMM()
		VMOVDQU32(attnShift512.Offset(64*i), idx)
		VMOVAPS(ninf, t)
		VPERMT2PS(sm, idx, t)
		VMAXPS(t, sm, sm)
	}
	// Exclusive, from the running maximum.
	idx, e := ZMM(), ZMM()
	VMOVDQU32(attnShift512, idx)
	VMOVAPS(m, e)
	VPERMT2PS(sm, idx, e)
	VMAXPS(m, e, e)
	last := ZMM()
	VMOVDQU32(attnShift512.Offset(4*64), idx)
	VPERMPS(sm, idx, last)
	VMAXPS(last, m, m)
	VCMPPS(U8(0x1e), e, sv, k) // s > m_j (GT_OQ)
	d, nd := ZMM(), ZMM()
	VSUBPS(e, sv, d)
	VXORPS(c[ecSign], d, nd)
	VMOVAPS(nd, k, d)
	bits := GP32()
	KMOVW(k, bits)
	MOVW(bits.As16(), Mem{Base: mk})

	p := expfZCR(d) // attnExpf, as expf8CR
	VMOVUPS(p, Mem{Base: s})

	ADDQ(U8(64), s)
	ADDQ(U8(2), mk)
	SUBQ(U8(16), n)
	JMP(LabelRef("loop"))
	Label("done")
	VMOVSS(m.AsX(), Mem{Base: mxp})
	VZEROUPPER()
	RET()
}

// attnFused emits, for head size 64 on 512-bit registers, the accumulator update of
// a chunk of up to 64 positions fused with the scores of the next chunk: each position's
// update is a chain of dependent steps (add, round to binary16 and back), and the
// next chunk's scores, independent of it, run in its shadow (one key's after each
// update). Each half keeps its own operations and order (attnAccumF16AVX512's slab
// of four registers, attnScoreLanes' tree), so the bits are theirs.
func attnFused() {
	evex = true
	defer func() { evex = false }()
	TEXT("attnFusedF16AVX512", NOSPLIT, "func(acc *float32, v *uint16, n int, e *float32, mask uint64, sum *float32, k *uint16, q *float32, nsc, stride int, scale float32, s *float32)")
	Pragma("noescape")
	Doc("attnFusedF16AVX512 is attnAccumF16AVX512 over n positions (a multiple of 8, at",
		"most 64) of a head of 64 and, in the same loop, attnScoresF16 over the nsc (a",
		"multiple of 8, at most n) positions at k into s.")
	accp := Load(Param("acc"), GP64())
	v := Load(Param("v"), GP64())
	e := Load(Param("e"), GP64())
	mask := Load(Param("mask"), GP64())
	sump := Load(Param("sum"), GP64())
	k := Load(Param("k"), GP64())
	q := Load(Param("q"), GP64())
	nsc := Load(Param("nsc"), GP64())
	SHRQ(U8(3), nsc) // blocks of 8 scores
	sb := Load(Param("stride"), GP64())
	SHLQ(U8(1), sb)
	scx := Load(Param("scale"), XMM())
	s := Load(Param("s"), GP64())
	sc := YMM()
	VBROADCASTSS(scx, sc)
	s3 := GP64()
	LEAQ(Mem{Base: sb, Index: sb, Scale: 2}, s3)
	var a [4]VecVirtual
	for i := range a {
		a[i] = ZMM()
		VMOVUPS(Mem{Base: accp, Disp: 64 * i}, a[i])
	}
	sum, one := XMM(), XMM()
	VMOVSS(Mem{Base: sump}, sum)
	VMOVSS(expfConsts.Offset(ecOne), one)
	perm := YMM()
	vmovdqu(attnPermSum, perm)
	var qv [8]VecVirtual // the query, 8 values a register
	for g := range qv {
		qv[g] = YMM()
		VMOVUPS(Mem{Base: q, Disp: 32 * g}, qv[g])
	}
	j := GP64() // the position in the chunk
	XORQ(j, j)
	b := GP64() // the block of 8
	XORQ(b, b)

	// accum emits position j's update (attnAccumF16AVX512's slab of 4).
	accum := func(tag string) {
		ej := ZMM()
		VBROADCASTSS(Mem{Base: e, Index: j, Scale: 4}, ej)
		BTQ(j, mask)
		JCS(LabelRef("new" + tag))
		for i := range a {
			w := ZMM()
			VCVTPH2PS(Mem{Base: v, Disp: 32 * i}, w)
			VFMADD231PS(ej, w, a[i])
			round16(a[i])
		}
		VADDSS(Mem{Base: e, Index: j, Scale: 4}, sum, sum)
		Label("back" + tag)
		ADDQ(sb, v)
		INCQ(j)
	}
	// The new-maximum paths, out of line.
	newPaths := func(tags []string) {
		for _, tag := range tags {
			Label("new" + tag)
			ej := ZMM()
			VBROADCASTSS(Mem{Base: e, Index: j, Scale: 4}, ej)
			for i := range a {
				VMULPS(ej, a[i], a[i])
				round16(a[i])
				w := ZMM()
				VCVTPH2PS(Mem{Base: v, Disp: 32 * i}, w)
				VADDPS(w, a[i], a[i])
				round16(a[i])
			}
			VMULSS(Mem{Base: e, Index: j, Scale: 4}, sum, sum)
			VADDSS(one, sum, sum)
			JMP(LabelRef("back" + tag))
		}
	}
	var tags []string

	Label("block")
	nParam, err := Param("n").Resolve()
	if err != nil {
		panic(err)
	}
	CMPQ(j, nParam.Addr) // j = 8·b: the chunk's n positions are done
	JGE(LabelRef("done"))
	CMPQ(b, nsc)
	JGE(LabelRef("plain"))
	// Eight updates, each followed by one group of 8 of the 8 next scores.
	{
		r0, r4 := GP64(), GP64()
		MOVQ(k, r0)
		LEAQ(Mem{Base: k, Index: sb, Scale: 4}, r4)
		addr := func(p int) Mem {
			base := r0
			if p >= 4 {
				base = r4
			}
			switch p % 4 {
			case 1:
				return Mem{Base: base, Index: sb, Scale: 1}
			case 2:
				return Mem{Base: base, Index: sb, Scale: 2}
			case 3:
				return Mem{Base: base, Index: s3, Scale: 1}
			}
			return Mem{Base: base}
		}
		var sa [8]VecVirtual
		for p := range sa {
			tag := fmt.Sprintf("f%d", p)
			tags = append(tags, tag)
			accum(tag)
			sa[p] = attnScoreLanes64(addr(p), func(g int) Op { return qv[g] })
		}
		VMOVUPS(hsum8x8Scaled(sa[:], perm, sc), Mem{Base: s})
		ADDQ(U8(32), s)
		LEAQ(Mem{Base: k, Index: sb, Scale: 8}, k)
	}
	INCQ(b)
	JMP(LabelRef("block"))

	Label("plain")
	for g := 0; g < 8; g++ {
		tag := fmt.Sprintf("p%d", g)
		tags = append(tags, tag)
		accum(tag)
	}
	INCQ(b)
	JMP(LabelRef("block"))

	newPaths(tags)

	Label("done")
	for i := range a {
		VMOVUPS(a[i], Mem{Base: accp, Disp: 64 * i})
	}
	VMOVSS(sum, Mem{Base: sump})
	VZEROUPPER()
	RET()
}

// hsum8x8Scaled is attnScores' reduction of 8 positions' lanes in sum8's order,
// then ·scale; the sums come out in order. Under evex (the fused kernel) it uses
// EVEX-encodable instructions.
func hsum8x8Scaled(acc []VecVirtual, perm, sc VecVirtual) VecVirtual {
	// b_p = lo(a_p) + hi(a_p), two positions per register.
	var b [4]VecVirtual
	for i := range b {
		lo, hi := YMM(), YMM()
		if evex {
			VSHUFF32X4(U8(0), acc[2*i+1], acc[2*i], lo)
			VSHUFF32X4(U8(3), acc[2*i+1], acc[2*i], hi)
		} else {
			VPERM2F128(U8(0x20), acc[2*i+1], acc[2*i], lo)
			VPERM2F128(U8(0x31), acc[2*i+1], acc[2*i], hi)
		}
		b[i] = YMM()
		VADDPS(hi, lo, b[i])
	}
	// c_p = (b_p[0]+b_p[2], b_p[1]+b_p[3]): c0 c2 | c1 c3 and c4 c6 | c5 c7.
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
	VADDPS(y, x, x) // o0 o2 o4 o6 | o1 o3 o5 o7
	VPERMPS(x, perm, x)
	VMULPS(sc, x, x)
	return x
}
