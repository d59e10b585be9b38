package main

import (
	"bytes"
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Outer products for IQ4_XS and Q2_K (AVX-512, VNNI): 16 weight rows × T tokens of
// Q8_K activations, as dot0Outer does for the 32-element types. The 16 rows'
// quants are transposed (lane r of a register holds 4 bytes of row r) and meet a
// token's 4 bytes, broadcast, in one VPDPBUSD; each (row, token) pair keeps its
// exact integer sums, and the reference's float steps run on 16 rows at once at
// the end of each super-block, adding into out (zeroed first): every output has
// the Go reference's bits.
//
// IQ4_XS: the levels + 128 (unsigned, by VPSHUFB from the nibbles), each 32-element
// sub-block's accumulator started at −128·(its two bsums) and multiplied by the
// row's scale (ls − 32) before it joins isum; then f16(d)·y.d·isum.
//
// Q2_K: the 2-bit quants multiplied by their 16-element sub-block's 4-bit scale
// while unpacking (q·sc ≤ 45, a byte: VPMULLW on words gives bytewise products),
// so one accumulator per token takes the whole isum = Σ sc·Σq·y; the mins' sum
// Σ m·bsum by VPDPWSSD; then (y.d·f16(d))·isum − (y.d·f16(dmin))·summs. With one
// token (decoding), each sub-block's Σq·y is summed apart and multiplied by its
// scale once (VPMULLD): fewer multiplies, the same integer isum.

var (
	q5oSpread, q5oBits, sixteens64                    Mem
	iq4oTable, dword15, dword3, dword32, neg128w      Mem
	q2oScShuf, q2oMinShuf, threes64, words15, zeros64 Mem
)

func outerConstants() {
	// q5oSpread mask b puts byte b of each dword in the dword's 4 bytes; q5oBits
	// mask h tests bit 4h+k in byte k.
	var sp, bt []byte
	for b := 0; b < 4; b++ {
		for i := 0; i < 64; i++ {
			sp = append(sp, byte(4*(i%16/4)+b))
		}
	}
	for h := 0; h < 2; h++ {
		for i := 0; i < 64; i++ {
			bt = append(bt, 1<<(4*h+i%4))
		}
	}
	q5oSpread = rodata("q5oSpread", sp)
	q5oBits = rodata("q5oBits", bt)
	sixteens64 = rodata("sixteens64", repeat(16, 64))
	lv := []int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}
	var tb []byte
	for k := 0; k < 4; k++ {
		for _, v := range lv {
			tb = append(tb, byte(v)^0x80)
		}
	}
	iq4oTable = rodata("iq4oTable", tb)
	dword := func(v uint32) []byte {
		return bytes.Repeat([]byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)}, 16)
	}
	dword15 = rodata("dword15", dword(15))
	dword3 = rodata("dword3", dword(3))
	dword32 = rodata("dword32", dword(32))
	neg128w = rodata("neg128w", dword(0xff80ff80))
	// q2oScShuf mask b: both words of each dword take byte b of the dword (the
	// scale byte of sub-block 4i+b, masked to its low nibble after); q2oMinShuf
	// mask h: the words take bytes 2h and 2h+1 (sub-blocks 4i+2h, 4i+2h+1, their
	// mins in the high nibbles).
	var sc, mn []byte
	for b := 0; b < 4; b++ {
		for i := 0; i < 64; i++ {
			d := 4 * (i % 16 / 4)
			if i%2 == 0 {
				sc = append(sc, byte(d+b))
			} else {
				sc = append(sc, 0x80)
			}
		}
	}
	for h := 0; h < 2; h++ {
		for i := 0; i < 64; i++ {
			d := 4 * (i % 16 / 4)
			switch i % 4 {
			case 0:
				mn = append(mn, byte(d+2*h))
			case 2:
				mn = append(mn, byte(d+2*h+1))
			default:
				mn = append(mn, 0x80)
			}
		}
	}
	q2oScShuf = rodata("q2oScShuf", sc)
	q2oMinShuf = rodata("q2oMinShuf", mn)
	threes64 = rodata("threes64", repeat(3, 64))
	words15 = rodata("words15", dword(0x000f000f))
	zeros64 = rodata("zeros64", make([]byte, 64))
}

// gather16 returns the 16 rows' 32-bit values at byte off: lane r row r's.
func gather16(rows rowSet, off int) VecVirtual {
	out := ZMM()
	VMOVDQU32(zeros64, out) // (a load: avo takes VPXORD x, x, x as reading x)
	for l := 0; l < 4; l++ {
		x := XMM()
		VMOVD(rows.at(4*l).Offset(off), x)
		for k := 1; k < 4; k++ {
			VPINSRD(U8(k), rows.at(4*l+k).Offset(off), x, x)
		}
		if l == 0 {
			VINSERTI32X4(U8(0), x, out, out)
		} else {
			VINSERTI32X4(U8(l), x, out, out)
		}
	}
	return out
}

// transpose16 returns the 16 rows' bytes [off, off+16) transposed: register i
// lane r holds bytes off+4i..off+4i+3 of row r (4×4 transposes of 32-bit groups
// within 128-bit lanes, lane L of a loaded register holding rows 4L..4L+3).
func transpose16(rows rowSet, off int) [4]VecVirtual {
	var a [4]VecVirtual
	for k := range a {
		a[k] = ZMM()
		VBROADCASTI32X4(rows.at(k).Offset(off), a[k]) // (lanes 1-3 replaced below)
		for l := 1; l < 4; l++ {
			VINSERTI32X4(U8(l), rows.at(4*l+k).Offset(off), a[k], a[k])
		}
	}
	return unpackDwords4(a, ZMM)
}

// f16Lanes converts the low 16 bits of each of v's 16 dwords from f16.
func f16Lanes(v VecVirtual) VecVirtual {
	h := YMM()
	VPMOVDW(v, h)
	f := ZMM()
	VCVTPH2PS(h, f)
	return f
}

// dotKOuter emits dot{IQ4XS,Q2K}AVX512x16t{T}; T = 1 (Q2_K's decoding) also
// prefetches the next 16 rows' blocks into L2, as the other one-token tiles do.
func dotKOuter(typ string, T int) {
	evex = true
	defer func() { evex = false }()
	name := fmt.Sprintf("dot%sAVX512x16t%d", typ, T)
	// Not NOSPLIT: the unpacked scales need more stack than a NOSPLIT function may take.
	TEXT(name, 0, "func(x *byte, rb int, y *byte, ys int, nb int, out *float32, os int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets out[t·os + r] to the dot product of the nb %s blocks at x + r·rb with the q8KBlocks at y + t·ys, for r < 16, t < %d: the reference's bits.", name, typ, T))
	load := func(name string) GPVirtual {
		r := GP64()
		Load(Param(name), r)
		return r
	}
	xs := map[string]int{"IQ4XS": iq4XSSize, "Q2K": q2KSize}[typ]
	// One token (decoding): the next 16 rows too, to prefetch them (prefetchNext).
	nr := 16
	if T == 1 {
		nr = rowSetSize(16)
	}
	rows := newRowSet(load("x"), load("rb"), nr)
	var ys GPVirtual
	if T > 1 {
		ys = load("ys")
	}
	toks := newRowSet(load("y"), ys, T)
	nb := load("nb")
	// The outputs start at zero; each super-block adds its 16 rows' results. The
	// output stride in bytes is kept on the stack.
	osb := AllocLocal(8)
	{
		zero := ZMM()
		VPXORD(zero, zero, zero)
		p, os := load("out"), load("os")
		SHLQ(U8(2), os)
		MOVQ(os, osb)
		for t := 0; t < T; t++ {
			VMOVUPS(zero, Mem{Base: p})
			ADDQ(os, p)
		}
	}
	// IQ4_XS: the 8 sub-block scales; Q2_K: the 16 sub-block scales as words and
	// the 8 pairs of mins.
	local := AllocLocal(25 * 64)

	Label("loop")
	TESTQ(nb, nb)
	JZ(LabelRef("done"))
	if T == 1 {
		// The next call's block, lines 0 and 1 (a block is 84 or 136 bytes).
		prefetchNext(rows, 16, 0, 1)
	}
	isum := make([]VecVirtual, T)
	var xd VecVirtual
	xmL := local.Offset(24 * 64) // Q2_K: f16(dmin) of the 16 rows
	switch typ {
	case "IQ4XS":
		hd := gather16(rows, 0) // d, scales_h
		sl := gather16(rows, 4) // scales_l
		xd = f16Lanes(hd)
		sh := ZMM()
		VPSRLD(U8(16), hd, sh)
		for ib := 0; ib < 8; ib++ {
			a, b := ZMM(), ZMM()
			VPSRLD(U8(4*ib), sl, a)
			VPANDD(dword15, a, a)
			VPSRLD(U8(2*ib), sh, b)
			VPANDD(dword3, b, b)
			VPSLLD(U8(4), b, b)
			VPORD(b, a, a)
			VPSUBD(dword32, a, a)
			VMOVDQU32(a, local.Offset(64*ib))
		}
		table := ZMM()
		VMOVDQU64(iq4oTable, table)
		for ib := 0; ib < 8; ib++ {
			d4 := transpose16(rows, 8+16*ib)
			var w [8]VecVirtual
			for i := 0; i < 4; i++ {
				lo, hi := ZMM(), ZMM()
				VPANDD(nibbleMask, d4[i], lo)
				VPSRLW(U8(4), d4[i], hi)
				VPANDD(nibbleMask, hi, hi)
				w[i], w[4+i] = ZMM(), ZMM()
				VPSHUFB(lo, table, w[i])
				VPSHUFB(hi, table, w[4+i])
			}
			for t := 0; t < T; t++ {
				yt := toks.at(t)
				acc := ZMM()
				VPBROADCASTD(yt.Offset(q8KBsums+4*ib), acc)
				VPMADDWD(neg128w, acc, acc) // −128·(the sub-block's Σy)
				for g := 0; g < 8; g++ {
					rawBcst("VPDPBUSD", yt.Offset(q8KQS+32*ib+4*g), w[g], acc)
				}
				VPMULLD(local.Offset(64*ib), acc, acc)
				if ib == 0 {
					isum[t] = acc
				} else {
					VPADDD(acc, isum[t], isum[t])
				}
			}
		}
	case "Q2K":
		dd := gather16(rows, 80) // d, dmin
		xd = f16Lanes(dd)
		dm := ZMM()
		VPSRLD(U8(16), dd, dm)
		VMOVUPS(f16Lanes(dm), xmL)
		s := transpose16(rows, 0) // s[i] lane r: scale bytes 4i..4i+3
		for j := 0; j < 16; j++ {
			v := ZMM()
			VPSHUFB(q2oScShuf.Offset(64*(j%4)), s[j/4], v)
			if T == 1 {
				VPANDD(dword15, v, v) // the scale as a dword, for VPMULLD below
			} else {
				VPANDD(words15, v, v)
			}
			VMOVDQU32(v, local.Offset(64*j))
		}
		for p := 0; p < 8; p++ {
			v := ZMM()
			VPSHUFB(q2oMinShuf.Offset(64*(p%2)), s[p/2], v)
			VPSRLW(U8(4), v, v)
			VMOVDQU32(v, local.Offset(64*(16+p)))
		}
		for t := range isum {
			isum[t] = ZMM()
			VMOVDQU32(zeros64, isum[t])
		}
		if T == 1 {
			// One token: each sub-block's Σq·y in its own accumulator, then
			// multiplied by its scale (VPMULLD), fewer multiplies than scaling
			// the quants; the same integer isum.
			three := ZMM()
			VMOVDQU64(threes64, three)
			for c := 0; c < 4; c++ {
				d4 := transpose16(rows, 16+16*c)
				n, half := c/2, c%2 // chunk c: sub-blocks 8n+2k+half
				var acc [4]VecVirtual
				for k := range acc {
					acc[k] = ZMM()
					VMOVDQU32(zeros64, acc[k])
				}
				for i := 0; i < 4; i++ {
					l0 := 4 * ((4*c + i) % 8)
					for k := 0; k < 4; k++ {
						w := ZMM()
						if k == 0 {
							VPANDD(three, d4[i], w)
						} else {
							VPSRLW(U8(2*k), d4[i], w)
							VPANDD(three, w, w)
						}
						rawBcst("VPDPBUSD", toks.at(0).Offset(q8KQS+128*n+32*k+l0), w, acc[k])
					}
				}
				for k := range acc {
					VPMULLD(local.Offset(64*(8*n+2*k+half)), acc[k], acc[k])
					VPADDD(acc[k], isum[0], isum[0])
				}
			}
		}
		for c := 0; c < 4 && T > 1; c++ {
			d4 := transpose16(rows, 16+16*c)
			for i := 0; i < 4; i++ {
				g := 4*c + i // qs bytes 4g..4g+3: elements 128n+32k+l, l = 4(g%8)..
				n, l0 := g/8, 4*(g%8)
				for k := 0; k < 4; k++ {
					w := ZMM()
					if k == 0 {
						VPANDD(threes64, d4[i], w)
					} else {
						VPSRLW(U8(2*k), d4[i], w)
						VPANDD(threes64, w, w)
					}
					VPMULLW(local.Offset(64*(8*n+2*k+l0/16)), w, w) // ·sc, bytewise
					for t := 0; t < T; t++ {
						rawBcst("VPDPBUSD", toks.at(t).Offset(q8KQS+128*n+32*k+l0), w, isum[t])
					}
				}
			}
		}
	}
	// The float steps, added into out.
	p := load("out")
	for t := 0; t < T; t++ {
		yt := toks.at(t)
		f := ZMM()
		VCVTDQ2PS(isum[t], f)
		d := ZMM()
		VMULPS_BCST(yt, xd, d) // y.d·f16(d)
		VMULPS(f, d, d)        // ·isum
		if typ == "Q2K" {
			summs := ZMM()
			VMOVDQU32(zeros64, summs)
			for p := 0; p < 8; p++ {
				v := ZMM()
				VMOVDQU32(local.Offset(64*(16+p)), v)
				rawBcst("VPDPWSSD", yt.Offset(q8KBsums+4*p), v, summs)
			}
			fm, m := ZMM(), ZMM()
			VCVTDQ2PS(summs, fm)
			VMOVUPS(xmL, m)
			VMULPS_BCST(yt, m, m) // y.d·f16(dmin)
			VMULPS(fm, m, m)      // ·summs
			VSUBPS(m, d, d)
		}
		VADDPS(Mem{Base: p}, d, d)
		VMOVUPS(d, Mem{Base: p})
		if t+1 < T {
			ADDQ(osb, p)
		}
	}
	rows.advance(xs)
	toks.advance(q8KSize)
	DECQ(nb)
	JMP(LabelRef("loop"))

	Label("done")
	VZEROUPPER()
	RET()
}

// unpackDwords4 transposes the 32-bit words of a[0..3] within each 128-bit lane
// (VPUNPCK{L,H}DQ, then VPUNPCK{L,H}QDQ): w[j] holds word j of a[0], a[1], a[2],
// a[3] in turn. vec allocates the vector width (YMM or ZMM).
func unpackDwords4(a [4]VecVirtual, vec func() VecVirtual) [4]VecVirtual {
	b0, b1, b2, b3 := vec(), vec(), vec(), vec()
	VPUNPCKLDQ(a[1], a[0], b0)
	VPUNPCKHDQ(a[1], a[0], b1)
	VPUNPCKLDQ(a[3], a[2], b2)
	VPUNPCKHDQ(a[3], a[2], b3)
	var w [4]VecVirtual
	for i := range w {
		w[i] = vec()
	}
	VPUNPCKLQDQ(b2, b0, w[0])
	VPUNPCKHQDQ(b2, b0, w[1])
	VPUNPCKLQDQ(b3, b1, w[2])
	VPUNPCKHQDQ(b3, b1, w[3])
	return w
}
