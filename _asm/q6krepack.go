package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Q6_K repacked (engine/kernels/q6krepack.go): 16 rows' blocks b side by side
// in 3360 bytes (the same bytes as the 16 rows' blocks b in the file),
//
//	[0, 3072)     the quants: 192 bytes per (half h < 2, lane k < 8) at
//	              192(8h+k): row r's ql[64h+4k …+3] at 4r, ql[64h+32+4k …+3]
//	              at 64+4r, qh[32h+4k …+3] at 128+4r
//	[3072, 3328)  the 16 scales as planes: byte 3072 + 16j + r is row r's scales[j]
//	[3328, 3360)  f16 d of rows 0 … 15
//
// so that lane r of a loaded register holds, once unpacked, row r's 4 quants
// at offsets 4k … 4k+3 of a 32-quant chunk c: the four bytes that the one-token
// kernel's int32 lane k takes from that chunk (dotQ6KRowGeneric's lane[k]).
// A token's 4 activations there, broadcast, meet them in one VPMADDUBSW and the
// 16 rows' scales of the chunk's sub-block in one VPDPWSSD: lane r of the
// token's accumulator for k ends at row r's exact lane[k] (less 32·bc, one
// more VPDPWSSD), and the float steps (a conversion, one fused multiply-add
// into the lane's float) run on the 16 rows at once; the 8 float lanes are
// summed in sum8's order at the end: every output has dotQ6KRowGeneric's bits.

const (
	q6x16Size     = 16 * q6KSize
	q6x16Scales   = 3072
	q6x16D        = 3328
	q6x16Prefetch = 2 * q6x16Size
)

// dotQ6KX16 emits dotQ6KX16AVX512t{T}: 16 packed Q6_K rows × T tokens.
func dotQ6KX16(T int) {
	evex = true
	defer func() { evex = false }()
	name := fmt.Sprintf("dotQ6KX16AVX512t%d", T)
	// Not NOSPLIT: the float lanes wait on the stack (8·T registers).
	TEXT(name, 0, "func(x *byte, y *byte, ys int, nb int, out *float32, os int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets out[t·os + r] to the dot product of row r < 16 of the nb packed Q6_K blocks at x (q6KX16 layout) with the q8KBlocks at y + t·ys, t < %d: dotQ6KRowGeneric's bits.", name, T))
	load := func(name string) GPVirtual {
		r := GP64()
		Load(Param(name), r)
		return r
	}
	x := load("x")
	var ys GPVirtual
	if T > 1 {
		ys = load("ys")
	}
	toks := newRowSet(load("y"), ys, T)
	nb := load("nb")
	// sc: sub-block j's 16 scales, each in both words of its dword; nc: lane
	// k's (−32·scales[2k], −32·scales[2k+1]); dy: token t's f16(d)·y.d of the
	// 16 rows; fa: token t's float lane k of the 16 rows at 64(8t+k).
	sc := AllocLocal(16 * 64)
	nc := AllocLocal(8 * 64)
	dyl := AllocLocal(T * 64)
	fa := AllocLocal(T * 8 * 64)
	zero := ZMM()
	VPXORD(zero, zero, zero)
	for i := 0; i < 8*T; i++ {
		VMOVDQU64(zero, fa.Offset(64*i))
	}
	kodd := K()
	{
		g := GP32()
		MOVL(U32(0xaaaaaaaa), g)
		KMOVD(g, kodd)
	}
	xr := Mem{Base: x}

	Label("loop")
	TESTQ(nb, nb)
	JZ(LabelRef("done"))
	for o := 0; o < 5; o++ {
		PREFETCHT0(xr.Offset(q6x16Prefetch + q6x16Scales + 64*o))
	}
	for j := 0; j < 16; j++ {
		a, b := ZMM(), ZMM()
		VPMOVSXBD(xr.Offset(q6x16Scales+16*j), a)
		VPSLLD(U8(16), a, b)
		VPBLENDMW(b, a, kodd, a) // (s, s) in each dword
		VMOVDQU64(a, sc.Offset(64*j))
	}
	for k := 0; k < 8; k++ {
		a := ZMM()
		VMOVDQU64(sc.Offset(128*k), a)
		VPBLENDMW(sc.Offset(128*k+64), a, kodd, a) // (s[2k], s[2k+1])
		VPSLLW(U8(5), a, a)
		VPSUBW(a, zero, a)
		VMOVDQU64(a, nc.Offset(64*k))
	}
	{
		xd := ZMM()
		VCVTPH2PS(xr.Offset(q6x16D), xd)
		for t := 0; t < T; t++ {
			d := ZMM()
			VMULPS_BCST(toks.at(t), xd, d) // f16(d)·y.d
			VMOVUPS(d, dyl.Offset(64*t))
		}
	}
	for k := 0; k < 8; k++ {
		acc := make([]VecVirtual, T)
		for h := 0; h < 2; h++ {
			off := 192 * (8*h + k)
			for o := 0; o < 3; o++ {
				PREFETCHT0(xr.Offset(q6x16Prefetch + off + 64*o))
			}
			qla, qlb, qh := ZMM(), ZMM(), ZMM()
			VMOVDQU64(xr.Offset(off), qla)
			VMOVDQU64(xr.Offset(off+64), qlb)
			VMOVDQU64(xr.Offset(off+128), qh)
			var q [4]VecVirtual
			for i := range q {
				q[i] = ZMM()
			}
			t0 := ZMM()
			// chunk 4h: ql low nibbles of bytes 4k…, qh bits 0-1
			VPANDD(nibbleMask, qla, q[0])
			VPSLLW(U8(4), qh, t0)
			VPTERNLOGD(U8(0xf8), bits45Mask, t0, q[0]) // q | t&0x30
			// chunk 4h+1: ql low nibbles of bytes 32+4k…, qh bits 2-3
			t1 := ZMM()
			VPANDD(nibbleMask, qlb, q[1])
			VPSLLW(U8(2), qh, t1)
			VPTERNLOGD(U8(0xf8), bits45Mask, t1, q[1])
			// chunk 4h+2: ql high nibbles of bytes 4k…, qh bits 4-5
			VPSRLW(U8(4), qla, q[2])
			VPANDD(nibbleMask, q[2], q[2])
			VPTERNLOGD(U8(0xf8), bits45Mask, qh, q[2])
			// chunk 4h+3: ql high nibbles of bytes 32+4k…, qh bits 6-7
			t3 := ZMM()
			VPSRLW(U8(4), qlb, q[3])
			VPANDD(nibbleMask, q[3], q[3])
			VPSRLW(U8(2), qh, t3)
			VPTERNLOGD(U8(0xf8), bits45Mask, t3, q[3])
			for ci := 0; ci < 4; ci++ {
				c := 4*h + ci
				// (a register: as a memory operand beside the broadcasts it
				// cost half as much again)
				s := ZMM()
				VMOVDQU64(sc.Offset(64*(2*c+k/4)), s)
				for t := 0; t < T; t++ {
					yb, p := ZMM(), ZMM()
					VPBROADCASTD(toks.at(t).Offset(q8KQS+32*c+4*k), yb)
					VPMADDUBSW(yb, q[ci], p)
					if h == 0 && ci == 0 {
						acc[t] = ZMM()
						VPMADDWD(s, p, acc[t])
					} else {
						raw("VPDPWSSD", s, p, acc[t])
					}
				}
			}
		}
		nk := ZMM()
		VMOVDQU64(nc.Offset(64*k), nk)
		for t := 0; t < T; t++ {
			rawBcst("VPDPWSSD", toks.at(t).Offset(q8KBsums+4*k), nk, acc[t]) // −32·bc
			f, l := ZMM(), ZMM()
			VCVTDQ2PS(acc[t], f)
			VMOVUPS(fa.Offset(64*(8*t+k)), l)
			VFMADD231PS(dyl.Offset(64*t), f, l)
			VMOVUPS(l, fa.Offset(64*(8*t+k)))
		}
	}
	ADDQ(U32(q6x16Size), x)
	toks.advance(q8KSize)
	DECQ(nb)
	JMP(LabelRef("loop"))

	Label("done")
	p, os := load("out"), load("os")
	SHLQ(U8(2), os)
	for t := 0; t < T; t++ {
		lane := func(k int) Mem { return fa.Offset(64 * (8*t + k)) }
		// sum8: ((l0+l4) + (l2+l6)) + ((l1+l5) + (l3+l7))
		pair := func(a, b int) VecVirtual {
			r := ZMM()
			VMOVUPS(lane(a), r)
			VADDPS(lane(b), r, r)
			return r
		}
		s04, s26, s15, s37 := pair(0, 4), pair(2, 6), pair(1, 5), pair(3, 7)
		VADDPS(s26, s04, s04)
		VADDPS(s37, s15, s15)
		VADDPS(s15, s04, s04)
		VMOVUPS(s04, Mem{Base: p})
		if t+1 < T {
			ADDQ(os, p)
		}
	}
	VZEROUPPER()
	RET()
}

// q6KX16Kernels emits the packed Q6_K kernels (9 tokens: a k = 8 verification
// step's positions).
func q6KX16Kernels() {
	dotQ6KX16(9)
}
