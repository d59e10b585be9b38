package main

import (
	"fmt"
	"math"

	"github.com/mmcloughlin/avo/ir"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The lattice types' decoding kernels for AVX-512 (F, BW, VL, VBMI, BITALG,
// VNNI): one token against rows weight rows rb bytes apart, each row's result
// the one-row AVX2 kernel's bits (the block reference's). Per block the 32 grid
// indices are found four at a time in general-purpose registers (read from the
// block, or spread from its bytes by PDEP) and their entries put together into
// four zmm by scalar loads and inserts (gather32f; VPGATHERDQ, and indices made
// in a vector and passed through the stack, measured slower on Zen 4); the
// 16 scales 2s+1 are found once in a ymm of words and spread over each 64
// values' pair sums by VPERMW; per 64 values the activations are negated where
// the weights' signs are (a merge-masked subtraction from zero), multiplied by
// the grid's unsigned bytes (VPMADDUBSW) and their pair sums scaled into the
// block's accumulator (VPDPWSSD). The block's integer sum is the reference's
// exactly, and its float step is dotIQ2XSAVX2's: sum += ((f16(x.d)·y.d)·
// float32(bsum))·factor. Calling once for many rows saves the per-row call.

// prefetchDist is how far ahead of its block the kernel asks for the next
// weights (two cache lines a block): on one thread through 43 MiB of IQ2_S or
// IQ2_XS (BenchmarkLatticeDecodeLarge, Zen4, loaded) about 10% less CPU than
// none, and 1536 or 4096 bytes, while 384 was the same as 768.
const prefetchDist = 768

// rawOut emits op with its last operand written only (raw's is read too).
func rawOut(op string, ops ...Op) {
	Instruction(&ir.Instruction{
		Opcode:   op,
		Operands: ops,
		Inputs:   ops[:len(ops)-1],
		Outputs:  ops[len(ops)-1:],
	})
}

// dec512 holds a decoding kernel's constants.
type dec512 struct {
	zero, ones16, fifteen VecVirtual
	scDup, scShift        VecVirtual    // the 16 scale words from 8 bytes
	scPerm                [4]VecVirtual // the words of 64 values' 32 pair sums
}

// iq2Dec512Constants emits the constants' rodata once.
var decEighth, decScDup, decScShift, decScPerm, decXSPerm, decXSBits, decSHi, decLoBytes, decXXSShift, decXXSPerm, decXXSScPerm, decXSBitsPlain Mem

func iq2Dec512Constants() {
	e := math.Float32bits(0.125)
	decEighth = rodata("iq2DecEighth", []byte{byte(e), byte(e >> 8), byte(e >> 16), byte(e >> 24), 0, 0, 0, 0})
	var dup, shift, perm []byte
	for g := 0; g < 16; g++ {
		dup = append(dup, byte(g/2), 0)
		shift = append(shift, byte(4*(g%2)), 0)
	}
	for z := 0; z < 4; z++ {
		for k := 0; k < 32; k++ {
			perm = append(perm, byte(4*z+k/8), 0)
		}
	}
	decScDup = rodata("iq2DecScDup", dup)
	decScShift = rodata("iq2DecScShift", shift)
	decScPerm = rodata("iq2DecScPerm", perm)
	// IQ2_XS: byte 8i+0/1 of 64 values z's sign vector ← the word of group 8z+i;
	// mask bit 8i+m ← bit 9+m of that word (m < 7), bit 0 (the parity) for m = 7.
	var xp, xb []byte
	for z := 0; z < 4; z++ {
		for i := 0; i < 8; i++ {
			w := byte(2 * (8*z + i))
			xp = append(xp, w, w+1, w, w, w, w, w, w)
		}
	}
	for i := 0; i < 8; i++ {
		xb = append(xb, 9, 10, 11, 12, 13, 14, 15, 0)
	}
	decXSPerm = rodata("iq2DecXSPerm", xp)
	decXSBits = rodata("iq2DecXSBits", xb)
	// PDEP masks: IQ2_S's qh bit pairs to bits 8-9 of four words, its qs
	// bytes to their low bytes.
	q64 := func(name string, v uint64) Mem {
		var b []byte
		for i := 0; i < 8; i++ {
			b = append(b, byte(v>>(8*i)))
		}
		return rodata(name, b)
	}
	decSHi = q64("iq2DecSHi", 0x0300030003000300)
	decLoBytes = q64("iq2DecLoBytes", 0x00ff00ff00ff00ff)
	// IQ2_XXS: byte l < 4 of lane ib ← 8 bits from bit 32+7l of the block's
	// qword ib (sign index l, VPMULTISHIFTQB); byte 8i of 64 values z's sign
	// vector ← byte l = i%4 of lane 2z + i/4 (VPERMB); the pair-sum word k of 64
	// values z ← word 0 of lane 2z + k/16 (the scale, VPERMW).
	var sh, xxp, sp []byte
	for i := 0; i < 8; i++ {
		sh = append(sh, 32, 39, 46, 53, 0, 0, 0, 0)
	}
	for z := 0; z < 4; z++ {
		for i := 0; i < 8; i++ {
			b := byte(8*(2*z+i/4) + i%4)
			xxp = append(xxp, b, b, b, b, b, b, b, b)
		}
		for k := 0; k < 32; k++ {
			sp = append(sp, byte(4*(2*z+k/16)), 0)
		}
	}
	decXXSShift = rodata("iq2DecXXSShift", sh)
	var bp []byte
	for i := 0; i < 64; i++ {
		bp = append(bp, byte(i%8))
	}
	decXSBitsPlain = rodata("iq2DecBits", bp)
	decXXSPerm = rodata("iq2DecXXSPerm", xxp)
	decXXSScPerm = rodata("iq2DecXXSScPerm", sp)
}

func wordConst(v uint32) VecVirtual {
	g, z := GP32(), ZMM()
	MOVL(U32(v), g)
	VPBROADCASTW(g, z)
	return z
}

func newDec512() *dec512 {
	c := &dec512{zero: ZMM(), ones16: wordConst(1), fifteen: wordConst(15), scDup: YMM(), scShift: YMM()}
	VPXORD(c.zero, c.zero, c.zero)
	VMOVDQU64(decScDup, c.scDup)
	VMOVDQU64(decScShift, c.scShift)
	for z := range c.scPerm {
		c.scPerm[z] = ZMM()
		VMOVDQU64(decScPerm.Offset(64*z), c.scPerm[z])
	}
	return c
}

// scales returns the 16 odd scales 2s+1 of the 4-bit scales at m (8 bytes, low
// nibble first) in the words of a ymm, group order.
func (c *dec512) scales(m Mem) VecVirtual {
	b := XMM()
	VPMOVZXBW(m, b)
	w := YMM()
	VPERMW(b.AsY(), c.scDup, w)
	VPSRLVW(c.scShift, w, w)
	VPANDD(c.fifteen.AsY(), w, w)
	VPADDW(w, w, w)
	VPORD(c.ones16.AsY(), w, w)
	return w
}

// quadIndex returns an index function for gather32f from quad(k), which
// returns a register holding the indices of groups 4k to 4k+3 in its four
// words: called once per four indices, in order.
func quadIndex(quad func(k int) GPVirtual) func(g int) GPVirtual {
	var q GPVirtual
	return func(g int) GPVirtual {
		if g%4 == 0 {
			q = quad(g / 4)
		}
		r := GP64()
		switch g % 4 {
		case 0:
			MOVWLZX(q.As16(), r.As32())
		case 1:
			MOVL(q.As32(), r.As32())
			SHRL(U8(16), r.As32())
		case 2:
			MOVQ(q, r)
			SHRQ(U8(32), r)
			MOVWLZX(r.As16(), r.As32())
		case 3:
			MOVQ(q, r)
			SHRQ(U8(48), r)
		}
		return r
	}
}

// vecQuads returns quad functions for quadIndex reading the 32 index words of
// the zmm idx: quad k is qword k of idx, moved by VMOVQ or VPEXTRQ (128-bit
// lane k/2 extracted first).
func vecQuads(idx VecVirtual) func(k int) GPVirtual {
	var lane Op
	return func(k int) GPVirtual {
		if k%2 == 0 {
			if k == 0 {
				lane = idx.AsX()
			} else {
				l := XMM()
				VEXTRACTI32X4(U8(k/2), idx, l)
				lane = l
			}
		}
		q := GP64()
		if k%2 == 0 {
			VMOVQ(lane, q)
		} else {
			VPEXTRQ(U8(1), lane, q)
		}
		return q
	}
}

// gather32f looks up the 32 grid entries (8 bytes each) of a block, index g
// found by index(g) (called in order), in four zmm of eight entries: each entry
// loaded into its lane by a scalar load or insert (on Zen 4 cheaper than
// VPGATHERDQ, and than passing vector-made indices through the stack).
func gather32f(grid GPVirtual, index func(g int) GPVirtual) [4]VecVirtual {
	var g [4]VecVirtual
	for i := 0; i < 4; i++ {
		var xs [4]VecVirtual
		for j := range xs {
			xs[j] = XMM()
			VMOVQ(Mem{Base: grid, Index: index(8*i + 2*j), Scale: 8}, xs[j])
			VPINSRQ(U8(1), Mem{Base: grid, Index: index(8*i + 2*j + 1), Scale: 8}, xs[j], xs[j])
		}
		lo, hi := YMM(), YMM()
		VINSERTI32X4(U8(1), xs[1], xs[0].AsY(), lo)
		VINSERTI32X4(U8(1), xs[3], xs[2].AsY(), hi)
		g[i] = ZMM()
		VINSERTI64X4(U8(1), hi, lo.AsZ(), g[i])
	}
	return g
}

// decBlock512 adds to acc (16 int32) the block at x's scaled products with the
// token's quants at y.
type decBlock512 func(x, y, grid GPVirtual, acc VecVirtual)

// chunk512 adds the 64 values z's products: the activations negated where k is
// set, times the grid bytes g, pair sums times the scale words sc.
func chunk512(c *dec512, y GPVirtual, z int, g VecVirtual, k OpmaskVirtual, w, acc VecVirtual) {
	q := ZMM()
	VMOVDQU64(Mem{Base: y, Disp: q8KQS + 64*z}, q)
	VPSUBB(q, c.zero, k, q)
	p := ZMM()
	VPMADDUBSW(q, g, p)
	sc := ZMM()
	VPERMW(w.AsZ(), c.scPerm[z], sc)
	raw("VPDPWSSD", sc, p, acc)
}

// latticeDec512 emits name: out[r] = the dot of the nb blocks of size bytes at
// x + r·rb with the token's n q8KBlocks at y, for r < rows.
func latticeDec512(name, typ string, size int, factor float32, setup func(c *dec512) decBlock512) {
	latticeDec512Step(name, typ, size, setup, func(x, y GPVirtual, s VecVirtual) VecVirtual {
		if factor != 0.125 {
			panic("latticeDec512: factor")
		}
		d := blockD(x, y)
		VMULSS(s, d, d)
		VMULSS(decEighth, d, d)
		return d
	})
}

// latticeDec512Step is latticeDec512 with the block's float step step: the
// term added to the row's sum, from the block's integer sum s (as float32).
func latticeDec512Step(name, typ string, size int, setup func(c *dec512) decBlock512, step func(x, y GPVirtual, s VecVirtual) VecVirtual) {
	evex = true
	defer func() { evex = false }()
	TEXT(name, NOSPLIT, "func(x *byte, rb int, y *byte, n, rows int, out *float32, grid *byte)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets out[r] = dot%sAVX2(x + r·rb, y, n, grid) for r < rows (AVX-512 BW, VL, VBMI, BITALG, VNNI; the same bits).", name, typ))
	x0, rb, y0, n, rows, out, grid := GP64(), GP64(), GP64(), GP64(), GP64(), GP64(), GP64()
	Load(Param("x"), x0)
	Load(Param("rb"), rb)
	Load(Param("y"), y0)
	Load(Param("n"), n)
	Load(Param("rows"), rows)
	Load(Param("out"), out)
	Load(Param("grid"), grid)
	c := newDec512()
	block := setup(c)
	x, y, cnt := GP64(), GP64(), GP64()

	Label(name + "_row")
	TESTQ(rows, rows)
	JZ(LabelRef(name + "_done"))
	MOVQ(x0, x)
	MOVQ(y0, y)
	MOVQ(n, cnt)
	sum := XMM()
	VXORPS(sum, sum, sum)

	Label(name + "_block")
	TESTQ(cnt, cnt)
	JZ(LabelRef(name + "_rowdone"))
	acc := ZMM()
	VPXORD(acc, acc, acc)
	PREFETCHT0(Mem{Base: x, Disp: prefetchDist})
	PREFETCHT0(Mem{Base: x, Disp: prefetchDist + 64})
	block(x, y, grid, acc)
	h8 := YMM()
	VEXTRACTI64X4(U8(1), acc, h8)
	VPADDD(h8, acc.AsY(), h8)
	d := step(x, y, hsumIntX(h8))
	VADDSS(d, sum, sum)
	ADDQ(U32(size), x)
	ADDQ(U32(q8KSize), y)
	DECQ(cnt)
	JMP(LabelRef(name + "_block"))

	Label(name + "_rowdone")
	VMOVSS(sum, Mem{Base: out})
	ADDQ(U8(4), out)
	ADDQ(rb, x0)
	DECQ(rows)
	JMP(LabelRef(name + "_row"))

	Label(name + "_done")
	VZEROUPPER()
	RET()
}

// dotIQ2XSAVX512r: qs [32]uint16 at 2 (a 9-bit grid index, a 7-bit sign
// index), the scales at 66. The signs: the sign index's bits in place, the
// parity of their count in bit 0 (VPOPCNTW), each group's word moved into its
// lane of 64 values (VPERMB) for VPSHUFBITQMB.
func dotIQ2XSAVX512r() {
	latticeDec512("dotIQ2XSAVX512r", "IQ2XS", 74, 0.125, func(c *dec512) decBlock512 {
		var perm [4]VecVirtual
		for z := range perm {
			perm[z] = ZMM()
			VMOVDQU64(decXSPerm.Offset(64*z), perm[z])
		}
		hiMask := wordConst(0xfe00)
		return func(x, y, grid GPVirtual, acc VecVirtual) {
			q := ZMM()
			VMOVDQU64(Mem{Base: x, Disp: 2}, q)
			g := gather32f(grid, func(g int) GPVirtual {
				r := GP64()
				MOVWLZX(Mem{Base: x, Disp: 2 + 2*g}, r.As32())
				ANDL(U32(511), r.As32())
				return r
			})
			a := ZMM()
			VPANDD(hiMask, q, a)
			p := ZMM()
			rawOut("VPOPCNTW", a, p)
			VPORD(p, a, a)
			w := c.scales(Mem{Base: x, Disp: 66})
			for z := 0; z < 4; z++ {
				t := ZMM()
				VPERMB(a, perm[z], t)
				k := K()
				rawOut("VPSHUFBITQMB", decXSBits, t, k)
				chunk512(c, y, z, g[z], k, w, acc)
			}
		}
	})
}

// dotIQ2SAVX512r: the low 8 bits of the 32 grid indices at 2, their top 2 bits
// at 66 (4 groups a byte), the sign bits at 34 (one mask per 64 values), the
// scales at 74.
func dotIQ2SAVX512r() {
	latticeDec512("dotIQ2SAVX512r", "IQ2S", 82, 0.125, func(c *dec512) decBlock512 {
		return func(x, y, grid GPVirtual, acc VecVirtual) {
			// Four indices a time in the words of a register: the qs
			// bytes and the qh byte's bit pairs spread by PDEP.
			g := gather32f(grid, quadIndex(func(k int) GPVirtual {
				h, q := GP64(), GP64()
				MOVBQZX(Mem{Base: x, Disp: 66 + k}, h)
				PDEPQ(decSHi, h, h)
				MOVLQZX(Mem{Base: x, Disp: 2 + 4*k}, q)
				PDEPQ(decLoBytes, q, q)
				ORQ(h, q)
				return q
			}))
			w := c.scales(Mem{Base: x, Disp: 74})
			for z := 0; z < 4; z++ {
				k := K()
				KMOVQ(Mem{Base: x, Disp: 34 + 8*z}, k)
				chunk512(c, y, z, g[z], k, w, acc)
			}
		}
	})
}

// dotIQ2XXSAVX512r: per 32 weights ib the qword at 2+8ib: four grid index
// bytes, then a uint32 of four 7-bit sign indices and the 4-bit scale at the
// top. The sign bytes: VPMULTISHIFTQB picks each index, VPOPCNTB its parity
// (put in bit 7), VPERMB moves each group's byte into its lane of 64 values for
// VPSHUFBITQMB; the scales: each qword shifted right by 60.
func dotIQ2XXSAVX512r() {
	latticeDec512("dotIQ2XXSAVX512r", "IQ2XXS", 66, 0.125, func(c *dec512) decBlock512 {
		var perm, scPerm [4]VecVirtual
		for z := range perm {
			perm[z], scPerm[z] = ZMM(), ZMM()
			VMOVDQU64(decXXSPerm.Offset(64*z), perm[z])
			VMOVDQU64(decXXSScPerm.Offset(64*z), scPerm[z])
		}
		shift := ZMM()
		VMOVDQU64(decXXSShift, shift)
		b7f, b80 := ZMM(), ZMM()
		{
			g := GP32()
			MOVL(U32(0x7f7f7f7f), g)
			VPBROADCASTD(g, b7f)
			MOVL(U32(0x80808080), g)
			VPBROADCASTD(g, b80)
		}
		return func(x, y, grid GPVirtual, acc VecVirtual) {
			g := gather32f(grid, func(g int) GPVirtual {
				r := GP64()
				MOVBQZX(Mem{Base: x, Disp: 2 + 8*(g/4) + g%4}, r)
				return r
			})
			q := ZMM()
			VMOVDQU64(Mem{Base: x, Disp: 2}, q)
			sg := ZMM()
			VPMULTISHIFTQB(q, shift, sg)
			VPANDD(b7f, sg, sg)
			p := ZMM()
			rawOut("VPOPCNTB", sg, p)
			VPSLLW(U8(7), p, p)
			VPTERNLOGD(U8(0xec), b80, sg, p) // sg | p&0x80
			sc := ZMM()
			VPSRLQ(U8(60), q, sc)
			VPADDW(sc, sc, sc)
			VPORD(c.ones16, sc, sc)
			for z := 0; z < 4; z++ {
				t := ZMM()
				VPERMB(p, perm[z], t)
				k := K()
				rawOut("VPSHUFBITQMB", decXSBitsPlain, t, k)
				w := ZMM()
				VPERMW(sc, scPerm[z], w)
				qz := ZMM()
				VMOVDQU64(Mem{Base: y, Disp: q8KQS + 64*z}, qz)
				VPSUBB(qz, c.zero, k, qz)
				pr := ZMM()
				VPMADDUBSW(qz, g[z], pr)
				raw("VPDPWSSD", w, pr, acc)
			}
		}
	})
}
