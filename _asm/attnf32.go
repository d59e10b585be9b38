package main

import (
	"encoding/binary"
	"fmt"
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Attention with a float32 accumulator (a sequence's f32 mode; engine/kernels
// attend_f32.go drives these and holds the Go reference, attnChunkF32Generic, whose
// every operation and order these kernels keep): a chunk of up to 64 positions for
// one query of head size 64, its keys and values already float32. Products and sums
// are rounded one by one (no FMA), so the Go reference gives the same bits.

var attnF32Perm, attnF32Iota Mem

func attnF32Constants() {
	i32s := func(name string, v ...int32) Mem {
		b := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
		}
		return rodata(name, b)
	}
	// The transposed reduction of 16 positions' lanes (attnChunkF32) leaves position
	// p's sum in lane attnF32Perm[p].
	attnF32Perm = i32s("attnF32Perm", 0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15)
	var iota []int32
	for j := 0; j < 64; j++ {
		iota = append(iota, int32(math.Float32bits(float32(j))))
	}
	attnF32Iota = i32s("attnF32Iota", iota...)
}

// expfZ returns expf of the 16 float32 of x (engine/kernels/expf.go: Cephes'
// expf, float32 attention's); c holds expf's constants broadcast, zero a zero
// register.
func expfZ(c map[int]VecVirtual, zero, x VecVirtual) VecVirtual {
	t := ZMM()
	VMULPS(c[ecLog2e], x, t)
	VADDPS(c[ecHalf], t, t)
	fl := ZMM()
	VRNDSCALEPS(U8(0x09), t, fl) // floor
	r, u := ZMM(), ZMM()
	VMULPS(c[ecC1], fl, u)
	VSUBPS(u, x, r)
	VMULPS(c[ecC2], fl, u)
	VSUBPS(u, r, r)
	p := ZMM()
	VMOVAPS(c[ecP0], p)
	for _, cc := range []int{ecP1, ecP2, ecP3, ecP4, ecP5} {
		VMULPS(r, p, p)
		VADDPS(c[cc], p, p)
	}
	VMULPS(r, p, p)
	VMULPS(r, p, p)
	VADDPS(r, p, p)
	VADDPS(c[ecOne], p, p)
	ni, h, b := ZMM(), ZMM(), ZMM()
	VCVTTPS2DQ(fl, ni)
	VPSRLD(U8(31), ni, h)
	VPADDD(ni, h, h)
	VPSRAD(U8(1), h, h)
	VPSUBD(h, ni, b)
	VPADDD(c[ecBias], h, h)
	VPSLLD(U8(23), h, h)
	VPADDD(c[ecBias], b, b)
	VPSLLD(U8(23), b, b)
	VMULPS(h, p, p)
	VMULPS(b, p, p)
	k := K()
	VCMPPS(U8(0x11), c[ecLo], x, k) // x < lo
	VMOVAPS(zero, k, p)
	VCMPPS(U8(0x1e), c[ecHi], x, k) // x > hi
	VMOVAPS(c[ecInf], k, p)
	VCMPPS(U8(3), x, x, k) // NaN
	VMOVAPS(x, k, p)
	return p
}

// hsumTree16 returns (in lane 0 of an xmm) the sum of x's 16 lanes in the tree of
// engine/kernels' tree16: lane r plus lane r+8, then r+4, r+2, r+1.
func hsumTree16(x VecVirtual) VecVirtual {
	y := YMM()
	VEXTRACTF64X4(U8(1), x, y)
	VADDPS(y, x.AsY(), y)
	z := XMM()
	VEXTRACTF32X4(U8(1), y, z)
	VADDPS(z, y.AsX(), z)
	w := XMM()
	VMOVHLPS(z, z, w)
	VADDPS(w, z, z)
	VMOVSHDUP(z, w)
	VADDSS(w, z, z)
	return z
}

// attnChunkF32 emits attnChunkF32AVX512: one query of head size 64 against a chunk
// of m positions (1 ≤ m ≤ 64), keys and values float32 rows of 64.
func attnChunkF32() { attnChunkF32Kernel(false) }

// attnChunkF32F16 emits attnChunkF32F16AVX512: attnChunkF32AVX512 with the keys and
// values read as binary16 from the cache (4 groups of 16 rows, each row stride
// elements after the one before) and converted in registers, exactly, right
// before each product: the same operations in the same order, so the same bits.
func attnChunkF32F16() { attnChunkF32Kernel(true) }

func attnChunkF32Kernel(direct bool) {
	evex = true
	defer func() { evex = false }()
	var kf, vf, kp, vp, kn, sb Register
	if direct {
		TEXT("attnChunkF32F16AVX512", NOSPLIT, "func(q *float32, kp, vp, kn *[4]*uint16, stride, m int, acc, st, p *float32)")
		Pragma("noescape")
		Doc("attnChunkF32F16AVX512 is attnChunkF32AVX512 with binary16 keys and values read",
			"from the cache: group g (g < 4) of 16 positions has its rows at kp[g] and vp[g],",
			"stride elements apart (all 16 rows of each group readable, those from m on any",
			"value), converted to float32 in registers. kn holds the next chunk's key rows (or",
			"any readable rows), only prefetched.")
	} else {
		TEXT("attnChunkF32AVX512", NOSPLIT, "func(q, kf, vf *float32, m int, acc, st, p *float32)")
		Pragma("noescape")
		Doc("attnChunkF32AVX512 is attnChunkF32Generic for head size 64: it adds positions",
			"0..m-1 of a chunk (keys and values the float32 rows of 64 at kf and vf; kf holds 64",
			"rows, those from m on any finite or not) to the state of query q (scaled):",
			"accumulator acc, st[0] the running maximum, st[1] the sum; p is 64 floats of scratch.")
	}
	qp := Load(Param("q"), GP64())
	if direct {
		kp = Load(Param("kp"), GP64())
		vp = Load(Param("vp"), GP64())
		kn = Load(Param("kn"), GP64())
		sb = Load(Param("stride"), GP64())
		SHLQ(U8(1), sb) // bytes
	} else {
		kf = Load(Param("kf"), GP64())
		vf = Load(Param("vf"), GP64())
	}
	m := Load(Param("m"), GP64())
	accp := Load(Param("acc"), GP64())
	stp := Load(Param("st"), GP64())
	pp := Load(Param("p"), GP64())

	var q [4]VecVirtual
	for b := range q {
		q[b] = ZMM()
		VMOVUPS(Mem{Base: qp, Disp: 64 * b}, q[b])
	}
	perm := ZMM()
	VMOVDQU32(attnF32Perm, perm)
	// The scores of 16 positions at a time: position j's 16 lanes sum its
	// products over the 4 blocks of 16 in order; then the 16 positions' lanes are
	// reduced together, half against half (lanes r and r+8, r+4, r+2, r+1), and
	// permuted into position order.
	var s [4]VecVirtual
	for g := 0; g < 4; g++ {
		var x [16]VecVirtual
		var kr, pv, pk Register
		if direct {
			kr = GP64()
			MOVQ(Mem{Base: kp, Disp: 8 * g}, kr)
			// The rows are a stride apart (a KV head's 128 bytes of each
			// position's row of all heads), too far apart for the hardware's
			// prefetchers: while the group's keys are read, its values (needed
			// after the softmax) and the next group's keys are prefetched, so
			// that their misses overlap this group's work instead of stalling
			// their own.
			pv = GP64()
			MOVQ(Mem{Base: vp, Disp: 8 * g}, pv)
			if g < 3 {
				pk = GP64()
				MOVQ(Mem{Base: kp, Disp: 8 * (g + 1)}, pk)
			}
		}
		for j := range x {
			x[j] = ZMM()
			if direct {
				// The row's binary16, converted exactly: the products are those
				// of the float32 rows.
				for b := 0; b < 4; b++ {
					t := ZMM()
					VCVTPH2PS(Mem{Base: kr, Disp: 32 * b}, t)
					if b == 0 {
						VMULPS(t, q[0], x[j])
						continue
					}
					VMULPS(t, q[b], t)
					VADDPS(t, x[j], x[j])
				}
				PREFETCHT0(Mem{Base: pv})
				PREFETCHT0(Mem{Base: pv, Disp: 64})
				if g < 3 {
					PREFETCHT0(Mem{Base: pk})
					PREFETCHT0(Mem{Base: pk, Disp: 64})
				}
				if j < 15 {
					ADDQ(sb, kr)
					ADDQ(sb, pv)
					if g < 3 {
						ADDQ(sb, pk)
					}
				}
				continue
			}
			row := Mem{Base: kf, Disp: (16*g + j) * 256}
			VMULPS(row, q[0], x[j])
			for b := 1; b < 4; b++ {
				t := ZMM()
				VMULPS(row.Offset(64*b), q[b], t)
				VADDPS(t, x[j], x[j])
			}
		}
		var y [8]VecVirtual
		for i := range y {
			a, b := ZMM(), ZMM()
			VSHUFF32X4(U8(0x44), x[i+8], x[i], a)
			VSHUFF32X4(U8(0xee), x[i+8], x[i], b)
			y[i] = a
			VADDPS(b, a, y[i])
		}
		var z [4]VecVirtual
		for i := range z {
			a, b := ZMM(), ZMM()
			VSHUFF32X4(U8(0x88), y[i+4], y[i], a)
			VSHUFF32X4(U8(0xdd), y[i+4], y[i], b)
			z[i] = a
			VADDPS(b, a, z[i])
		}
		var w [2]VecVirtual
		for i := range w {
			a, b := ZMM(), ZMM()
			VUNPCKLPD(z[i+2], z[i], a)
			VUNPCKHPD(z[i+2], z[i], b)
			w[i] = a
			VADDPS(b, a, w[i])
		}
		a, b := ZMM(), ZMM()
		VSHUFPS(U8(0x88), w[1], w[0], a)
		VSHUFPS(U8(0xdd), w[1], w[0], b)
		VADDPS(b, a, a)
		s[g] = ZMM()
		VPERMPS(a, perm, s[g])
	}

	c := map[int]VecVirtual{}
	for _, off := range []int{ecLog2e, ecHalf, ecC1, ecC2, ecP0, ecP1, ecP2, ecP3, ecP4, ecP5, ecOne, ecHi, ecLo, ecInf, ecSign, ecBias} {
		c[off] = ZMM()
		VBROADCASTSS(expfConsts.Offset(off), c[off])
	}
	ninf := ZMM()
	VXORPS(c[ecInf], c[ecSign], ninf) // −Inf
	zero := ZMM()
	VPXORD(zero, zero, zero)
	// Positions from m on: −Inf.
	mx := XMM()
	VCVTSI2SSQ(m, mx, mx)
	mv := ZMM()
	VBROADCASTSS(mx, mv)
	for g := range s {
		k := K()
		VCMPPS(U8(0x02), attnF32Iota.Offset(64*g), mv, k) // m <= j (LE_OS)
		VMOVAPS(ninf, k, s[g])
	}
	// The new maximum: the running one's and the chunk's.
	t := ZMM()
	VMAXPS(s[1], s[0], t)
	t2 := ZMM()
	VMAXPS(s[3], s[2], t2)
	VMAXPS(t2, t, t)
	y := YMM()
	VEXTRACTF64X4(U8(1), t, y)
	VMAXPS(y, t.AsY(), y)
	x := XMM()
	VEXTRACTF32X4(U8(1), y, x)
	VMAXPS(x, y.AsX(), x)
	x2 := XMM()
	VMOVHLPS(x, x, x2)
	VMAXPS(x2, x, x)
	VMOVSHDUP(x, x2)
	VMAXSS(x2, x, x)
	old := XMM()
	VMOVSS(Mem{Base: stp}, old)
	VMAXSS(old, x, x)
	VMOVSS(x, Mem{Base: stp})
	M := ZMM()
	VBROADCASTSS(x, M)
	// The factor of what came before, exp(old − M), in every lane.
	ov := ZMM()
	VBROADCASTSS(old, ov)
	VSUBPS(M, ov, ov)
	f := expfZ(c, zero, ov)
	var p [4]VecVirtual
	for g := range s {
		VSUBPS(M, s[g], s[g])
		p[g] = expfZ(c, zero, s[g])
		VMOVUPS(p[g], Mem{Base: pp, Disp: 64 * g})
	}
	VADDPS(p[1], p[0], p[0])
	VADDPS(p[2], p[0], p[0])
	VADDPS(p[3], p[0], p[0])
	cs := hsumTree16(p[0])
	sum := XMM()
	VMOVSS(Mem{Base: stp, Disp: 4}, sum)
	VMULSS(f.AsX(), sum, sum)
	VADDSS(cs, sum, sum)
	VMOVSS(sum, Mem{Base: stp, Disp: 4})

	// The accumulator: scaled by f, then each position's values in order.
	var a [4]VecVirtual
	for b := range a {
		a[b] = ZMM()
		VMULPS(Mem{Base: accp, Disp: 64 * b}, f, a[b])
	}
	if direct {
		// Group by group: min(16, m) positions from vp[g], then the rest.
		// Meanwhile the next chunk's keys are prefetched, row for row: its
		// first group would otherwise start cold.
		vr, n, sixteen, nk := GP64(), GP64(), GP64(), GP64()
		MOVQ(U32(16), sixteen)
		for g := 0; g < 4; g++ {
			MOVQ(Mem{Base: vp, Disp: 8 * g}, vr)
			MOVQ(Mem{Base: kn, Disp: 8 * g}, nk)
			MOVQ(m, n)
			CMPQ(m, sixteen)
			CMOVQGT(sixteen, n)
			SUBQ(n, m)
			Label(fmt.Sprintf("posf16_%d", g))
			pj := ZMM()
			VBROADCASTSS(Mem{Base: pp}, pj)
			for b := range a {
				t := ZMM()
				VCVTPH2PS(Mem{Base: vr, Disp: 32 * b}, t)
				VMULPS(t, pj, t)
				VADDPS(t, a[b], a[b])
			}
			PREFETCHT0(Mem{Base: nk})
			PREFETCHT0(Mem{Base: nk, Disp: 64})
			ADDQ(U8(4), pp)
			ADDQ(sb, vr)
			ADDQ(sb, nk)
			DECQ(n)
			JNZ(LabelRef(fmt.Sprintf("posf16_%d", g)))
			if g < 3 {
				TESTQ(m, m)
				JZ(LabelRef("donef16"))
			}
		}
		Label("donef16")
	} else {
		Label("pos")
		pj := ZMM()
		VBROADCASTSS(Mem{Base: pp}, pj)
		for b := range a {
			t := ZMM()
			VMULPS(Mem{Base: vf, Disp: 64 * b}, pj, t)
			VADDPS(t, a[b], a[b])
		}
		ADDQ(U8(4), pp)
		ADDQ(U32(256), vf)
		DECQ(m)
		JNZ(LabelRef("pos"))
	}
	for b := range a {
		VMOVUPS(a[b], Mem{Base: accp, Disp: 64 * b})
	}
	VZEROUPPER()
	RET()
}

// attnCvtF32 emits attnCvtF32AVX512: m rows of hd binary16 keys and values (hd a
// multiple of 16), stride elements apart, to float32 rows of hd.
func attnCvtF32() {
	evex = true
	defer func() { evex = false }()
	TEXT("attnCvtF32AVX512", NOSPLIT, "func(k, v *uint16, stride, m, hd int, kf, vf *float32)")
	Pragma("noescape")
	Doc("attnCvtF32AVX512 converts m rows of hd binary16 values (hd a multiple of 16) at k",
		"and v, stride elements apart, to float32 rows of hd at kf and vf.")
	k := Load(Param("k"), GP64())
	v := Load(Param("v"), GP64())
	sb := Load(Param("stride"), GP64())
	SHLQ(U8(1), sb)
	m := Load(Param("m"), GP64())
	hd := Load(Param("hd"), GP64())
	SHLQ(U8(2), hd) // bytes of a float32 row
	kf := Load(Param("kf"), GP64())
	vf := Load(Param("vf"), GP64())
	Label("row")
	i, o := GP64(), GP64()
	XORQ(i, i)
	XORQ(o, o)
	Label("col")
	a, b := ZMM(), ZMM()
	VCVTPH2PS(Mem{Base: k, Index: i, Scale: 1}, a)
	VCVTPH2PS(Mem{Base: v, Index: i, Scale: 1}, b)
	VMOVUPS(a, Mem{Base: kf, Index: o, Scale: 1})
	VMOVUPS(b, Mem{Base: vf, Index: o, Scale: 1})
	ADDQ(U8(32), i)
	ADDQ(U8(64), o)
	CMPQ(o, hd)
	JL(LabelRef("col"))
	ADDQ(sb, k)
	ADDQ(sb, v)
	ADDQ(o, kf)
	ADDQ(o, vf)
	DECQ(m)
	JNZ(LabelRef("row"))
	VZEROUPPER()
	RET()
}
