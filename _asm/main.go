// Command _asm generates the amd64 assembly of lmlite's kernels
// (engine/kernels/simd_amd64.s) and their Go declarations
// (engine/kernels/simd_stubs_amd64.go) with avo. It is its own module so that only
// this generator depends on avo; run it through `go generate` in engine/kernels.
//
// Each row kernel has an AVX2 (+FMA, F16C) form and, where it pays off, an AVX-512
// (BW, VL, VNNI) form that keeps the AVX2 form's operations and order; the
// K-quant AVX2 kernels also have a two-token form (…x2) sharing the weight
// unpacking between activation rows (Q4_K also four- and eight-token forms,
// q4ktokens.go); on AVX-512 the tiles of tile.go (K-quants),
// outer.go (Q8_0, Q4_0, Q4_1, Q5_0) and outerk.go (IQ4_XS, Q2_K) take several
// rows or tokens at once. attn.go has
// attention's three steps (attntile.go the same for a group of up to four
// queries over the same keys, AVX-512; attnkv.go the same over quantized KV
// caches, AVX2, attnkvtile.go their scores 8 positions × up to 4 heads at a
// time), act.go the activation quantizers, rounding and
// SwiGLU, ternary.go the TQ2_0 and TQ1_0 row kernels and lattice.go the lattice
// types' (AVX2; lattice512.go their eight-token AVX-512 forms), floattile.go the F16 and BF16 one-row, several-token kernels
// (AVX-512).
// engine/kernels/simd_generic.go documents the numerics. avo's instruction table lacks AVX-512 VNNI, so VPDPBUSD and
// VPDPWSSD are emitted raw; the AVX-512 kernels may be given X16-X31, so their
// helpers pick EVEX forms (see evex).
//
// The kernels read the activation blocks of engine/kernels by raw offsets (the
// q8Block and q8KBlock layouts below); the package's simd_test.go checks those
// offsets against unsafe.Offsetof, so a layout change fails the tests instead of
// silently corrupting results.
package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"

	. "github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/ir"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Block layouts (bytes).
const (
	q8Size   = 40  // q8Block: d float32, c int32, qs [32]int8
	q8C      = 4   // offset of q8Block.c
	q8QS     = 8   // offset of q8Block.qs
	q8KSize  = 292 // q8KBlock: d float32, qs [256]int8, bsums [16]int16
	q8KQS    = 4   // offset of q8KBlock.qs
	q8KBsums = 260 // offset of q8KBlock.bsums

	q80Size = 34  // Q8_0: d f16, qs [32]int8
	q40Size = 18  // Q4_0: d f16, qs [16]byte (IQ4_NL too)
	q50Size = 22  // Q5_0: d f16, qh uint32, qs [16]byte
	q4KSize = 144 // Q4_K: d f16, dmin f16, scales [12]byte, qs [128]byte
	q5KSize = 176 // Q5_K: d f16, dmin f16, scales [12]byte, qh [32]byte, qs [128]byte
	q6KSize = 210 // Q6_K: ql [128]byte, qh [64]byte, scales [16]int8, d f16
)

var (
	nibbleMask, ones16, eights, bits45Mask              Mem
	q4kShuf, q4kShuf512, q6kShuf                        Mem
	q4kGatherLow, q4kGatherTop, q4kMaskLow, q4kMaskHigh Mem
	q4kMinPairs, q6kShiftLow, q6kShiftHigh, q6kPerm     Mem
	q4kShiftHigh, bit4Mask                              Mem
	q5kShiftBits, byteOnes                              Mem
	sixteens, q5Spread, q5Bits, iq4nlTable              Mem
)

func main() {
	ConstraintExpr("!purego")
	constants()
	moeTileConstants()
	vnniTileConstants()
	q4KPackedConstants()
	q4KAVX2TConstants()

	dotQ4KAVX2(1)
	dotQ4KAVX2(2)
	dotQ4KAVX2Tokens(4)
	dotQ4KAVX2Tokens(8)
	for t := 2; t <= 9; t++ {
		dotQ4KAVX2T(t)
	}
	dotQ5KAVX2(1)
	dotQ5KAVX2(2)
	dotQ4KAVX512(1)
	dotQ6KAVX2(1)
	dotQ6KAVX2(2)
	dotQ6KAVX2Tokens(4)
	dotQ6KAVX2Tokens(8)
	dotQ6KAVX512(1)
	dotQ6KAVX512Tokens(8)
	dotQ6KAVX512Tokens(9)
	dotQ6KAVX512Tokens(16)
	dotQ6KAVX512PairTokens()
	dotQ6KAVX512(4)
	dotQ5KAVX512Tokens(8)
	dotQ5KAVX512Tokens(16)
	dot0AVX2("Q8_0")
	dot0AVX2("Q4_0")
	dot0AVX2("Q5_0")
	for _, t := range dot0AVX2TokenCounts {
		for _, typ := range []string{"Q8_0", "Q4_0", "Q5_0"} {
			dot0AVX2Tokens(typ, t)
		}
	}
	for _, typ := range []string{"Q8_0", "Q4_0", "Q5_0"} {
		dot0AVX2Tile(typ, 4)
		if typ != "Q8_0" { // Q8_0's 8-token tile is no faster than two 4-token ones
			dot0AVX2Tile(typ, 8)
		}
	}
	dot0AVX2("IQ4_NL")
	dotIQ4XSAVX2()
	for _, t := range []int{4, 8} {
		dotIQ4NLAVX2Tokens(t)
		dotIQ4XSAVX2Tokens(t)
	}
	dotQ4_1AVX2()
	dotQ5_1AVX2()
	for _, typ := range []string{"Q4_1", "Q5_1"} {
		dotQx1AVX2Tokens(typ, 2)
		dotQx1AVX2Tokens(typ, 4)
		dotQx1AVX2Rows(typ, 4)
	}
	q2KConstants()
	dotQ2KAVX2()
	q3KConstants()
	for _, tokens := range []int{1, 2, 4} {
		dotQ3KAVX2(tokens)
	}
	for _, tokens := range []int{4, 8} {
		dotQ3KAVX512(tokens)
	}
	ternaryConstants()
	dotTQ2_0AVX2()
	dotTQ1_0AVX2(1)
	dotTQ1_0AVX2(2)
	latticeConstants()
	iq1mConstants()
	for _, tokens := range []int{1, 2, 4} {
		dotIQ2XXSAVX2(tokens)
		dotIQ3XXSAVX2(tokens)
		dotIQ2XSAVX2(tokens)
		dotIQ2SAVX2(tokens)
	}
	dotIQ3SAVX2()
	dotIQ3SAVX2Tokens(2)
	dotIQ3SAVX2Tokens(4)
	dotIQ3SAVX512x8()
	latticeAVX512x8()
	iqPanelConstants()
	iqPanelAVX512r4t4()
	decodeIQ3SPanelAVX512()
	iqPanelSumConstants()
	iqPanelSumAVX512r4t4("iqPanelSumAVX512r4t4", false)
	iqPanelSumAVX512r4t4("iqPanelSumFAVX512r4t4", true)
	decodeIQ1MPanelAVX512()
	iq2Dec512Constants()
	dotIQ2XSAVX512r()
	dotIQ2SAVX512r()
	dotIQ1MAVX512r()
	dotIQ2XXSAVX512r()
	iq3sBytePanelConstants()
	decodeIQ3SBytesAVX512()
	iq3sBytePanelAVX512r4t4()
	tq2PanelAVX512r4t4()
	decodeTQ2_0BytesAVX512()
	iq1sPanelConstants()
	iq1sPanelAVX512r4t4()
	decodeIQ1SBytesAVX512()
	iq1mBytePanelConstants()
	iq1mPanelAVX512r4t4()
	decodeIQ1MBytesAVX512()
	for _, g := range latticeGroups512 {
		decodePanelAVX512(g.typ, g.size, g.group)
	}
	iq2OuterKernels()
	iq2OuterAVX2()
	iq3sPanelAVX2()
	for _, tokens := range []int{1, 2, 4} {
		dotIQ1SAVX2(tokens)
		dotIQ1MAVX2(tokens)
	}
	dotIQ1MAVX2(8)
	dotFloatAVX2("dotF32AVX2", "F32", 4)
	dotF32VecDotAVX2()
	vecDotTailConstants()
	dotF16VecDotTailAVX512()
	dotF16VecDotTail16AVX512(1)
	dotF16VecDotTail16AVX512(2)
	dotF16VecDotTail16AVX2(1)
	dotF16VecDotTail16AVX2(2)
	dotF32VecDotTailAVX2()
	dotQ8_0VecDotAVX2()
	addScaledAVX2()
	dotFloatAVX2("dotF16AVX2", "F16", 2)
	dotFloatAVX2("dotBF16AVX2", "BF16", 2)
	dotFloatAVX512("dotF16AVX512", "F16", 2)
	dotFloatAVX512("dotBF16AVX512", "BF16", 2)
	dotFloatAVX512Rows("F16", 2, 4, false)
	dotFloatAVX512Rows("F16", 2, 1, true)
	for _, t := range floatTileTokens {
		dotFloatAVX512Tokens("F16", 2, t)
		dotFloatAVX512Tokens("BF16", 2, t)
	}
	for _, t := range floatTileTokens {
		dotFloatAVX512Tokens("F32", 4, t)
	}
	dotBF16DPr4()
	for _, t := range bf16DPTokens {
		dotBF16DPTokens(t)
	}
	for _, t := range f32AVX2Tokens {
		dotF32AVX2Tokens(t)
	}
	for _, t := range f32AVX2Tokens {
		dotFloatAVX2Tokens("F16", 2, t)
		dotFloatAVX2Tokens("BF16", 2, t)
	}
	attnConstants()
	attnExpConstants()
	attnScores()
	attnExp()
	attnExp512()
	attnFused()
	attnAccum("attnAccumF16", false)
	attnAccum("attnAccumF16AVX512", true)
	for nq := 2; nq <= attnGroupMax; nq++ {
		attnTileScores(nq)
		attnTileAccum(nq)
		attnTileFused(nq)
	}
	accumKV("Q8_0")
	accumKV("Q4_0")
	accumKVChunk("Q8_0")
	accumKVChunk("Q4_0")
	attnScoresKV("Q8_0")
	attnScoresKV("Q4_0")
	for t := 1; t <= attnGroupMax; t++ {
		scoresKVTile("Q8_0", t)
		scoresKVTile("Q4_0", t)
	}
	prefetchRows()
	for nq := 2; nq <= attnGroupMax; nq++ {
		accumKVGroup("Q8_0", nq)
		accumKVGroup("Q4_0", nq)
	}
	for nq := 1; nq <= attnGroupMax; nq++ {
		accumKVGroup512("Q8_0", nq)
		accumKVGroup512("Q4_0", nq)
	}
	scaleRows512()
	attnF32Constants()
	attnChunkF32()
	attnChunkF32F16()
	attnCvtF32()
	actConstants()
	quantQ8K()
	quantQ8_0()
	roundFloats("roundF16AVX2", false)
	roundFloats("roundBF16AVX2", true)
	toF16()
	siluConstants()
	swiglu()
	ropeConstants()
	ropeNeox()
	ropeNormal()
	// (Q5_K's tiles went with issue 32: one float per row and token cannot keep
	// llama.cpp's 8-lane order; tile.go still knows their form. Q6_K's went
	// too, when Q3_K, whose repacked prompts they served, took that order.)
	for _, typ := range []string{"Q4K"} {
		for _, rt := range [][2]int{{8, 1}, {1, 16}, {1, 8}, {1, 4}} {
			dotKTile(typ, rt[0], rt[1])
		}
	}
	dotQ4KTile44()
	dotQ4KTile16m()
	for t := 2; t <= 16; t++ {
		dotQ4KTileP(t)
	}
	for t := 5; t <= 9; t++ {
		dotQ4KTileP2(t)
	}
	for _, typ := range []string{"Q8_0", "Q4_0"} {
		for _, t := range []int{1, 4, 8, 16} {
			dot0Outer(typ, t)
		}
	}
	outerConstants()
	for _, t := range []int{1, 4, 8, 16} {
		dot0OuterFused(t)
	}
	dot0Outer("Q5_0", 1)
	dot0Outer("IQ4_NL", 1)
	for _, typ := range []string{"IQ4XS", "Q2K"} {
		for _, t := range []int{4, 8, 16} {
			dotKOuter(typ, t)
		}
	}
	dotKOuter("Q2K", 1)
	q4KX16Kernels()
	q6KX16Kernels()
	for _, typ := range []string{"Q4_1", "Q5_1"} {
		for _, t := range []int{1, 2} {
			dotQx1Outer(typ, t)
		}
	}

	Generate()
}

// rodata emits b (a multiple of 8 bytes) as a read-only symbol.
func rodata(name string, b []byte) Mem {
	m := GLOBL(name, RODATA|NOPTR)
	for i := 0; i < len(b); i += 8 {
		DATA(i, U64(binary.LittleEndian.Uint64(b[i:])))
	}
	return m
}

func repeat(v byte, n int) []byte { return bytes.Repeat([]byte{v}, n) }

func constants() {
	nibbleMask = rodata("nibbleMask", repeat(0x0f, 64))
	eights = rodata("eights", repeat(8, 32))
	bits45Mask = rodata("bits45Mask", repeat(0x30, 64))
	bit4Mask = rodata("bit4Mask", repeat(0x10, 32))
	sixteens = rodata("sixteens", repeat(16, 32))
	// Q5_0's high bits: q5Spread puts byte j/8 of the block's uint32 in byte j
	// (lane 1 holds bytes 16-31: indices 2 and 3), q5Bits tests bit j%8.
	var sp, bt []byte
	for j := 0; j < 32; j++ {
		sp = append(sp, byte(j/8))
		bt = append(bt, 1<<(j%8))
	}
	q5Spread = rodata("q5Spread", sp)
	q5Bits = rodata("q5Bits", bt)
	// IQ4_NL's 16 levels (ggml's kvalues_iq4nl) in both 128-bit lanes.
	lv := []int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}
	var tb []byte
	for k := 0; k < 2; k++ {
		for _, v := range lv {
			tb = append(tb, byte(v))
		}
	}
	iq4nlTable = rodata("iq4nlTable", tb)
	ones16 = rodata("ones16", bytes.Repeat([]byte{1, 0}, 16))

	// q4kShuf: 8 VPSHUFB masks of 32 bytes; mask i broadcasts int16 i of each
	// 128-bit lane (the sub-block scale i) to the whole lane.
	var b []byte
	for i := 0; i < 8; i++ {
		b = append(b, bytes.Repeat([]byte{byte(2 * i), byte(2*i + 1)}, 16)...)
	}
	q4kShuf = rodata("q4kShuf", b)
	// q4kShuf512: 4 masks of 64 bytes; mask j broadcasts int16 2j in the low 256
	// bits and int16 2j+1 in the high 256 bits.
	b = nil
	for j := 0; j < 4; j++ {
		b = append(b, bytes.Repeat([]byte{byte(4 * j), byte(4*j + 1)}, 16)...)
		b = append(b, bytes.Repeat([]byte{byte(4*j + 2), byte(4*j + 3)}, 16)...)
	}
	q4kShuf512 = rodata("q4kShuf512", b)
	// q6kShuf: 8 masks of 16 bytes; mask m repeats byte 2m eight times, then
	// byte 2m+1 eight times (the scales of two groups of 16 elements).
	b = nil
	for m := 0; m < 8; m++ {
		b = append(b, repeat(byte(2*m), 8)...)
		b = append(b, repeat(byte(2*m+1), 8)...)
	}
	q6kShuf = rodata("q6kShuf", b)

	// The Q4_K scale unpacking (q4KScales): output byte i takes the low bits of
	// source byte gatherLow[i] masked by maskLow[i] (or its high nibble, for
	// mins 4-7), and the top two bits of byte gatherTop[i] (0x80: none).
	q4kGatherLow = rodata("q4kGatherLow", []byte{0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11})
	q4kGatherTop = rodata("q4kGatherTop", []byte{0x80, 0x80, 0x80, 0x80, 0, 1, 2, 3, 0x80, 0x80, 0x80, 0x80, 4, 5, 6, 7})
	q4kMaskLow = rodata("q4kMaskLow", []byte{63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0})
	q4kMaskHigh = rodata("q4kMaskHigh", []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15})
	// Q6_K on 512 bits: word shift counts per 256-bit half, and the VPERMW
	// indexes giving 128-bit lane L of products i (= 2h+k) the scale of group
	// 4i+L.
	q6kShiftLow = rodata("q6kShiftLow", append(bytes.Repeat([]byte{4, 0}, 16), bytes.Repeat([]byte{2, 0}, 16)...))
	q6kShiftHigh = rodata("q6kShiftHigh", append(bytes.Repeat([]byte{0, 0}, 16), bytes.Repeat([]byte{2, 0}, 16)...))
	b = nil
	for i := 0; i < 4; i++ {
		for l := 0; l < 32; l++ {
			b = append(b, byte(4*i+l/8), 0)
		}
	}
	q6kPerm = rodata("q6kPerm", b)
	// Q4_K on 512 bits: word shift counts 0 in the low half, 4 in the high.
	q4kShiftHigh = rodata("q4kShiftHigh", append(bytes.Repeat([]byte{0, 0}, 16), bytes.Repeat([]byte{4, 0}, 16)...))
	// Q5_K on 512 bits, sub-block pair j: word shift counts 2j in the low half
	// (sub-block 2j's high bits), 2j+1 in the high half (sub-block 2j+1's).
	b = nil
	for j := 0; j < 4; j++ {
		b = append(b, bytes.Repeat([]byte{byte(2 * j), 0}, 16)...)
		b = append(b, bytes.Repeat([]byte{byte(2*j + 1), 0}, 16)...)
	}
	q5kShiftBits = rodata("q5kShiftBits", b)
	byteOnes = rodata("byteOnes", bytes.Repeat([]byte{1}, 64))
	// q4kMinPairs repeats each min (bytes 8-15 of the unpacked scales) twice,
	// one per bsum of its sub-block.
	q4kMinPairs = rodata("q4kMinPairs", []byte{8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15})
}

// evex is set while an AVX-512 kernel is generated: its registers may be
// X16-X31, which only EVEX encodings reach, so the helpers below pick the EVEX
// forms of the VEX-only instructions.
var evex bool

func vpand(a, b, dst Op) {
	if evex {
		VPANDD(a, b, dst)
	} else {
		VPAND(a, b, dst)
	}
}

func vpor(a, b, dst Op) {
	if evex {
		VPORD(a, b, dst)
	} else {
		VPOR(a, b, dst)
	}
}

func vmovdqu(src, dst Op) {
	if evex {
		VMOVDQU32(src, dst)
	} else {
		VMOVDQU(src, dst)
	}
}

func vextracti128(i, src, dst Op) {
	if evex {
		VEXTRACTI32X4(i, src, dst)
	} else {
		VEXTRACTI128(i, src, dst)
	}
}

// raw emits an instruction avo's database lacks (AVX-512 VNNI), in Go operand
// order; the last operand is read and written.
func raw(op string, ops ...Op) {
	Instruction(&ir.Instruction{
		Opcode:   op,
		Operands: ops,
		Inputs:   ops,
		Outputs:  ops[len(ops)-1:],
	})
}

func params3() (x, y, n GPVirtual) {
	x, y, n = GP64(), GP64(), GP64()
	Load(Param("x"), x)
	Load(Param("y"), y)
	Load(Param("n"), n)
	return
}

// q4KScales unpacks the 12 scale bytes of the Q4_K block at x into an xmm of 16
// bytes, the eight 6-bit scales then the eight 6-bit mins, with two byte
// shuffles (ggml's get_scale_min_k4, or its kmask trick, done in SIMD).
//
// Sub-block j < 4 has scale b[j]&63 and min b[j+4]&63; j ≥ 4 has scale
// b[j+4]&15 | (b[j-4]>>6)<<4 and min b[j+4]>>4 | (b[j]>>6)<<4.
func q4KScales(x GPVirtual) VecVirtual {
	b := XMM()
	vmovdqu(Mem{Base: x, Disp: 4}, b) // the 12 scale bytes and 4 quant bytes
	a := XMM()
	VPSHUFB(q4kGatherLow, b, a)
	t := XMM()
	VPSRLW(U8(4), a, t)
	vpand(q4kMaskHigh, t, t) // mins 4-7: b[j+4]>>4
	vpand(q4kMaskLow, a, a)  // scales 0-3, mins 0-3: &63; scales 4-7: &15
	vpor(t, a, a)
	c := XMM()
	VPSHUFB(q4kGatherTop, b, c)
	VPSRLW(U8(2), c, c)
	vpand(bits45Mask, c, c) // the top two bits of scales and mins 4-7
	vpor(c, a, a)
	return a
}

// q4KMinSum returns in a ymm eight int32 whose sum is Σ min_k · (the sum of the
// activations of sub-block k), from the unpacked scales and mins u.
func q4KMinSum(y GPVirtual, u VecVirtual) VecVirtual {
	md := XMM()
	VPSHUFB(q4kMinPairs, u, md) // each min twice, for the two bsums of its sub-block
	mw := YMM()
	VPMOVZXBW(md, mw)
	ms := YMM()
	VPMADDWD(Mem{Base: y, Disp: q8KBsums}, mw, ms)
	return ms
}

// q4KFinish adds d·isum − dmin·msum of the Q4_K block at x to sum, in the
// reference's order: d = f16(x.d)·y.d, dmin = f16(x.dmin)·y.d, and
// sum += d·float32(isum) − dmin·float32(msum). is holds four int32 whose sum is
// isum, ms eight whose sum is msum.
func q4KFinish(x, y GPVirtual, is, ms, sum VecVirtual) {
	q4KAdd(y, q4KDMin(x), q4KIntSums(is, ms), sum)
}

// q4KIntSums returns float32(isum), float32(isum), float32(msum),
// float32(msum) from four int32 summing to isum and eight summing to msum.
func q4KIntSums(is, ms VecVirtual) VecVirtual {
	mh := XMM()
	vextracti128(U8(1), ms, mh)
	m4 := XMM()
	VPADDD(mh, ms.AsX(), m4)
	lo, hi := XMM(), XMM()
	VPUNPCKLQDQ(m4, is, lo) // is0 is1 m0 m1
	VPUNPCKHQDQ(m4, is, hi) // is2 is3 m2 m3
	VPADDD(hi, lo, lo)
	sw := XMM()
	VPSHUFD(U8(0xb1), lo, sw)
	VPADDD(sw, lo, lo) // isum isum msum msum
	f := XMM()
	VCVTDQ2PS(lo, f)
	return f
}

// q4KDMin returns f16(x.d), f16(x.d), f16(x.dmin), f16(x.dmin) of the Q4_K
// block at x.
func q4KDMin(x GPVirtual) VecVirtual {
	t := GP32()
	MOVL(Mem{Base: x}, t)
	dd := XMM()
	VMOVD(t, dd)
	VCVTPH2PS(dd, dd)     // d dmin
	VUNPCKLPS(dd, dd, dd) // d d dmin dmin
	return dd
}

// q4KAdd adds (dd·y.d)·f lane 0 minus lane 2 to sum (f is clobbered).
func q4KAdd(y GPVirtual, dd, f, sum VecVirtual) {
	yd := XMM()
	VBROADCASTSS(Mem{Base: y}, yd)
	d2 := XMM()
	VMULPS(yd, dd, d2)
	VMULPS(d2, f, f) // d·isum, d·isum, dmin·msum, dmin·msum
	m := XMM()
	VMOVHLPS(f, f, m)
	VSUBSS(m, f, f)
	VADDSS(f, sum, sum)
}

// dotQ4KAVX2 emits the Q4_K kernel for AVX2; with tokens > 1 the kernel for
// that many activation rows (stride bytes apart) at once, each with the
// single-token kernel's operations and bits.
func dotQ4KAVX2(tokens int) { dotQ45KAVX2("Q4K", tokens) }

// dotQ5KAVX2 emits the Q5_K kernel for AVX2: Q4_K's, with each quant's fifth
// bit (bit 2j or 2j+1 of qh[l] for the low or high nibbles of step j) moved to
// bit 4 and ORed in before the products (quants up to 31: VPMADDUBSW's pairs stay
// below 2^15). The scales and mins are Q4_K's; the float steps are llama.cpp's
// (dotQ5KRowGeneric, issue 32): the 8 int32 lanes converted and added times
// f16(x.d)·y.d in one fused multiply-add per block, −(f16(x.dmin)·y.d)·msum
// fused-multiply-added into a scalar, the lanes reduced as sum8 and the scalar
// added last.
func dotQ5KAVX2(tokens int) { dotQ45KAVX2("Q5K", tokens) }

func dotQ45KAVX2(typ string, tokens int) {
	q5 := typ == "Q5K"
	qsOff, size, tname := 16, q4KSize, "Q4_K"
	if q5 {
		qsOff, size, tname = 48, q5KSize, "Q5_K"
	}
	if tokens == 1 {
		TEXT("dot"+typ+"AVX2", NOSPLIT, "func(x, y *byte, n int) float32")
		Pragma("noescape")
		Doc(fmt.Sprintf("dot%sAVX2 is the dot product of n %s blocks at x with n q8KBlocks at y.", typ, tname))
	} else {
		name := fmt.Sprintf("dot%sAVX2x%d", typ, tokens)
		TEXT(name, NOSPLIT, "func(x, y *byte, n, stride int, out *float32)")
		Pragma("noescape")
		Doc(fmt.Sprintf("%s sets out[t] = dot%sAVX2(x, y+t·stride, n) for t < %d.", name, typ, tokens))
	}
	x, y, n := params3()
	ys := tokenRows(y, tokens)
	sums := make([]VecVirtual, tokens)
	for t := range sums {
		sums[t] = XMM()
		VXORPS(sums[t], sums[t], sums[t])
	}
	var facc []VecVirtual // Q5_K: each token's 8 float lanes (sums: its scalar)
	if q5 {
		facc = make([]VecVirtual, tokens)
		for t := range facc {
			facc[t] = YMM()
			VXORPS(facc[t], facc[t], facc[t])
		}
	}
	m4 := YMM()
	VMOVDQU(nibbleMask, m4)

	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	u := q4KScales(x)
	ms := make([]VecVirtual, tokens)
	for t := range ms {
		ms[t] = q4KMinSum(ys[t], u)
		if q5 {
			// Q5_K's mins into its scalar now: fewer registers live (the
			// two-token kernel stays within the 16 of AVX2).
			q5KMins(x, ys[t], ms[t], sums[t])
		}
	}
	smw := YMM()
	VPMOVZXBW(u, smw) // scales then mins, as int16
	sc := YMM()
	VPERMQ(U8(0x44), smw, sc) // the scales in both lanes
	var hbits VecVirtual
	if q5 {
		hbits = YMM()
		VMOVDQU(Mem{Base: x, Disp: 16}, hbits) // qh
	}

	acc := make([]VecVirtual, tokens)
	for t := range acc {
		acc[t] = YMM()
		VPXOR(acc[t], acc[t], acc[t])
	}
	for j := 0; j < 4; j++ {
		q := YMM()
		VMOVDQU(Mem{Base: x, Disp: qsOff + 32*j}, q)
		qh := YMM()
		VPSRLW(U8(4), q, qh)
		VPAND(m4, qh, qh)
		VPAND(m4, q, q)
		if q5 {
			// Bit k of each qh byte to bit 4 (a word shift; the AND keeps
			// each byte's own bit), ORed into the nibbles.
			for i, dst := range []VecVirtual{q, qh} {
				k := 2*j + i
				h := YMM()
				switch {
				case k < 4:
					VPSLLW(U8(4-k), hbits, h)
				case k > 4:
					VPSRLW(U8(k-4), hbits, h)
				default:
					VMOVDQA(hbits, h)
				}
				VPAND(bit4Mask, h, h)
				VPOR(h, dst, dst)
			}
		}
		s1, s2 := YMM(), YMM()
		VPSHUFB(q4kShuf.Offset(64*j), sc, s1)
		VPSHUFB(q4kShuf.Offset(64*j+32), sc, s2)
		for t, yt := range ys {
			p1, p2 := YMM(), YMM()
			VPMADDUBSW(Mem{Base: yt, Disp: q8KQS + 64*j}, q, p1)
			VPMADDUBSW(Mem{Base: yt, Disp: q8KQS + 64*j + 32}, qh, p2)
			VPMADDWD(s1, p1, p1)
			VPMADDWD(s2, p2, p2)
			VPADDD(p1, acc[t], acc[t])
			VPADDD(p2, acc[t], acc[t])
		}
	}
	dd := q4KDMin(x)
	for t := range acc {
		if q5 {
			q5KLanes(ys[t], dd, acc[t], facc[t])
			continue
		}
		hi := XMM()
		VEXTRACTI128(U8(1), acc[t], hi)
		is := XMM()
		VPADDD(hi, acc[t].AsX(), is)
		q4KAdd(ys[t], dd, q4KIntSums(is, ms[t]), sums[t])
	}

	ADDQ(U32(size), x)
	for _, yt := range ys {
		ADDQ(U32(q8KSize), yt)
	}
	DECQ(n)
	JMP(LabelRef("loop"))

	Label("done")
	if q5 {
		for t := range sums {
			r := hsum8(facc[t])
			VADDSS(sums[t], r, r)
			sums[t] = r
		}
	}
	storeSums(sums)
}

// q5KLanes ends a Q5_K block in llama.cpp's order (dotQ5KRowGeneric): the 8
// int32 lanes converted and added times f16(x.d)·y.d to the float lanes of acc
// in one fused multiply-add. dd is q4KDMin's.
func q5KLanes(y GPVirtual, dd, lanes, acc VecVirtual) {
	f := YMM()
	VCVTDQ2PS(lanes, f)
	d := XMM()
	VMULSS(Mem{Base: y}, dd, d) // f16(x.d)·y.d
	dy := YMM()
	VBROADCASTSS(d, dy)
	VFMADD231PS(dy, f, acc)
}

// q5KMins adds a Q5_K block's mins to summs in llama.cpp's order: msum (the sum
// of ms's eight int32) times −(f16(x.dmin)·y.d), fused-multiply-added.
func q5KMins(x, y GPVirtual, ms, summs VecVirtual) {
	mh := XMM()
	vextracti128(U8(1), ms, mh)
	m4 := XMM()
	VPADDD(mh, ms.AsX(), m4)
	t := XMM()
	VPSHUFD(U8(0x4e), m4, t)
	VPADDD(t, m4, m4)
	VPSHUFD(U8(0xb1), m4, t)
	VPADDD(t, m4, m4)
	mf := XMM()
	VCVTDQ2PS(m4, mf) // msum
	g := GP32()
	MOVWLZX(Mem{Base: x, Disp: 2}, g)
	dmin := XMM()
	VMOVD(g, dmin)
	VCVTPH2PS(dmin, dmin)
	VMULSS(Mem{Base: y}, dmin, dmin) // f16(x.dmin)·y.d
	VFNMADD231SS(mf, dmin, summs)    // summs −= dmin·msum, rounded once
}

// dotQ4KAVX512 emits dotQ4KAVX2 on 512-bit vectors: 64 weights per step, the
// scale multiply-and-add fused by AVX-512 VNNI's VPDPWSSD. With tokens > 1 it
// emits the kernel for that many activation rows (stride bytes apart) at once,
// sharing the weight unpacking; each token's operations and their order are the
// single-token kernel's, so each result has its bits.
func dotQ4KAVX512(tokens int) {
	evex = true
	defer func() { evex = false }()
	if tokens == 1 {
		TEXT("dotQ4KAVX512", NOSPLIT, "func(x, y *byte, n int) float32")
		Pragma("noescape")
		Doc("dotQ4KAVX512 is dotQ4KAVX2 with AVX-512BW and AVX-512 VNNI.")
	} else {
		name := fmt.Sprintf("dotQ4KAVX512x%d", tokens)
		TEXT(name, NOSPLIT, "func(x, y *byte, n, stride int, out *float32)")
		Pragma("noescape")
		Doc(fmt.Sprintf("%s sets out[t] = dotQ4KAVX512(x, y+t·stride, n) for t < %d.", name, tokens))
	}
	x, y, n := params3()
	ys := tokenRows(y, tokens)
	sums := make([]VecVirtual, tokens)
	for t := range sums {
		sums[t] = XMM()
		VXORPS(sums[t], sums[t], sums[t])
	}
	m4, shr4 := ZMM(), ZMM()
	VMOVDQU64(nibbleMask, m4)
	VMOVDQU64(q4kShiftHigh, shr4)

	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	u := q4KScales(x)
	ms := make([]VecVirtual, tokens)
	for t := range ms {
		ms[t] = q4KMinSum(ys[t], u)
	}
	smw := YMM()
	VPMOVZXBW(u, smw)
	sc := ZMM()
	VSHUFI64X2(U8(0), smw.AsZ(), smw.AsZ(), sc) // the scales in all four lanes

	acc := make([]VecVirtual, tokens)
	for t := range acc {
		acc[t] = ZMM()
		VPXORD(acc[t], acc[t], acc[t])
	}
	for j := 0; j < 4; j++ {
		// The 32 quant bytes in both halves, the high half shifted to its
		// high nibbles: the 64 quants of elements 64j..64j+63.
		qq := ZMM()
		VBROADCASTI64X4(Mem{Base: x, Disp: 16 + 32*j}, qq)
		VPSRLVW(shr4, qq, qq)
		VPANDD(m4, qq, qq)
		s := ZMM()
		VPSHUFB(q4kShuf512.Offset(64*j), sc, s)
		for t := range acc {
			p := ZMM()
			VPMADDUBSW(Mem{Base: ys[t], Disp: q8KQS + 64*j}, qq, p)
			raw("VPDPWSSD", s, p, acc[t])
		}
	}
	dd := q4KDMin(x)
	for t := range acc {
		hi := YMM()
		VEXTRACTI64X4(U8(1), acc[t], hi)
		a8 := YMM()
		VPADDD(hi, acc[t].AsY(), a8)
		h4 := XMM()
		vextracti128(U8(1), a8, h4)
		is := XMM()
		VPADDD(h4, a8.AsX(), is)
		q4KAdd(ys[t], dd, q4KIntSums(is, ms[t]), sums[t])
	}

	ADDQ(U32(q4KSize), x)
	for _, yt := range ys {
		ADDQ(U32(q8KSize), yt)
	}
	DECQ(n)
	JMP(LabelRef("loop"))

	Label("done")
	storeSums(sums)
}

// Q6_K: the kernels multiply the unsigned 6-bit quants q with y and take the
// offset back out once per block through the bsums:
// Σ s_g·(q-32)·y = Σ s_g·q·y − 32·Σ s_g·bsum_g (exact; bsums as quantActQ8K
// makes them).

// q6KD returns f16(x.d) of the Q6_K block at x in lane 0.
func q6KD(x GPVirtual) VecVirtual {
	g := GP32()
	MOVWLZX(Mem{Base: x, Disp: 208}, g)
	dd := XMM()
	VMOVD(g, dd)
	VCVTPH2PS(dd, dd)
	return dd
}

// q6KLanes ends a block in llama.cpp's order (dotQ6KRowGeneric): lanes (8 int32,
// lane k the products at positions 4k..4k+3 of each 32-element chunk) less
// 32·bc (lane k the bsum·scale of sub-blocks 2k and 2k+1), converted and added
// times y.d·f16(x.d) to the 8 float lanes of acc in one fused multiply-add.
func q6KLanes(y GPVirtual, dd, lanes, bc, acc VecVirtual) {
	VPSLLD(U8(5), bc, bc)
	VPSUBD(bc, lanes, lanes)
	f := YMM()
	VCVTDQ2PS(lanes, f)
	d := XMM()
	VMULSS(Mem{Base: y}, dd, d)
	dy := YMM()
	VBROADCASTSS(d, dy)
	VFMADD231PS(dy, f, acc)
}

// storeLaneSums reduces each token's 8 float lanes as sum8 and returns or stores
// them as storeSums.
func storeLaneSums(accs []VecVirtual) {
	sums := make([]VecVirtual, len(accs))
	for t, a := range accs {
		sums[t] = hsum8(a)
	}
	storeSums(sums)
}

// dotQ6KAVX2 emits the Q6_K kernel for AVX2; with tokens > 1 the kernel for
// that many activation rows (stride bytes apart) at once, each with the
// single-token kernel's operations and bits.
func dotQ6KAVX2(tokens int) {
	if tokens == 1 {
		TEXT("dotQ6KAVX2", NOSPLIT, "func(x, y *byte, n int) float32")
		Pragma("noescape")
		Doc("dotQ6KAVX2 is the dot product of n Q6_K blocks at x with n q8KBlocks at y.")
	} else {
		name := fmt.Sprintf("dotQ6KAVX2x%d", tokens)
		TEXT(name, NOSPLIT, "func(x, y *byte, n, stride int, out *float32)")
		Pragma("noescape")
		Doc(fmt.Sprintf("%s sets out[t] = dotQ6KAVX2(x, y+t·stride, n) for t < %d.", name, tokens))
	}
	x, y, n := params3()
	ys := tokenRows(y, tokens)
	facc := make([]VecVirtual, tokens)
	for t := range facc {
		facc[t] = YMM()
		VXORPS(facc[t], facc[t], facc[t])
	}
	m4, m30 := YMM(), YMM()
	VMOVDQU(nibbleMask, m4)
	VMOVDQU(bits45Mask, m30)

	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	scales := XMM()
	VMOVDQU(Mem{Base: x, Disp: 192}, scales)
	sw16 := YMM()
	VPMOVSXBW(scales, sw16)
	bc := make([]VecVirtual, tokens)
	acc := make([]VecVirtual, tokens)
	for t, yt := range ys {
		bc[t] = YMM()
		VPMADDWD(Mem{Base: yt, Disp: q8KBsums}, sw16, bc[t])
		acc[t] = YMM()
		VPXOR(acc[t], acc[t], acc[t])
	}
	for h := 0; h < 2; h++ {
		for k := 0; k < 4; k++ {
			v, sw := q6KChunk(x, scales, h, k, m4, m30)
			for t, yt := range ys {
				p := YMM()
				VPMADDUBSW(Mem{Base: yt, Disp: q8KQS + 128*h + 32*k}, v, p)
				VPMADDWD(sw, p, p)
				VPADDD(p, acc[t], acc[t])
			}
		}
	}
	dd := q6KD(x)
	for t := range acc {
		q6KLanes(ys[t], dd, acc[t], bc[t], facc[t])
	}

	ADDQ(U32(q6KSize), x)
	for _, yt := range ys {
		ADDQ(U32(q8KSize), yt)
	}
	DECQ(n)
	JMP(LabelRef("loop"))

	Label("done")
	storeLaneSums(facc)
}

// dotQ6KAVX512 takes 64 quants per step: the 64 bytes of ql for half h hold
// the low nibbles of elements 128h+0..63 and the high nibbles of 128h+64..127;
// their top bits come from qh (broadcast to both 256-bit halves) by per-half
// shifts; each 128-bit lane of products gets its group's scale by VPERMW. With
// tokens > 1 it emits the kernel for that many activation rows (stride bytes
// apart), each with the single-token kernel's operations and bits.
func dotQ6KAVX512(tokens int) {
	evex = true
	defer func() { evex = false }()
	if tokens == 1 {
		TEXT("dotQ6KAVX512", NOSPLIT, "func(x, y *byte, n int) float32")
		Pragma("noescape")
		Doc("dotQ6KAVX512 is dotQ6KAVX2 with AVX-512BW and AVX-512 VNNI.")
	} else {
		name := fmt.Sprintf("dotQ6KAVX512x%d", tokens)
		TEXT(name, NOSPLIT, "func(x, y *byte, n, stride int, out *float32)")
		Pragma("noescape")
		Doc(fmt.Sprintf("%s sets out[t] = dotQ6KAVX512(x, y+t·stride, n) for t < %d.", name, tokens))
	}
	x, y, n := params3()
	ys := tokenRows(y, tokens)
	facc := make([]VecVirtual, tokens)
	for t := range facc {
		facc[t] = YMM()
		VXORPS(facc[t], facc[t], facc[t])
	}
	m4, m30, shl, shr := ZMM(), ZMM(), ZMM(), ZMM()
	VMOVDQU64(nibbleMask, m4)
	VMOVDQU64(bits45Mask, m30)
	VMOVDQU64(q6kShiftLow, shl)
	VMOVDQU64(q6kShiftHigh, shr)
	// With more than two tokens the registers are short: the permutations are
	// loaded where they are used and the scales·bsums products taken at the
	// block's end (the same values).
	lean := tokens > 2
	var idx [4]VecVirtual
	if !lean {
		for i := range idx {
			idx[i] = ZMM()
			VMOVDQU64(q6kPerm.Offset(64*i), idx[i])
		}
	}

	Label("loop")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	sw16 := ZMM()
	VPMOVSXBW(Mem{Base: x, Disp: 192}, sw16.AsY())
	bc := make([]VecVirtual, tokens)
	acc := make([]VecVirtual, tokens)
	for t := range bc {
		if !lean {
			bc[t] = YMM()
			VPMADDWD(Mem{Base: ys[t], Disp: q8KBsums}, sw16.AsY(), bc[t])
		}
		acc[t] = ZMM()
		VPXORD(acc[t], acc[t], acc[t])
	}
	for h := 0; h < 2; h++ {
		ql, qh := ZMM(), ZMM()
		VMOVDQU64(Mem{Base: x, Disp: 64 * h}, ql)
		VBROADCASTI64X4(Mem{Base: x, Disp: 128 + 32*h}, qh)
		lo, hi := ZMM(), ZMM()
		VPANDD(m4, ql, lo)
		VPSRLW(U8(4), ql, hi)
		VPANDD(m4, hi, hi)
		tt := ZMM()
		VPSLLVW(shl, qh, tt) // bits 0-1 (first half), 2-3 (second) to 4-5
		VPANDD(m30, tt, tt)
		VPORD(tt, lo, lo)
		VPSRLVW(shr, qh, tt) // bits 4-5, 6-7 to 4-5
		VPANDD(m30, tt, tt)
		VPORD(tt, hi, hi)
		for k, v := range []VecVirtual{lo, hi} {
			s := ZMM()
			if lean {
				VMOVDQU64(q6kPerm.Offset(64*(2*h+k)), s)
				VPERMW(sw16, s, s)
			} else {
				VPERMW(sw16, idx[2*h+k], s)
			}
			for t := range acc {
				p := ZMM()
				VPMADDUBSW(Mem{Base: ys[t], Disp: q8KQS + 128*h + 64*k}, v, p)
				raw("VPDPWSSD", s, p, acc[t])
			}
		}
	}
	dd := q6KD(x)
	for t := range acc {
		// int32 lanes k and k+8 hold positions 4k..4k+3 of the two 32-element
		// chunks of each 64: their sum is the AVX2 kernel's lane k.
		a8 := YMM()
		VEXTRACTI64X4(U8(1), acc[t], a8)
		VPADDD(a8, acc[t].AsY(), a8)
		if lean {
			bc[t] = YMM()
			VPMADDWD(Mem{Base: ys[t], Disp: q8KBsums}, sw16.AsY(), bc[t])
		}
		q6KLanes(ys[t], dd, a8, bc[t], facc[t])
	}

	ADDQ(U32(q6KSize), x)
	for _, yt := range ys {
		ADDQ(U32(q8KSize), yt)
	}
	DECQ(n)
	JMP(LabelRef("loop"))

	Label("done")
	storeLaneSums(facc)
}

// tokenRows returns the activation row pointers of a multi-token kernel: y
// and, with tokens > 1, y + t·stride (the "stride" parameter).
func tokenRows(y GPVirtual, tokens int) []GPVirtual {
	ys := []GPVirtual{y}
	if tokens > 1 {
		stride := GP64()
		Load(Param("stride"), stride)
		for t := 1; t < tokens; t++ {
			yt := GP64()
			LEAQ(Mem{Base: ys[t-1], Index: stride, Scale: 1}, yt)
			ys = append(ys, yt)
		}
	}
	return ys
}

// storeSums returns the single sum, or stores the sums of a multi-token kernel
// to its "out" parameter.
func storeSums(sums []VecVirtual) {
	VZEROUPPER()
	if len(sums) == 1 {
		Store(sums[0], ReturnIndex(0))
	} else {
		out := GP64()
		Load(Param("out"), out)
		for t, st := range sums {
			VMOVSS(st, Mem{Base: out, Disp: 4 * t})
		}
	}
	RET()
}

// hsum8 reduces the 8 floats of acc in sum8's order:
// ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)).
func hsum8(r Register) VecVirtual {
	acc := r.(VecVirtual)
	hi := XMM()
	if evex {
		VEXTRACTF32X4(U8(1), acc, hi)
	} else {
		VEXTRACTF128(U8(1), acc, hi)
	}
	s := XMM()
	VADDPS(hi, acc.AsX(), s)
	h := XMM()
	VMOVHLPS(s, s, h)
	VADDPS(h, s, s)
	VMOVSHDUP(s, h)
	VADDSS(h, s, s)
	return s
}

// floatAccs is the number of 8-lane accumulators of the float kernels: enough
// to cover the FMA latency, so that conversion and load throughput bound them.
const floatAccs = 8

// floatLoad loads 8 or 16 (by w's width) weights of kind at m as float32s.
func floatLoad(kind string, m Mem, w VecVirtual) {
	switch kind {
	case "F32":
		VMOVUPS(m, w)
	case "F16":
		VCVTPH2PS(m, w)
	case "BF16":
		VPMOVZXWD(m, w)
		VPSLLD(U8(16), w, w)
	}
}

// dotFloatAVX2 emits the dot product of n (a multiple of 8) weights of kind
// (F32, F16, BF16; size bytes each) at x with float32s at y: element i is
// fused-multiply-added into lane i%8 of accumulator (i/8)%8 over the largest
// multiple of 64 elements, the remaining groups of 8 into accumulator 0; the
// result is hsum8(((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7))).
func dotFloatAVX2(name, kind string, size int) {
	TEXT(name, NOSPLIT, "func(x *byte, y *float32, n int) float32")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s is the dot product of n (a multiple of 8) %s weights at x with float32s at y.", name, kind))
	x, y, n := params3()
	var acc [floatAccs]VecVirtual
	for k := range acc {
		acc[k] = YMM()
		VXORPS(acc[k], acc[k], acc[k])
	}
	Label("loop")
	CMPQ(n, U8(8*floatAccs))
	JL(LabelRef("tail"))
	for k := range acc {
		w := YMM()
		floatLoad(kind, Mem{Base: x, Disp: 8 * k * size}, w)
		VFMADD231PS(Mem{Base: y, Disp: 32 * k}, w, acc[k])
	}
	ADDQ(U32(8*floatAccs*size), x)
	ADDQ(U32(32*floatAccs), y)
	SUBQ(U8(8*floatAccs), n)
	JMP(LabelRef("loop"))
	Label("tail")
	CMPQ(n, U8(8))
	JL(LabelRef("done"))
	w := YMM()
	floatLoad(kind, Mem{Base: x}, w)
	VFMADD231PS(Mem{Base: y}, w, acc[0])
	ADDQ(U32(8*size), x)
	ADDQ(U32(32), y)
	SUBQ(U8(8), n)
	JMP(LabelRef("tail"))
	Label("done")
	for step := 1; step < floatAccs; step *= 2 {
		for k := 0; k < floatAccs; k += 2 * step {
			VADDPS(acc[k+step], acc[k], acc[k])
		}
	}
	s := hsum8(acc[0])
	VZEROUPPER()
	Store(s, ReturnIndex(0))
	RET()
}

// dotFloatAVX512 is dotFloatAVX2 on 512-bit vectors: accumulators 2k and 2k+1
// of dotFloatAVX2 are the halves of zmm k, so it gives dotFloatAVX2's bits.
func dotFloatAVX512(name, kind string, size int) {
	evex = true
	defer func() { evex = false }()
	TEXT(name, NOSPLIT, "func(x *byte, y *float32, n int) float32")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s is %s with AVX-512.", name, strings.Replace(name, "512", "2", 1)))
	x, y, n := params3()
	var z [floatAccs / 2]VecVirtual
	for k := range z {
		z[k] = ZMM()
		VXORPS(z[k].AsY(), z[k].AsY(), z[k].AsY())
	}
	Label("loop")
	CMPQ(n, U8(8*floatAccs))
	JL(LabelRef("tail"))
	for k := range z {
		w := ZMM()
		floatLoad(kind, Mem{Base: x, Disp: 16 * k * size}, w)
		VFMADD231PS(Mem{Base: y, Disp: 64 * k}, w, z[k])
	}
	ADDQ(U32(8*floatAccs*size), x)
	ADDQ(U32(32*floatAccs), y)
	SUBQ(U8(8*floatAccs), n)
	JMP(LabelRef("loop"))
	Label("tail")
	var acc [floatAccs]VecVirtual
	for k := range z {
		acc[2*k+1] = YMM()
		VEXTRACTF64X4(U8(1), z[k], acc[2*k+1])
		acc[2*k] = z[k].AsY().(VecVirtual)
	}
	Label("tail8")
	CMPQ(n, U8(8))
	JL(LabelRef("done"))
	w := YMM()
	floatLoad(kind, Mem{Base: x}, w)
	VFMADD231PS(Mem{Base: y}, w, acc[0])
	ADDQ(U32(8*size), x)
	ADDQ(U32(32), y)
	SUBQ(U8(8), n)
	JMP(LabelRef("tail8"))
	Label("done")
	for step := 1; step < floatAccs; step *= 2 {
		for k := 0; k < floatAccs; k += 2 * step {
			VADDPS(acc[k+step], acc[k], acc[k])
		}
	}
	s := hsum8(acc[0])
	VZEROUPPER()
	Store(s, ReturnIndex(0))
	RET()
}
