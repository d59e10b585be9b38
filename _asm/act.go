package main

import (
	"bytes"
	"encoding/binary"
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Activation kernels: the quantizers that put activation rows in the vec-dot
// formats (q8KBlock, q8Block), binary16/bfloat16 rounding, and SwiGLU. Each gives
// the bits of its Go reference in engine/kernels.

var absMask, permD, ones8, actConsts Mem

// Offsets of the float32 constants in actConsts.
const (
	acNeg127 = 4 * iota
	ac127
	acOne
	acCount
)

func actConstants() {
	absMask = rodata("absMask", bytes.Repeat([]byte{0xff, 0xff, 0xff, 0x7f}, 8))
	ones8 = rodata("ones8", repeat(1, 32))
	b := make([]byte, 32)
	for i, v := range []uint32{0, 4, 1, 5, 2, 6, 3, 7} {
		binary.LittleEndian.PutUint32(b[4*i:], v)
	}
	permD = rodata("permD", b)
	b = make([]byte, 16)
	for i, v := range []float32{-127, 127, 1, 0} {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	actConsts = rodata("actConsts", b)
}

// hmax8 returns the maximum of the 8 float32 of m in every lane (m has no NaN).
func hmax8(m VecVirtual) VecVirtual {
	t := YMM()
	VPERM2F128(U8(1), m, m, t)
	VMAXPS(t, m, m)
	VSHUFPS(U8(0x4e), m, m, t)
	VMAXPS(t, m, m)
	VSHUFPS(U8(0xb1), m, m, t)
	VMAXPS(t, m, m)
	return m
}

// packQ8 converts the 32 float32 at x scaled by s to int32 (nearest, ties to
// even) and packs them with signed saturation to 32 int8 in order.
func packQ8(x Mem, s, perm VecVirtual) VecVirtual {
	var c [4]VecVirtual
	for i := range c {
		c[i] = YMM()
		VMULPS(x.Offset(32*i), s, c[i])
		VCVTPS2DQ(c[i], c[i])
	}
	VPACKSSDW(c[1], c[0], c[0])
	VPACKSSDW(c[3], c[2], c[2])
	VPACKSSWB(c[2], c[0], c[0])
	VPERMD(c[0], perm, c[0])
	return c[0]
}

// quantQ8K emits quantActQ8K over nb consecutive blocks: per 256 floats, the
// value of largest magnitude mx (the first one), iscale = -127/mx, the quants
// nearest(iscale·x) saturated to 127, d = 1/iscale and the sums of each 16
// quants; a block of zeros (or NaNs) gives a zero block.
func quantQ8K() {
	TEXT("quantQ8KAVX2", NOSPLIT, "func(x *float32, nb int, y *byte)")
	Pragma("noescape")
	Doc("quantQ8KAVX2 quantizes the nb·256 float32 at x to nb q8KBlocks at y as quantActQ8K does.")
	x := Load(Param("x"), GP64())
	nb := Load(Param("nb"), GP64())
	y := Load(Param("y"), GP64())
	abs, perm := YMM(), YMM()
	VMOVDQU(absMask, abs)
	VMOVDQU(permD, perm)

	Label("block")
	TESTQ(nb, nb)
	JZ(LabelRef("done"))
	var m [4]VecVirtual
	for i := range m {
		m[i] = YMM()
		VXORPS(m[i], m[i], m[i])
	}
	for k := 0; k < 32; k++ {
		a := YMM()
		VANDPS(Mem{Base: x, Disp: 32 * k}, abs, a)
		VMAXPS(m[k%4], a, m[k%4]) // max(a, m): a NaN leaves m
	}
	VMAXPS(m[1], m[0], m[0])
	VMAXPS(m[3], m[2], m[2])
	VMAXPS(m[2], m[0], m[0])
	amax := hmax8(m[0])
	zero := YMM()
	VXORPS(zero, zero, zero)
	VUCOMISS(zero.AsX(), amax.AsX())
	JNE(LabelRef("nonzero"))
	for off := 0; off < 288; off += 32 {
		VMOVDQU(zero, Mem{Base: y, Disp: off})
	}
	MOVL(U32(0), Mem{Base: y, Disp: 288})
	JMP(LabelRef("next"))

	Label("nonzero")
	// The first element whose magnitude is amax.
	i := GP64()
	XORQ(i, i)
	bits := GP32()
	Label("find")
	a := YMM()
	VANDPS(Mem{Base: x, Index: i, Scale: 4}, abs, a)
	VCMPPS(U8(0), amax, a, a) // EQ_OQ
	VMOVMSKPS(a, bits)
	TESTL(bits, bits)
	JNZ(LabelRef("found"))
	ADDQ(U8(8), i)
	JMP(LabelRef("find"))
	Label("found")
	BSFL(bits, bits)
	ADDQ(bits.As64(), i)
	mx := XMM()
	VMOVSS(Mem{Base: x, Index: i, Scale: 4}, mx)
	is := XMM()
	VMOVSS(actConsts.Offset(acNeg127), is)
	VDIVSS(mx, is, is) // -127/mx
	d := XMM()
	VMOVSS(actConsts.Offset(acOne), d)
	VDIVSS(is, d, d)
	VMOVSS(d, Mem{Base: y})
	isv := YMM()
	VBROADCASTSS(is, isv)

	one8, one16 := YMM(), YMM()
	VMOVDQU(ones8, one8)
	VMOVDQU(ones16, one16)
	var ys [2]VecVirtual
	for h := range ys {
		var xs [2]VecVirtual
		for p := range xs {
			var qs [2]VecVirtual
			for k := range qs {
				g := 4*h + 2*p + k
				q := packQ8(Mem{Base: x, Disp: 128 * g}, isv, perm)
				VMOVDQU(q, Mem{Base: y, Disp: q8KQS + 32*g})
				// Sums of each 4 quants: lanes 0-3 are group 2g, 4-7 group 2g+1.
				VPMADDUBSW(q, one8, q)
				VPMADDWD(one16, q, q)
				qs[k] = q
			}
			xs[p] = YMM()
			VPHADDD(qs[1], qs[0], xs[p])
		}
		ys[h] = YMM()
		VPHADDD(xs[1], xs[0], ys[h]) // groups 0 2 4 6 | 1 3 5 7 (of 8h..)
		VPERMD(ys[h], perm, ys[h])
	}
	VPACKSSDW(ys[1], ys[0], ys[0])
	VPERMQ(U8(0xd8), ys[0], ys[0])
	VMOVDQU(ys[0], Mem{Base: y, Disp: q8KBsums})

	Label("next")
	ADDQ(U32(4*256), x)
	ADDQ(U32(q8KSize), y)
	DECQ(nb)
	JMP(LabelRef("block"))
	Label("done")
	VZEROUPPER()
	RET()
}

// quantQ8_0 emits quantActQ8_0 over nb consecutive blocks: per 32 floats,
// d = f16(amax/127), the quants nearest(x·127/amax) (0 when amax is 0), and
// c = −(Σqs << shift).
func quantQ8_0() {
	TEXT("quantQ8_0AVX2", NOSPLIT, "func(x *float32, nb int, y *byte, shift int)")
	Pragma("noescape")
	Doc("quantQ8_0AVX2 quantizes the nb·32 float32 at x to nb q8Blocks at y as quantActQ8_0 does.")
	x := Load(Param("x"), GP64())
	nb := Load(Param("nb"), GP64())
	y := Load(Param("y"), GP64())
	sh := XMM()
	Load(Param("shift"), sh)
	abs, perm, c127 := YMM(), YMM(), XMM()
	VMOVDQU(absMask, abs)
	VMOVDQU(permD, perm)
	VMOVSS(actConsts.Offset(ac127), c127)
	zero := XMM()
	VXORPS(zero, zero, zero)
	one8, one16 := YMM(), YMM()
	VMOVDQU(ones8, one8)
	VMOVDQU(ones16, one16)

	Label("block")
	TESTQ(nb, nb)
	JZ(LabelRef("done"))
	var m [4]VecVirtual
	for i := range m {
		m[i] = YMM()
		VANDPS(Mem{Base: x, Disp: 32 * i}, abs, m[i])
	}
	VMAXPS(m[1], m[0], m[0])
	VMAXPS(m[3], m[2], m[2])
	VMAXPS(m[2], m[0], m[0])
	amax := hmax8(m[0])
	d := XMM()
	VDIVSS(c127, amax.AsX(), d) // amax/127
	h := XMM()
	VCVTPS2PH(U8(0), d, h)
	VCVTPH2PS(h, d)
	VMOVSS(d, Mem{Base: y})
	id := XMM()
	VDIVSS(amax.AsX(), c127, id) // 127/amax
	nz := XMM()
	VCMPSS(U8(4), zero, amax.AsX(), nz) // amax != 0
	VANDPS(nz, id, id)
	idv := YMM()
	VBROADCASTSS(id, idv)
	q := packQ8(Mem{Base: x}, idv, perm)
	VMOVDQU(q, Mem{Base: y, Disp: q8QS})
	// c = −(Σqs << shift)
	VPMADDUBSW(q, one8, q)
	VPMADDWD(one16, q, q)
	s := XMM()
	VEXTRACTI128(U8(1), q, s)
	VPADDD(q.AsX(), s, s)
	VPHADDD(s, s, s)
	VPHADDD(s, s, s)
	VPSLLD(sh, s, s)
	VPSUBD(s, zero, s)
	VMOVD(s, Mem{Base: y, Disp: q8C})
	ADDQ(U32(128), x)
	ADDQ(U8(q8Size), y)
	DECQ(nb)
	JMP(LabelRef("block"))
	Label("done")
	VZEROUPPER()
	RET()
}

// roundFloats emits the rounding of n float32 (a multiple of 8) to binary16
// (nearest even, as F32ToF16) or to bfloat16 (F32ToBF16: nearest even, NaNs
// kept quiet).
func roundFloats(name string, bf16 bool) {
	TEXT(name, NOSPLIT, "func(dst, src *float32, n int)")
	Pragma("noescape")
	if bf16 {
		Doc(name + " sets dst[i] = RoundBF16(src[i]) for i < n, n a multiple of 8.")
	} else {
		Doc(name + " sets dst[i] = RoundF16(src[i]) for i < n, n a multiple of 8.")
	}
	dst := Load(Param("dst"), GP64())
	src := Load(Param("src"), GP64())
	n := Load(Param("n"), GP64())
	var abs, c7fff, one, top, qnan, inf VecVirtual
	if bf16 {
		abs, c7fff, one, top, qnan, inf = YMM(), YMM(), YMM(), YMM(), YMM(), YMM()
		VMOVDQU(absMask, abs)
		for _, c := range []struct {
			r VecVirtual
			v uint32
		}{{c7fff, 0x7fff}, {one, 1}, {top, 0xffff0000}, {qnan, 0x400000}, {inf, 0x7f800000}} {
			g := GP32()
			MOVL(U32(c.v), g)
			VMOVD(g, c.r.AsX())
			VPBROADCASTD(c.r.AsX(), c.r)
		}
	}
	elementwise8(n, func() {
		a := YMM()
		VMOVUPS(Mem{Base: src}, a)
		if bf16 {
			// (u + 0x7fff + (u>>16)&1) &^ 0xffff; a NaN: u | 0x400000, top half.
			t, r, m := YMM(), YMM(), YMM()
			VPSRLD(U8(16), a, t)
			VPAND(one, t, t)
			VPADDD(c7fff, t, t)
			VPADDD(a, t, r)
			VPAND(top, r, r)
			VPAND(abs, a, m)
			VPCMPGTD(inf, m, m) // |u| > inf bits: NaN
			VPOR(qnan, a, t)
			VPAND(top, t, t)
			VBLENDVPS(m, t, r, a)
		} else {
			h := XMM()
			VCVTPS2PH(U8(0), a, h)
			VCVTPH2PS(h, a)
		}
		VMOVUPS(a, Mem{Base: dst})
	}, step{src, 32}, step{dst, 32})
}

// toF16 emits the float32 → binary16 conversion (round to nearest even, as
// F32ToF16), 8 at a time: how the model stores keys and values.
func toF16() {
	TEXT("toF16AVX2", NOSPLIT, "func(dst *uint16, src *float32, n int)")
	Pragma("noescape")
	Doc("toF16AVX2 sets dst[i] = F32ToF16(src[i]) for i < n, n a multiple of 8.")
	dst := Load(Param("dst"), GP64())
	src := Load(Param("src"), GP64())
	n := Load(Param("n"), GP64())
	elementwise8(n, func() {
		a, h := YMM(), XMM()
		VMOVUPS(Mem{Base: src}, a)
		VCVTPS2PH(U8(0), a, h)
		VMOVDQU(h, Mem{Base: dst})
	}, step{src, 32}, step{dst, 16})
}

// step is a pointer that elementwise8 advances by bytes after each 8 elements.
type step struct {
	r     Register
	bytes int
}

// elementwise8 emits the loop of an element-wise kernel and its return: body
// handles 8 elements at the pointers, which then advance by their steps, until n
// (a multiple of 8) is used up.
func elementwise8(n Register, body func(), ptrs ...step) {
	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	body()
	for _, p := range ptrs {
		ADDQ(U8(p.bytes), p.r)
	}
	SUBQ(U8(8), n)
	JMP(LabelRef("loop"))
	Label("done")
	VZEROUPPER()
	RET()
}

// Offsets of the float32 constants of siluExpf8 in siluConsts.
const (
	scR     = 4 * iota // 0x1.8p23: adding it rounds to an integer
	scL2E              // log2(e)
	scLn2Hi            // ln 2 in two parts
	scLn2Lo
	scP0 // the polynomial
	scP1
	scP2
	scP3
	scP4
	scOne
	scLim // 192: |n| beyond it, 0 or +Inf
	scInf
	scBias // int32 127
	scCount
)

var siluConsts Mem

func siluConstants() {
	c := make([]float32, scCount/4)
	c[scR/4] = 0x1.8p23
	c[scL2E/4] = 0x1.715476p+0
	c[scLn2Hi/4] = 0x1.62e4p-1
	c[scLn2Lo/4] = 0x1.7f7d1cp-20
	c[scP0/4] = 0x1.0e4020p-7
	c[scP1/4] = 0x1.573e2ep-5
	c[scP2/4] = 0x1.555e66p-3
	c[scP3/4] = 0x1.fffdb6p-2
	c[scP4/4] = 0x1.ffffecp-1
	c[scOne/4] = 1
	c[scLim/4] = 192
	c[scInf/4] = float32(math.Inf(1))
	c[scBias/4] = math.Float32frombits(127)
	if len(c)%2 == 1 {
		c = append(c, 0)
	}
	b := make([]byte, 4*len(c))
	for i, x := range c {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	siluConsts = rodata("siluConsts", b)
}

// sc broadcasts siluExpf8 constant off to a ymm.
func sc(off int) VecVirtual {
	r := YMM()
	VBROADCASTSS(siluConsts.Offset(off), r)
	return r
}

// siluExpf8 returns expfGGML of the 8 float32 of x (engine/kernels/act.go): the
// arithmetic of ggml's AVX-512 ggml_v_expf, its fused multiply-adds as they are,
// its final scaling by 2**n (VSCALEFPS) as a product by 2**h and then by 2**(n-h),
// h = n/2, which rounds once as it does.
func siluExpf8(x VecVirtual) VecVirtual {
	r := sc(scR)
	z := YMM()
	VMOVAPS(r, z)
	VFMADD231PS(sc(scL2E), x, z) // z = x·log2e + r
	n := YMM()
	VSUBPS(r, z, n) // n = z − r
	b := YMM()
	VMOVAPS(x, b)
	VFNMADD231PS(sc(scLn2Hi), n, b) // b = x − n·ln2hi
	VFNMADD231PS(sc(scLn2Lo), n, b) // b −= n·ln2lo
	u := YMM()
	VMULPS(b, b, u)
	p1 := sc(scP1)
	VFMADD231PS(sc(scP0), b, p1) // p0·b + p1
	p3 := sc(scP3)
	VFMADD231PS(sc(scP2), b, p3) // p2·b + p3
	VFMADD231PS(u, p1, p3)       // (p0·b + p1)·u + (p2·b + p3)
	j := sc(scOne)
	VFMADD231PS(sc(scP4), b, j) // p4·b + 1
	VFMADD231PS(u, p3, j)       // j = (…)·u + (p4·b + 1)
	// j·2**h·2**(n-h), h = n/2 rounded toward zero.
	ni, h, e := YMM(), YMM(), YMM()
	VCVTTPS2DQ(n, ni)
	VPSRLD(U8(31), ni, h)
	VPADDD(ni, h, h)
	VPSRAD(U8(1), h, h)
	VPSUBD(h, ni, e)
	bias := sc(scBias)
	VPADDD(bias, h, h)
	VPSLLD(U8(23), h, h)
	VPADDD(bias, e, e)
	VPSLLD(U8(23), e, e)
	VMULPS(h, j, j)
	VMULPS(e, j, j)
	// |n| > 192: +Inf for n > 0, else 0.
	a, m, zero, big := YMM(), YMM(), YMM(), YMM()
	VANDPS(absMask, n, a)
	VCMPPS(U8(0x1e), sc(scLim), a, m) // |n| > 192 (GT_OQ)
	VXORPS(zero, zero, zero)
	VCMPPS(U8(0x1e), zero, n, big) // n > 0 (GT_OQ)
	VANDPS(sc(scInf), big, big)    // +Inf or 0
	VBLENDVPS(m, big, j, j)
	return j
}

// swiglu emits SwiGLU: dst = gate/(1 + expfGGML(-gate))·up, 8 at a time.
func swiglu() {
	TEXT("swigluAVX2", NOSPLIT, "func(dst, gate, up *float32, n int)")
	Pragma("noescape")
	Doc("swigluAVX2 sets dst[i] = gate[i]/(1+expfGGML(-gate[i]))·up[i] for i < n, n a multiple of 8.")
	dst := Load(Param("dst"), GP64())
	gate := Load(Param("gate"), GP64())
	up := Load(Param("up"), GP64())
	n := Load(Param("n"), GP64())
	elementwise8(n, func() {
		g, ng := YMM(), YMM()
		VMOVUPS(Mem{Base: gate}, g)
		VXORPS(ec(ecSign), g, ng)
		e := siluExpf8(ng)
		VADDPS(sc(scOne), e, e)
		VDIVPS(e, g, g)
		VMULPS(Mem{Base: up}, g, g)
		VMOVUPS(g, Mem{Base: dst})
	}, step{gate, 32}, step{up, 32}, step{dst, 32})
}
