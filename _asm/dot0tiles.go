package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// dot0AVX2Tile emits dot<typ>AVX2r4t4 (typ Q8_0, Q4_0 or Q5_0): 4 weight rows
// (x, x+xs, …) of nb blocks against 4 tokens' q8Blocks (y, y+ys, …),
// out[t·os/4 + r] = dot<typ>AVX2 of row r with token t: AVX2 prompt tiles
// without AVX-512's outer products.
//
// Each weight block is decoded once for the 4 tokens (its signed values s and
// |s|, as dot0AVX2Tokens), each token's block loaded once for the 4 rows; a
// (row, token) pair's exact isum is Σ |s|·(y·sign(s)) (VPSIGNB, VPMADDUBSW,
// VPMADDWD: exact while y > −128, which quantActQ8_0 never makes), its 8 int32
// lanes summed by a VPHADDD tree with the other pairs' so that one register
// holds the isums of 8 pairs: lane 2r+t of group g is row r with token 2g+t.
// The float steps then run on those 8 pairs side by side, one block at a time in
// block order: d = f16(x.d)·y.d, then sum += d·isum (Q4_0: sum = fma(isum, d,
// sum)), lane by lane the one-token kernel's operations in its order, so each
// output has its bits (and the Go reference's).
//
// Registers: the two groups' sums and the 4 tokens' blocks stay in Y0–Y15 with
// a row's decoded block and the tree's partial sums; the constants are memory
// operands.
func dot0AVX2Tile(typ string, T int) {
	name := fmt.Sprintf("dot%sAVX2r4t%d", typ, T)
	TEXT(name, NOSPLIT, "func(x *byte, xs int, y *byte, ys int, nb int, out *float32, os int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets out[t·os/4+r] = dot%sAVX2(x + r·xs, y + t·ys, nb) for r < 4, t < %d", name, typ, T),
		"(each weight block decoded once for the tokens, each token's block loaded once for the rows).")
	bs := map[string]int{"Q8_0": q80Size, "Q4_0": q40Size, "Q5_0": q50Size}[typ]
	x, xs, y, ys, n := GP64(), GP64(), GP64(), GP64(), GP64()
	Load(Param("x"), x)
	Load(Param("xs"), xs)
	Load(Param("y"), y)
	Load(Param("ys"), ys)
	Load(Param("nb"), n)
	x3 := GP64()
	LEAQ(Mem{Base: x, Index: xs, Scale: 2}, x3)
	ADDQ(xs, x3)
	// Token t's blocks are at ybase[t/3] + ys·(t%3).
	ybase := []GPVirtual{y}
	for len(ybase) < (T+2)/3 {
		b := GP64()
		LEAQ(Mem{Base: ybase[len(ybase)-1], Index: ys, Scale: 2}, b)
		ADDQ(ys, b)
		ybase = append(ybase, b)
	}
	at := func(base, base3, stride GPVirtual, i, disp int) Mem {
		switch i {
		case 1:
			return Mem{Base: base, Index: stride, Scale: 1, Disp: disp}
		case 2:
			return Mem{Base: base, Index: stride, Scale: 2, Disp: disp}
		case 3:
			return Mem{Base: base3, Disp: disp}
		}
		return Mem{Base: base, Disp: disp}
	}
	row := func(r, disp int) Mem { return at(x, x3, xs, r, disp) }
	tok := func(t, disp int) Mem {
		b := ybase[t/3]
		switch t % 3 {
		case 1:
			return Mem{Base: b, Index: ys, Scale: 1, Disp: disp}
		case 2:
			return Mem{Base: b, Index: ys, Scale: 2, Disp: disp}
		}
		return Mem{Base: b, Disp: disp}
	}

	// T = 4: the two groups' sums in registers; T = 8: the four on the stack,
	// with the rows' decoded blocks (decoded once for the two halves of the
	// tokens).
	var sums [2]VecVirtual
	var sumMem, decMem Mem
	if T == 4 {
		sums = [2]VecVirtual{YMM(), YMM()}
		for _, s := range sums {
			VXORPS(s, s, s)
		}
	} else {
		sumMem = AllocLocal(32 * T / 2)
		decMem = AllocLocal(2 * 32 * 4)
		z := YMM()
		VXORPS(z, z, z)
		for g := 0; g < T/2; g++ {
			VMOVUPS(z, sumMem.Offset(32*g))
		}
	}

	// decode sets s to the signed values of row r's block and abs to |s|.
	decode := func(r int, s, abs VecVirtual) {
		switch typ {
		case "Q8_0":
			VMOVDQU(row(r, 2), s)
		default:
			qsOff := 2
			if typ == "Q5_0" {
				qsOff = 6
			}
			t, th := XMM(), XMM()
			VMOVDQU(row(r, qsOff), t)
			VPSRLW(U8(4), t, th)
			VINSERTI128(U8(1), th, t.AsY(), s)
			VPAND(nibbleMask, s, s) // elements 0-15 the low nibbles, 16-31 the high
			k := eights
			if typ == "Q5_0" {
				h := YMM()
				VPBROADCASTD(row(r, 2), h)
				VPSHUFB(q5Spread, h, h)
				VPAND(q5Bits, h, h)
				VPCMPEQB(q5Bits, h, h)
				VPAND(bit4Mask, h, h)
				VPOR(h, s, s)
				k = sixteens
			}
			VPSUBB(k, s, s)
		}
		VPABSB(s, abs)
	}

	Label("block")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	// The 4 rows' f16(x.d), each twice: [x0 x0 x1 x1 x2 x2 x3 x3].
	xh := XMM()
	VPXOR(xh, xh, xh)
	for r := 0; r < 4; r++ {
		VPINSRW(U8(r), row(r, 0), xh, xh)
	}
	VPUNPCKLWD(xh, xh, xh)
	dx := YMM()
	VCVTPH2PS(xh, dx)
	for k := 0; k < T/4; k++ {
		var yt [4]VecVirtual
		for t := range yt {
			yt[t] = YMM()
			VMOVDQU(tok(4*k+t, q8QS), yt[t])
		}
		// pair returns the 8 int32 lanes of row r (decoded in s, abs) with tokens
		// t and t+1, pairwise summed: [r·t, r·t, r·t+1, r·t+1 | …].
		// Q4_0 and Q5_0 (|s| ≤ 16) keep int16 words through two VPHADDW levels
		// (8 products a word: |sum| ≤ 8·16·127 < 2¹⁵) and widen once per quad;
		// Q8_0's words (|s| ≤ 128) are widened at once.
		words := typ != "Q8_0"
		pair := func(t int, s, abs VecVirtual) VecVirtual {
			var p [2]VecVirtual
			for i := range p {
				p[i] = YMM()
				VPSIGNB(s, yt[t+i], p[i])
				VPMADDUBSW(p[i], abs, p[i])
				if !words {
					VPMADDWD(ones16, p[i], p[i])
				}
			}
			if words {
				VPHADDW(p[1], p[0], p[0])
			} else {
				VPHADDD(p[1], p[0], p[0])
			}
			return p[0]
		}
		// quads[g][h]: rows 2h, 2h+1 with tokens 2g, 2g+1, each half's 4 sums.
		var quads [2][2]VecVirtual
		for h := 0; h < 2; h++ {
			var pr [2][2]VecVirtual // [row parity][group]
			for i := 0; i < 2; i++ {
				s, abs := YMM(), YMM()
				r := 2*h + i
				if k == 0 {
					decode(r, s, abs)
					if T > 4 {
						VMOVDQU(s, decMem.Offset(64*r))
						VMOVDQU(abs, decMem.Offset(64*r+32))
					}
				} else {
					VMOVDQU(decMem.Offset(64*r), s)
					VMOVDQU(decMem.Offset(64*r+32), abs)
				}
				for g := 0; g < 2; g++ {
					pr[i][g] = pair(2*g, s, abs)
				}
			}
			for g := 0; g < 2; g++ {
				if words {
					VPHADDW(pr[1][g], pr[0][g], pr[0][g])
					VPMADDWD(ones16, pr[0][g], pr[0][g])
				} else {
					VPHADDD(pr[1][g], pr[0][g], pr[0][g])
				}
				quads[g][h] = pr[0][g]
			}
		}
		for g := 0; g < 2; g++ {
			lo, hi := YMM(), YMM()
			VPERM2I128(U8(0x20), quads[g][1], quads[g][0], lo)
			VPERM2I128(U8(0x31), quads[g][1], quads[g][0], hi)
			VPADDD(hi, lo, lo) // lane 2r+t: row r with token 2g+t
			f := YMM()
			VCVTDQ2PS(lo, f)
			d, d1 := YMM(), YMM()
			VBROADCASTSS(tok(4*k+2*g, 0), d)
			VBROADCASTSS(tok(4*k+2*g+1, 0), d1)
			VBLENDPS(U8(0xaa), d1, d, d) // [y0.d y1.d y0.d y1.d …]
			VMULPS(d, dx, d)             // f16(x.d)·y.d
			if T == 4 {
				blockStep(typ, f, d, sums[g])
			} else {
				sum := YMM()
				VMOVUPS(sumMem.Offset(32*(2*k+g)), sum)
				blockStep(typ, f, d, sum)
				VMOVUPS(sum, sumMem.Offset(32*(2*k+g)))
			}
		}
	}
	ADDQ(U8(bs), x)
	ADDQ(U8(bs), x3)
	for _, b := range ybase {
		ADDQ(U8(q8Size), b)
	}
	DECQ(n)
	JMP(LabelRef("block"))

	Label("done")
	out, os := GP64(), GP64()
	Load(Param("out"), out)
	Load(Param("os"), os)
	for g := 0; g < T/2; g++ {
		sg := sums[min(g, 1)]
		if T > 4 {
			sg = YMM()
			VMOVUPS(sumMem.Offset(32*g), sg)
		}
		hx := XMM()
		VEXTRACTF128(U8(1), sg, hx)
		for t := 0; t < 2; t++ {
			// token 2g+t: lanes t, 2+t (rows 0, 1) of the low half, of hx rows 2, 3
			for r := 0; r < 4; r++ {
				src := sg.AsX()
				lane := 2*r + t
				if r >= 2 {
					src, lane = hx, lane-4
				}
				if lane == 0 {
					VMOVSS(src, Mem{Base: out, Disp: 4 * r})
				} else {
					VEXTRACTPS(U8(lane), src, Mem{Base: out, Disp: 4 * r})
				}
			}
			if 2*g+t < T-1 {
				ADDQ(os, out)
			}
		}
	}
	VZEROUPPER()
	RET()
}
