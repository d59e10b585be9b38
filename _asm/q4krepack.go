package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Q4_K repacked at load (engine/kernels/q4krepack.go): 16 rows' blocks b side by
// side in 2304 bytes (the same bytes as the 16 rows' blocks b in the file),
//
//	[0, 32)      f16 d of rows 0 … 15
//	[32, 64)     f16 dmin of rows 0 … 15
//	[64, 256)    the 12 scale bytes as planes: byte 64 + 16i + r is row r's scales[i]
//	[256, 2304)  the quants: 64 bytes per (chunk j < 4, group g < 8), at
//	             256 + 64(8j+g), row r's qs[32j+4g … 32j+4g+3] at 4r
//
// so that lane r of a loaded register holds 4 bytes of row r (low nibbles:
// quants 64j+4g … of sub-block 2j, high: 64j+32+4g … of 2j+1), meeting a token's
// 4 activations, broadcast, in one VPDPBUSD: no permutes, no horizontal sums.
// Each (row, token) keeps its exact integer sums (a sub-block's Σq·y, VPMULLD by
// the scale; Σ m·(its two bsums) by VPDPWSSD), and the float steps of
// dotQ4KBlock run on the 16 rows at once, block by block, added into out:
// every output has dotQ4KRowGeneric's bits.

const (
	q4x16Size = 16 * q4KSize
	// q4x16Prefetch is how far ahead (bytes) the kernels prefetch the packed
	// stream: two blocks of 16 rows.
	q4x16Prefetch = 2 * q4x16Size
	// q4x16PairMins is the fewest tokens whose kernel takes acts.bsT.
	q4x16PairMins = 5
)

var q4x16Mask3F, q4x16Mask30 Mem

func q4X16Constants() {
	q4x16Mask3F = rodata("q4x16Mask3F", repeat(0x3f, 64))
	q4x16Mask30 = rodata("q4x16Mask30", repeat(0x30, 64))
}

// dotQ4KX16 emits dotQ4KX16AVX512t{T}: 16 packed Q4_K rows × T tokens.
func dotQ4KX16(T int) {
	evex = true
	defer func() { evex = false }()
	name := fmt.Sprintf("dotQ4KX16AVX512t%d", T)
	// Not NOSPLIT: the unpacked scales need more stack than a NOSPLIT function may take.
	// With 5 tokens or more the mins' products take the bsums in pairs of
	// sub-blocks (acts.bsT): 4 VPDPWSSD a token and block instead of 8.
	pairs := T >= q4x16PairMins
	if pairs {
		TEXT(name, 0, "func(x *byte, y *byte, ys int, bs *int32, gs int, nb int, out *float32, os int)")
	} else {
		TEXT(name, 0, "func(x *byte, y *byte, ys int, nb int, out *float32, os int)")
	}
	Pragma("noescape")
	doc := fmt.Sprintf("%s sets out[t·os + r] to the dot product of row r < 16 of the nb packed Q4_K blocks at x (q4KX16 layout) with the q8KBlocks at y + t·ys, t < %d: dotQ4KRowGeneric's bits.", name, T)
	if pairs {
		doc += " bs + b·4·gs + i·gs + 4t holds token t's two int16 sums of sub-blocks 2i and 2i+1 of block b (acts.bsT)."
	}
	Doc(doc)
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
	var bs, gs, gs3 GPVirtual
	if pairs {
		bs, gs = load("bs"), load("gs")
		gs3 = GP64()
		LEAQ(Mem{Base: gs, Index: gs, Scale: 2}, gs3)
	}
	nb := load("nb")
	osb := AllocLocal(8)
	{
		zero := ZMM()
		VPXORD(zero, zero, zero)
		p, os := load("out"), load("os")
		SHLQ(U8(2), os)
		MOVQ(os, osb)
		for t := 0; t < T; t++ {
			VMOVUPS(zero, Mem{Base: p})
			if t+1 < T {
				ADDQ(os, p)
			}
		}
	}
	// The decoded scales (bytes 16k … of sub-block k) then mins.
	local := AllocLocal(4 * 64)
	xr := Mem{Base: x}
	// pair: both halves of a chunk from one load (two accumulators a token);
	// more tokens reload the quants for the high half (an L1 hit) instead.
	pair := T <= 6

	Label("loop")
	TESTQ(nb, nb)
	JZ(LabelRef("done"))
	for o := 0; o < 4; o++ {
		PREFETCHT0(xr.Offset(q4x16Prefetch + 64*o))
	}
	{
		z0, z1, z2 := ZMM(), ZMM(), ZMM()
		VMOVDQU64(xr.Offset(64), z0)
		VMOVDQU64(xr.Offset(128), z1)
		VMOVDQU64(xr.Offset(192), z2)
		// j < 4: scale b[j]&63, min b[j+4]&63; j ≥ 4: scale b[j+4]&15 |
		// (b[j-4]>>6)<<4, min b[j+4]>>4 | (b[j]>>6)<<4 (plane by plane).
		s := ZMM()
		VPANDD(q4x16Mask3F, z0, s)
		VMOVDQU64(s, local.Offset(0))
		m := ZMM()
		VPANDD(q4x16Mask3F, z1, m)
		VMOVDQU64(m, local.Offset(128))
		hs, lo := ZMM(), ZMM()
		VPSRLW(U8(2), z0, hs)
		VPANDD(q4x16Mask30, hs, hs)
		VPANDD(nibbleMask, z2, lo)
		VPORD(hs, lo, lo)
		VMOVDQU64(lo, local.Offset(64))
		hm, lm := ZMM(), ZMM()
		VPSRLW(U8(2), z1, hm)
		VPANDD(q4x16Mask30, hm, hm)
		VPSRLW(U8(4), z2, lm)
		VPANDD(nibbleMask, lm, lm)
		VPORD(hm, lm, lm)
		VMOVDQU64(lm, local.Offset(192))
	}
	isum := make([]VecVirtual, T)
	scaled := func(k int, acc []VecVirtual) {
		sc := ZMM()
		VPMOVZXBD(local.Offset(16*k), sc)
		for t := 0; t < T; t++ {
			VPMULLD(sc, acc[t], acc[t])
			if k == 0 {
				isum[t] = acc[t]
			} else {
				VPADDD(acc[t], isum[t], isum[t])
			}
		}
	}
	newAccs := func() []VecVirtual {
		acc := make([]VecVirtual, T)
		for t := range acc {
			acc[t] = ZMM()
			VMOVDQU32(zeros64, acc[t]) // (a load: avo takes VPXORD x, x, x as reading x)
		}
		return acc
	}
	for j := 0; j < 4; j++ {
		halves := [][]int{{0}, {1}}
		if pair {
			halves = [][]int{{0, 1}}
		}
		for _, hs := range halves {
			accs := make([][]VecVirtual, 2)
			for _, h := range hs {
				accs[h] = newAccs()
			}
			for g := 0; g < 8; g++ {
				off := 256 + 64*(8*j+g)
				if hs[0] == 0 {
					PREFETCHT0(xr.Offset(q4x16Prefetch + off))
				}
				raw := ZMM()
				VMOVDQU64(xr.Offset(off), raw)
				for _, h := range hs {
					w := ZMM()
					if h == 0 {
						VPANDD(nibbleMask, raw, w)
					} else {
						VPSRLW(U8(4), raw, w)
						VPANDD(nibbleMask, w, w)
					}
					for t := 0; t < T; t++ {
						rawBcst("VPDPBUSD", toks.at(t).Offset(q8KQS+64*j+32*h+4*g), w, accs[h][t])
					}
				}
			}
			for _, h := range hs {
				scaled(2*j+h, accs[h])
			}
		}
	}
	ms := newAccs()
	if pairs {
		// Σ m·bsum by pairs of sub-blocks: the mins of 2i and 2i+1 in the
		// words of a dword, the sums of their 32 activations in bsT's.
		for i := 0; i < 4; i++ {
			m, h := ZMM(), ZMM()
			VPMOVZXBD(local.Offset(128+32*i), m)
			VPMOVZXBD(local.Offset(128+32*i+16), h)
			VPSLLD(U8(16), h, h)
			VPORD(h, m, m)
			for t := 0; t < T; t++ {
				var a Mem
				switch i {
				case 0:
					a = Mem{Base: bs, Disp: 4 * t}
				case 1:
					a = Mem{Base: bs, Index: gs, Scale: 1, Disp: 4 * t}
				case 2:
					a = Mem{Base: bs, Index: gs, Scale: 2, Disp: 4 * t}
				default:
					a = Mem{Base: bs, Index: gs3, Scale: 1, Disp: 4 * t}
				}
				rawBcst("VPDPWSSD", a, m, ms[t])
			}
		}
	} else {
		// Σ m·(the sub-block's two bsums): the min in both words of a dword.
		for k := 0; k < 8; k++ {
			m, h := ZMM(), ZMM()
			VPMOVZXBD(local.Offset(128+16*k), m)
			VPSLLD(U8(16), m, h)
			VPORD(h, m, m)
			for t := 0; t < T; t++ {
				rawBcst("VPDPWSSD", toks.at(t).Offset(q8KBsums+4*k), m, ms[t])
			}
		}
	}
	xd, xm := ZMM(), ZMM()
	VCVTPH2PS(xr.Offset(0), xd)
	VCVTPH2PS(xr.Offset(32), xm)
	p := GP64()
	Load(Param("out"), p)
	for t := 0; t < T; t++ {
		yt := toks.at(t)
		fi, fm := ZMM(), ZMM()
		VCVTDQ2PS(isum[t], fi)
		VCVTDQ2PS(ms[t], fm)
		d, m := ZMM(), ZMM()
		VMULPS_BCST(yt, xd, d) // f16(d)·y.d
		VMULPS(fi, d, d)       // ·isum
		VMULPS_BCST(yt, xm, m) // f16(dmin)·y.d
		VMULPS(fm, m, m)       // ·msum
		VSUBPS(m, d, d)
		VADDPS(Mem{Base: p}, d, d)
		VMOVUPS(d, Mem{Base: p})
		if t+1 < T {
			ADDQ(osb, p)
		}
	}
	ADDQ(U32(q4x16Size), x)
	toks.advance(q8KSize)
	if pairs {
		LEAQ(Mem{Base: bs, Index: gs, Scale: 4}, bs)
	}
	DECQ(nb)
	JMP(LabelRef("loop"))

	Label("done")
	VZEROUPPER()
	RET()
}

// q4KX16Kernels emits the packed Q4_K kernels of 1 … 9 tokens (one: decoding;
// 5 … 9: a verification step's positions; 8: prompts, by 8 tokens).
func q4KX16Kernels() {
	q4X16Constants()
	for t := 1; t <= 9; t++ {
		dotQ4KX16(t)
	}
}
