package main

import (
	"encoding/binary"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// ropeSigns: 4 float32 sign bits (neox: every product is negated for the first
// half), then sign bits in the even lanes only (normal: x0·cos − x1·sin in the
// even lane, x0·sin + x1·cos in the odd one).
var ropeSigns Mem

func ropeConstants() {
	b := make([]byte, 32)
	for i, v := range []uint32{1 << 31, 1 << 31, 1 << 31, 1 << 31, 1 << 31, 0, 1 << 31, 0} {
		binary.LittleEndian.PutUint32(b[4*i:], v)
	}
	ropeSigns = rodata("ropeSigns", b)
}

// ropeNeox emits kernels.RoPE's neox rotation, 4 pairs (x[i], x[i+half]) at a
// time, with the Go code's arithmetic in its order: the float32 products x1·sin
// and x1·cos (VMULPS), the first negated (sign bit, as Go's unary minus), then
// float64 lanes: fma(x0, cos, −x1·sin) and fma(x0, sin, x1·cos) in one
// VFMADD231PD each, rounded to float32 by VCVTPD2PS: float32(math.FMA(...)).
func ropeNeox() {
	TEXT("ropeNeoxAVX2", NOSPLIT, "func(x *float32, half int, cos, sin *float32, n int)")
	Pragma("noescape")
	Doc("ropeNeoxAVX2 rotates (x[i], x[i+half]) by (cos[i], sin[i]) for i < n, n a multiple of 4, bit for bit as kernels.RoPE's Go loop.")
	x := Load(Param("x"), GP64())
	half := Load(Param("half"), GP64())
	cs := Load(Param("cos"), GP64())
	sn := Load(Param("sin"), GP64())
	n := Load(Param("n"), GP64())
	x1p := GP64()
	LEAQ(Mem{Base: x, Index: half, Scale: 4}, x1p)
	neg := XMM()
	VMOVUPS(ropeSigns, neg)
	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	x1, c, s, p1, p2 := XMM(), XMM(), XMM(), XMM(), XMM()
	VMOVUPS(Mem{Base: x1p}, x1)
	VMOVUPS(Mem{Base: cs}, c)
	VMOVUPS(Mem{Base: sn}, s)
	VMULPS(s, x1, p1)
	VXORPS(neg, p1, p1)
	VMULPS(c, x1, p2)
	dx0, dc, ds, dp1, dp2 := YMM(), YMM(), YMM(), YMM(), YMM()
	VCVTPS2PD(Mem{Base: x}, dx0)
	VCVTPS2PD(c, dc)
	VCVTPS2PD(s, ds)
	VCVTPS2PD(p1, dp1)
	VCVTPS2PD(p2, dp2)
	VFMADD231PD(dc, dx0, dp1)
	VFMADD231PD(ds, dx0, dp2)
	o1, o2 := XMM(), XMM()
	VCVTPD2PSY(dp1, o1)
	VCVTPD2PSY(dp2, o2)
	VMOVUPS(o1, Mem{Base: x})
	VMOVUPS(o2, Mem{Base: x1p})
	for _, r := range []Register{x, x1p, cs, sn} {
		ADDQ(U8(16), r)
	}
	SUBQ(U8(4), n)
	JMP(LabelRef("loop"))
	Label("done")
	VZEROUPPER()
	RET()
}

// ropeNormal emits kernels.RoPE's normal rotation, 2 adjacent pairs (x[2i],
// x[2i+1]) at a time, interleaved: a = (x0, x0), b = (x1, x1) (VMOVSLDUP,
// VMOVSHDUP), the float32 products b·(sin, cos), the even one negated, then
// fma(a, (cos, sin), ·) in float64 lanes and VCVTPD2PS, as ropeNeox.
func ropeNormal() {
	TEXT("ropeNormalAVX2", NOSPLIT, "func(x *float32, cos, sin *float32, n int)")
	Pragma("noescape")
	Doc("ropeNormalAVX2 rotates (x[2i], x[2i+1]) by (cos[i], sin[i]) for i < n, n a multiple of 2, bit for bit as kernels.RoPE's Go loop.")
	x := Load(Param("x"), GP64())
	cs := Load(Param("cos"), GP64())
	sn := Load(Param("sin"), GP64())
	n := Load(Param("n"), GP64())
	neg := XMM()
	VMOVUPS(ropeSigns.Offset(16), neg)
	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	v, a, b, c, s, csv, scv, p := XMM(), XMM(), XMM(), XMM(), XMM(), XMM(), XMM(), XMM()
	VMOVUPS(Mem{Base: x}, v)
	VMOVSLDUP(v, a)
	VMOVSHDUP(v, b)
	VMOVSD(Mem{Base: cs}, c)
	VMOVSD(Mem{Base: sn}, s)
	VUNPCKLPS(s, c, csv) // c0 s0 c1 s1
	VUNPCKLPS(c, s, scv) // s0 c0 s1 c1
	VMULPS(scv, b, p)
	VXORPS(neg, p, p)
	da, dcs, dp := YMM(), YMM(), YMM()
	VCVTPS2PD(a, da)
	VCVTPS2PD(csv, dcs)
	VCVTPS2PD(p, dp)
	VFMADD231PD(dcs, da, dp)
	o := XMM()
	VCVTPD2PSY(dp, o)
	VMOVUPS(o, Mem{Base: x})
	ADDQ(U8(16), x)
	ADDQ(U8(8), cs)
	ADDQ(U8(8), sn)
	SUBQ(U8(2), n)
	JMP(LabelRef("loop"))
	Label("done")
	VZEROUPPER()
	RET()
}
