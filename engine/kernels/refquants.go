package kernels

import "math"

// The types added after the first seven: Q4_1, Q5_0, Q5_1, IQ4_NL (blocks of 32),
// Q2_K, Q3_K, Q5_K, IQ4_XS, TQ1_0, TQ2_0 (super-blocks of 256). All also have AVX2
// row kernels (simd_amd64.go) that dotRow takes, with this reference's bits. Each
// has a block decoder, a block dot product against its activation format
// (VecDotType) with integer sums and the block's scales applied once, as llama.cpp's
// CPU backend computes it, and a quantizer. The block layouts are those of ggml
// (ggml-common.h's block_* structs).

// refCodec is one such type's block functions (and the lattice types', iquants.go,
// which have no quantizer). Exactly one dot function is set, the one of the type's
// activation format.
type refCodec struct {
	dequant func(y []float32, blk []byte)
	quant   func(blk []byte, x []float32)
	dot0    func(blk []byte, y *q8Block) float32   // Q8_0 activations
	dot1    func(blk []byte, y *q8_1Block) float32 // Q8_1 activations
	dotK    func(blk []byte, y *q8KBlock) float32  // Q8_K activations
}

var refCodecs [TQ2_0 + 1]*refCodec

func init() {
	refCodecs[Q4_1] = &refCodec{dequant: dequantQ4_1, quant: quantQ4_1, dot1: dotQ4_1Block}
	refCodecs[Q5_0] = &refCodec{dequant: dequantQ5_0, quant: quantQ5_0, dot0: dotQ5_0Block}
	refCodecs[Q5_1] = &refCodec{dequant: dequantQ5_1, quant: quantQ5_1, dot1: dotQ5_1Block}
	refCodecs[IQ4_NL] = &refCodec{dequant: dequantIQ4NL, quant: quantIQ4NL, dot0: dotIQ4NLBlock}
	refCodecs[Q2_K] = &refCodec{dequant: dequantQ2K, quant: quantQ2K, dotK: dotQ2KBlock}
	refCodecs[Q3_K] = &refCodec{dequant: dequantQ3K, quant: quantQ3K, dotK: dotQ3KBlock}
	refCodecs[Q5_K] = &refCodec{dequant: dequantQ5K, quant: quantQ5K, dotK: dotQ5KBlock}
	refCodecs[IQ4_XS] = &refCodec{dequant: dequantIQ4XS, quant: quantIQ4XS, dotK: dotIQ4XSBlock}
	refCodecs[TQ1_0] = &refCodec{dequant: dequantTQ1_0, quant: quantTQ1_0, dotK: dotTQ1_0Block}
	refCodecs[TQ2_0] = &refCodec{dequant: dequantTQ2_0, quant: quantTQ2_0, dotK: dotTQ2_0Block}
	refCodecs[IQ2_XXS] = &refCodec{dequant: dequantIQ2XXS, dotK: dotIQ2XXSBlock}
	refCodecs[IQ2_XS] = &refCodec{dequant: dequantIQ2XS, dotK: dotIQ2XSBlock}
	refCodecs[IQ2_S] = &refCodec{dequant: dequantIQ2S, dotK: dotIQ2SBlock}
	refCodecs[IQ3_XXS] = &refCodec{dequant: dequantIQ3XXS, dotK: dotIQ3XXSBlock}
	refCodecs[IQ3_S] = &refCodec{dequant: dequantIQ3S, dotK: dotIQ3SBlock}
	refCodecs[IQ1_S] = &refCodec{dequant: dequantIQ1S} // dotIQ1SRowGeneric: ggml's order is per row
	refCodecs[IQ1_M] = &refCodec{dequant: dequantIQ1M, dotK: dotIQ1MBlock}
}

// CanQuantize reports whether QuantizeRow can write type t (every supported type
// but the lattice types).
func CanQuantize(t Type) bool {
	if c := refCodecOf(t); c != nil {
		return c.quant != nil
	}
	return Supported(t)
}

// refCodecOf returns t's reference codec, or nil when t has its own code paths.
func refCodecOf(t Type) *refCodec {
	if int(t) < len(refCodecs) {
		return refCodecs[t]
	}
	return nil
}

// HasSIMD reports whether MatMul has assembly for weights of type t on this build and
// CPU; the other supported types run on the pure-Go reference (correct, slower).
func HasSIMD(t Type) bool {
	switch t {
	case F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, Q5_0, IQ4_NL, IQ4_XS, Q4_1, Q5_1, Q2_K, Q3_K, TQ1_0, TQ2_0,
		IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M:
		return simdAvailable()
	}
	return false
}

// dotRefRow is the dot product of a row of a reference-only type with activation
// row t: block by block, summed in order.
//
//go:norace
func dotRefRow(c *refCodec, bb int, row []byte, a *acts, t int) float32 {
	var sum float32
	switch {
	case c.dot0 != nil:
		nb := a.cols / qk0
		for b := range a.q8[t*nb : (t+1)*nb] {
			sum += c.dot0(row[b*bb:(b+1)*bb], &a.q8[t*nb+b])
		}
	case c.dot1 != nil:
		nb := a.cols / qk0
		for b := range a.q81[t*nb : (t+1)*nb] {
			sum += c.dot1(row[b*bb:(b+1)*bb], &a.q81[t*nb+b])
		}
	default:
		nb := a.cols / qkK
		for b := range a.q8k[t*nb : (t+1)*nb] {
			sum += c.dotK(row[b*bb:(b+1)*bb], &a.q8k[t*nb+b])
		}
	}
	return sum
}

// q8_1Block is a Q8_1 activation block: d and s = d·Σqs, both f16-representable as
// the block stores them.
type q8_1Block struct {
	d, s float32
	qs   [qk0]int8
}

// quantActQ8_1 is ggml's Q8_1 quantizer as its x86 code runs it: d = max|x|/127
// (stored as f16), q = round-to-nearest-even(x·127/max|x|), s = f16(d·Σq) with the
// unrounded d.
func quantActQ8_1(b *q8_1Block, x []float32) {
	var amax float32
	for _, v := range x {
		amax = max(amax, abs32(v))
	}
	d := amax / 127
	var id float32
	if amax != 0 {
		id = 127 / amax
	}
	var sum int32
	for j, v := range x {
		b.qs[j] = int8(nearestInt(v * id))
		sum += int32(b.qs[j])
	}
	b.d = RoundF16(d)
	b.s = RoundF16(d * float32(sum))
}

func quantRowsQ8_1(y []q8_1Block, x []float32) {
	for i := range y {
		quantActQ8_1(&y[i], x[i*qk0:(i+1)*qk0])
	}
}

// ---- Q4_1: d f16, m f16, qs [16]byte (element j low nibble of qs[j], j+16 high).

func dequantQ4_1(y []float32, blk []byte) {
	d, m := f16Table[le16(blk)], f16Table[le16(blk[2:])]
	qs := blk[4:20]
	for j, q := range qs {
		y[j] = float32(q&0xf)*d + m
		y[j+16] = float32(q>>4)*d + m
	}
}

func dotQ4_1Block(blk []byte, y *q8_1Block) float32 {
	qs := blk[4:20]
	var isum int32
	for j, q := range qs {
		isum += int32(q&0xf)*int32(y.qs[j]) + int32(q>>4)*int32(y.qs[j+16])
	}
	return float32(f16Table[le16(blk)]*y.d*float32(isum)) + float32(f16Table[le16(blk[2:])]*y.s) // (no fused multiply-add)
}

// quantQ4_1 is quantize_row_q4_1_ref: d = (max-min)/15, m = min,
// q = min(15, trunc((x-min)/d + 0.5)).
func quantQ4_1(blk []byte, x []float32) {
	mn, mx := x[0], x[0]
	for _, v := range x {
		mn, mx = min(mn, v), max(mx, v)
	}
	d := (mx - mn) / 15
	var id float32
	if d != 0 {
		id = 1 / d
	}
	put16(blk, F32ToF16(d))
	put16(blk[2:], F32ToF16(mn))
	for j := 0; j < 16; j++ {
		x0 := min(15, uint8(clampByte((x[j]-mn)*id+0.5)))
		x1 := min(15, uint8(clampByte((x[j+16]-mn)*id+0.5)))
		blk[4+j] = x0 | x1<<4
	}
}

// clampByte truncates f to an integer in [0, 255] (NaN: 0).
func clampByte(f float32) int {
	if !(f > 0) {
		return 0
	}
	return int(min(f, 255))
}

// ---- Q5_0: d f16, qh uint32 (bit j: the fifth bit of element j), qs [16]byte.

func q5Quants(blk []byte) (qh uint32, qs []byte) {
	return uint32(blk[0]) | uint32(blk[1])<<8 | uint32(blk[2])<<16 | uint32(blk[3])<<24, blk[4:20]
}

func dequantQ5_0(y []float32, blk []byte) {
	d := f16Table[le16(blk)]
	qh, qs := q5Quants(blk[2:])
	for j, q := range qs {
		y[j] = d * float32(int32(q&0xf|byte(qh>>j&1)<<4)-16)
		y[j+16] = d * float32(int32(q>>4|byte(qh>>(j+16)&1)<<4)-16)
	}
}

func dotQ5_0Block(blk []byte, y *q8Block) float32 {
	qh, qs := q5Quants(blk[2:])
	var isum int32
	for j, q := range qs {
		isum += (int32(q&0xf|byte(qh>>j&1)<<4) - 16) * int32(y.qs[j])
		isum += (int32(q>>4|byte(qh>>(j+16)&1)<<4) - 16) * int32(y.qs[j+16])
	}
	return f16Table[le16(blk)] * y.d * float32(isum)
}

// quantQ5_0 is quantize_row_q5_0_ref: d = (the signed value of largest
// magnitude)/-16, q = min(31, trunc(x/d + 16.5)).
func quantQ5_0(blk []byte, x []float32) {
	var amax, mx float32
	for _, v := range x {
		if a := abs32(v); a > amax {
			amax, mx = a, v
		}
	}
	d := mx / -16
	var id float32
	if d != 0 {
		id = 1 / d
	}
	put16(blk, F32ToF16(d))
	var qh uint32
	for j := 0; j < 16; j++ {
		x0 := min(31, clampByte(x[j]*id+16.5))
		x1 := min(31, clampByte(x[j+16]*id+16.5))
		blk[6+j] = byte(x0&0xf | (x1&0xf)<<4)
		qh |= uint32(x0>>4) << j
		qh |= uint32(x1>>4) << (j + 16)
	}
	blk[2], blk[3], blk[4], blk[5] = byte(qh), byte(qh>>8), byte(qh>>16), byte(qh>>24)
}

// ---- Q5_1: d f16, m f16, qh uint32, qs [16]byte.

func dequantQ5_1(y []float32, blk []byte) {
	d, m := f16Table[le16(blk)], f16Table[le16(blk[2:])]
	qh, qs := q5Quants(blk[4:])
	for j, q := range qs {
		y[j] = d*float32(q&0xf|byte(qh>>j&1)<<4) + m
		y[j+16] = d*float32(q>>4|byte(qh>>(j+16)&1)<<4) + m
	}
}

func dotQ5_1Block(blk []byte, y *q8_1Block) float32 {
	qh, qs := q5Quants(blk[4:])
	var isum int32
	for j, q := range qs {
		isum += int32(q&0xf|byte(qh>>j&1)<<4) * int32(y.qs[j])
		isum += int32(q>>4|byte(qh>>(j+16)&1)<<4) * int32(y.qs[j+16])
	}
	return float32(f16Table[le16(blk)]*y.d*float32(isum)) + float32(f16Table[le16(blk[2:])]*y.s) // (no fused multiply-add)
}

// quantQ5_1 is quantize_row_q5_1_ref: d = (max-min)/31, m = min,
// q = trunc((x-min)/d + 0.5).
func quantQ5_1(blk []byte, x []float32) {
	mn, mx := x[0], x[0]
	for _, v := range x {
		mn, mx = min(mn, v), max(mx, v)
	}
	d := (mx - mn) / 31
	var id float32
	if d != 0 {
		id = 1 / d
	}
	put16(blk, F32ToF16(d))
	put16(blk[2:], F32ToF16(mn))
	var qh uint32
	for j := 0; j < 16; j++ {
		x0 := min(31, clampByte((x[j]-mn)*id+0.5))
		x1 := min(31, clampByte((x[j+16]-mn)*id+0.5))
		blk[8+j] = byte(x0&0xf | (x1&0xf)<<4)
		qh |= uint32(x0>>4) << j
		qh |= uint32(x1>>4) << (j + 16)
	}
	blk[4], blk[5], blk[6], blk[7] = byte(qh), byte(qh>>8), byte(qh>>16), byte(qh>>24)
}

// ---- IQ4_NL: d f16, qs [16]byte of indices into kvaluesIQ4NL (non-linear 4-bit).

// kvaluesIQ4NL is ggml's kvalues_iq4nl, the 16 levels of IQ4_NL and IQ4_XS.
var kvaluesIQ4NL = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

func dequantIQ4NL(y []float32, blk []byte) {
	d := f16Table[le16(blk)]
	for j, q := range blk[2:18] {
		y[j] = d * float32(kvaluesIQ4NL[q&0xf])
		y[j+16] = d * float32(kvaluesIQ4NL[q>>4])
	}
}

func dotIQ4NLBlock(blk []byte, y *q8Block) float32 {
	var isum int32
	for j, q := range blk[2:18] {
		isum += int32(kvaluesIQ4NL[q&0xf])*int32(y.qs[j]) + int32(kvaluesIQ4NL[q>>4])*int32(y.qs[j+16])
	}
	return f16Table[le16(blk)] * y.d * float32(isum)
}

// bestIndexIQ4 returns the index of the level of kvaluesIQ4NL nearest to x
// (ggml's best_index_int8).
func bestIndexIQ4(x float32) uint8 {
	v := &kvaluesIQ4NL
	if x <= float32(v[0]) {
		return 0
	}
	if x >= float32(v[15]) {
		return 15
	}
	lo, hi := 0, 15
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if x < float32(v[mid]) {
			hi = mid
		} else {
			lo = mid
		}
	}
	if x-float32(v[lo]) < float32(v[hi])-x {
		return uint8(lo)
	}
	return uint8(hi)
}

// iq4Scale is quantize_row_iq4_nl_impl's search for one block of 32 without an
// importance matrix: weights x², a first scale from the value of largest magnitude,
// refitted by least squares, then 2·7+1 trial inverse scales around it. It returns
// the scale (0 for a block of zeros).
func iq4Scale(x []float32) float32 {
	var amax, mx float32
	for _, v := range x {
		if a := abs32(v); a > amax {
			amax, mx = a, v
		}
	}
	if amax < 1e-15 {
		return 0
	}
	fit := func(id float32) (sumqx, sumq2 float32) {
		for _, v := range x {
			q := float32(kvaluesIQ4NL[bestIndexIQ4(id*v)])
			w := v * v
			sumqx += w * q * v
			sumq2 += w * q * q
		}
		return
	}
	d := -mx / float32(kvaluesIQ4NL[0])
	sumqx, sumq2 := fit(1 / d)
	if sumq2 > 0 {
		d = sumqx / sumq2
	}
	best := d * sumqx
	for itry := -7; itry <= 7; itry++ {
		sumqx, sumq2 = fit((float32(itry) + float32(kvaluesIQ4NL[0])) / mx)
		if sumq2 > 0 && sumqx*sumqx > best*sumq2 {
			d = sumqx / sumq2
			best = d * sumqx
		}
	}
	return d
}

func quantIQ4NL(blk []byte, x []float32) {
	d := iq4Scale(x)
	put16(blk, F32ToF16(d))
	var id float32
	if d != 0 {
		id = 1 / d
	}
	for j := 0; j < 16; j++ {
		blk[2+j] = bestIndexIQ4(id*x[j]) | bestIndexIQ4(id*x[j+16])<<4
	}
}

// ---- Q2_K: scales [16]byte (low nibble scale, high nibble min of 16 elements),
// qs [64]byte, d f16, dmin f16. Element 128n+32k+l has its 2 bits in qs[32n+l] at
// bit 2k.

func q2KValue(qs []byte, e int) int32 {
	n, r := e/128, e%128
	return int32(qs[32*n+r%32]>>(2*(r/32))) & 3
}

func dequantQ2K(y []float32, blk []byte) {
	sc, qs := blk[0:16], blk[16:80]
	d, dmin := f16Table[le16(blk[80:])], f16Table[le16(blk[82:])]
	for e := range y[:qkK] {
		s := sc[e/16]
		y[e] = d*float32(s&0xf)*float32(q2KValue(qs, e)) - dmin*float32(s>>4)
	}
}

func dotQ2KBlock(blk []byte, y *q8KBlock) float32 {
	sc, qs := blk[0:16], blk[16:80]
	var summs, isum int32
	for j, s := range sc {
		summs += int32(s>>4) * int32(y.bsums[j])
	}
	for n := 0; n < 2; n++ {
		q := qs[32*n : 32*n+32]
		for k := 0; k < 4; k++ {
			for h := 0; h < 2; h++ { // 16 elements per scale
				base := 128*n + 32*k + 16*h
				var s int32
				for l := 16 * h; l < 16*h+16; l++ {
					s += int32(q[l]>>(2*k)&3) * int32(y.qs[base+l-16*h])
				}
				isum += int32(sc[base/16]&0xf) * s
			}
		}
	}
	dall := y.d * f16Table[le16(blk[80:])]
	dmin := y.d * f16Table[le16(blk[82:])]
	return float32(dall*float32(isum)) - float32(dmin*float32(summs)) // (no fused multiply-add)
}

// quantQ2K follows quantize_row_q2_K_ref: a scale and a min per 16 elements from
// make_qkx2_quants (nmax 3, weights |x|), both quantized to 4 bits against d and
// dmin, then the quants recomputed against the quantized scales. Differences: the
// scale search minimises the squared error (ggml: the absolute error) over 6
// candidates (ggml: 16).
func quantQ2K(blk []byte, x []float32) {
	var L [qkK]uint8
	var laux [16]uint8
	var w [16]float32
	var scales, mins [16]float32
	var maxScale, maxMin float32
	for j := 0; j < 16; j++ {
		xs := x[16*j : 16*j+16]
		for l, v := range xs {
			w[l] = abs32(v)
		}
		scales[j], mins[j] = makeQKX2(3, xs, w[:], L[16*j:16*j+16], laux[:], -0.5, 0.3, 5)
		maxScale = max(maxScale, scales[j])
		maxMin = max(maxMin, mins[j])
	}
	sc := blk[0:16]
	clear(sc)
	if maxScale > 0 {
		iscale := 15 / maxScale
		for j := range sc {
			sc[j] = uint8(min(15, nearestInt(iscale*scales[j])))
		}
		put16(blk[80:], F32ToF16(maxScale/15))
	} else {
		put16(blk[80:], 0)
	}
	if maxMin > 0 {
		iscale := 15 / maxMin
		for j := range sc {
			sc[j] |= uint8(min(15, nearestInt(iscale*mins[j]))) << 4
		}
		put16(blk[82:], F32ToF16(maxMin/15))
	} else {
		put16(blk[82:], 0)
	}
	d, dmin := f16Table[le16(blk[80:])], f16Table[le16(blk[82:])]
	for j := 0; j < 16; j++ {
		dd := d * float32(sc[j]&0xf)
		if dd == 0 {
			continue
		}
		dm := dmin * float32(sc[j]>>4)
		for ii := 0; ii < 16; ii++ {
			L[16*j+ii] = uint8(max(0, min(3, nearestInt((x[16*j+ii]+dm)/dd))))
		}
	}
	qs := blk[16:80]
	for n := 0; n < 2; n++ {
		for l := 0; l < 32; l++ {
			e := L[128*n:]
			qs[32*n+l] = e[l] | e[l+32]<<2 | e[l+64]<<4 | e[l+96]<<6
		}
	}
}

// ---- Q3_K: hmask [32]byte, qs [64]byte, scales [12]byte, d f16. The low 2 bits
// of element e are placed as Q2_K's; its third bit is bit e/32 of hmask[e%32], and
// a clear bit subtracts 4 (quants -4..3). Scale j (6 bits, offset 32) keeps its low
// 4 bits in the low (j < 8) or high nibble of scales[j%8] and its top 2 bits in
// scales[8+j%4] at bit 2·(j/4).

func q3KScale(sc []byte, j int) int32 {
	lo := sc[j%8] & 0xf
	if j >= 8 {
		lo = sc[j%8] >> 4
	}
	return int32(lo|(sc[8+j%4]>>(2*(j/4))&3)<<4) - 32
}

func q3KValue(hm, qs []byte, e int) int32 {
	v := q2KValue(qs, e)
	if hm[e%32]>>(e/32)&1 == 0 {
		v -= 4
	}
	return v
}

func dequantQ3K(y []float32, blk []byte) {
	hm, qs, sc := blk[0:32], blk[32:96], blk[96:108]
	d := f16Table[le16(blk[108:])]
	for e := range y[:qkK] {
		y[e] = d * float32(q3KScale(sc, e/16)) * float32(q3KValue(hm, qs, e))
	}
}

func dotQ3KBlock(blk []byte, y *q8KBlock) float32 {
	hm, qs, sc := blk[0:32], blk[32:96], blk[96:108]
	var isum int32
	for j := 0; j < 16; j++ {
		var s int32
		for e := 16 * j; e < 16*j+16; e++ {
			s += q3KValue(hm, qs, e) * int32(y.qs[e])
		}
		isum += q3KScale(sc, j) * s
	}
	return f16Table[le16(blk[108:])] * y.d * float32(isum)
}

// quantQ3K follows quantize_row_q3_K_ref: a signed scale per 16 elements from
// make_q3_quants (here makeQX with nmax 4, as Q6_K's), the scales quantized to 6
// bits against d, and the quants (-4..3) recomputed against the quantized scales.
func quantQ3K(blk []byte, x []float32) {
	var L [qkK]uint8
	var scales [16]float32
	var maxScale, amax float32
	for j := 0; j < 16; j++ {
		scales[j] = makeQX(4, x[16*j:16*j+16], L[16*j:16*j+16])
		if a := abs32(scales[j]); a > amax {
			amax, maxScale = a, scales[j]
		}
	}
	hm, qs, sc := blk[0:32], blk[32:96], blk[96:108]
	clear(sc)
	if maxScale != 0 {
		iscale := -32 / maxScale
		for j := 0; j < 16; j++ {
			l := uint8(max(-32, min(31, nearestInt(iscale*scales[j]))) + 32)
			if j < 8 {
				sc[j] = l & 0xf
			} else {
				sc[j-8] |= (l & 0xf) << 4
			}
			sc[8+j%4] |= (l >> 4) << (2 * (j / 4))
		}
		put16(blk[108:], F32ToF16(1/iscale))
	} else {
		put16(blk[108:], 0)
	}
	d := f16Table[le16(blk[108:])]
	for j := 0; j < 16; j++ {
		dd := d * float32(q3KScale(sc, j))
		if dd == 0 {
			continue
		}
		for ii := 0; ii < 16; ii++ {
			L[16*j+ii] = uint8(max(-4, min(3, nearestInt(x[16*j+ii]/dd))) + 4)
		}
	}
	clear(hm)
	for e := range L {
		if L[e] > 3 {
			hm[e%32] |= 1 << (e / 32)
			L[e] -= 4
		}
	}
	for n := 0; n < 2; n++ {
		for l := 0; l < 32; l++ {
			e := L[128*n:]
			qs[32*n+l] = e[l] | e[l+32]<<2 | e[l+64]<<4 | e[l+96]<<6
		}
	}
}

// ---- Q5_K: d f16, dmin f16, scales [12]byte (as Q4_K's), qh [32]byte, qs
// [128]byte. Quants as Q4_K's plus a fifth bit: element 32k+l has it in qh[l] at
// bit k.

func q5KValue(qh, qs []byte, e int) int32 {
	j, r := e/64, e%64
	q := qs[32*j+r%32]
	if r >= 32 {
		q >>= 4
	}
	return int32(q&0xf) | int32(qh[e%32]>>(e/32)&1)<<4
}

func dequantQ5K(y []float32, blk []byte) {
	d, dmin := f16Table[le16(blk)], f16Table[le16(blk[2:])]
	sc, qh, qs := blk[4:16], blk[16:48], blk[48:176]
	for j := 0; j < 8; j++ {
		s, m := scaleMinK4(j, sc)
		d1, m1 := d*float32(s), dmin*float32(m)
		for e := 32 * j; e < 32*j+32; e++ {
			y[e] = d1*float32(q5KValue(qh, qs, e)) - m1
		}
	}
}

func dotQ5KBlock(blk []byte, y *q8KBlock) float32 {
	sc, qh, qs := blk[4:16], blk[16:48], blk[48:176]
	var isum, msum int32
	for j := 0; j < 8; j++ {
		s, m := scaleMinK4(j, sc)
		var a int32
		for e := 32 * j; e < 32*j+32; e++ {
			a += q5KValue(qh, qs, e) * int32(y.qs[e])
		}
		isum += int32(s) * a
		msum += int32(m) * (int32(y.bsums[2*j]) + int32(y.bsums[2*j+1]))
	}
	d := f16Table[le16(blk)] * y.d
	dmin := f16Table[le16(blk[2:])] * y.d
	return float32(d*float32(isum)) - float32(dmin*float32(msum))
}

// quantQ5K follows quantize_row_q5_K_ref as quantQ4K follows Q4_K's (quants 0..31;
// 6 scale candidates, ggml: 16).
func quantQ5K(blk []byte, x []float32) {
	all := quantScaleMinK(blk[0:4], blk[4:16], x, 31, -0.5, 0.3, 5)
	qh, qs := blk[16:48], blk[48:176]
	clear(qh)
	for e, q := range all {
		qh[e%32] |= (q >> 4) << (e / 32)
	}
	for j := 0; j < 4; j++ {
		for l := 0; l < 32; l++ {
			qs[32*j+l] = all[64*j+l]&0xf | (all[64*j+32+l]&0xf)<<4
		}
	}
}

// ---- IQ4_XS: d f16, scalesH uint16, scalesL [4]byte, qs [128]byte. Block ib of
// 32 has the 6-bit scale (offset 32) with low bits in the nibble ib%2 of
// scalesL[ib/2] and high bits at bit 2·ib of scalesH; its 16 bytes of qs index
// kvaluesIQ4NL as IQ4_NL's do.

func iq4XSScale(blk []byte, ib int) int32 {
	h := le16(blk[2:])
	return int32(blk[4+ib/2]>>(4*(ib%2))&0xf|byte(h>>(2*ib)&3)<<4) - 32
}

func dequantIQ4XS(y []float32, blk []byte) {
	d := f16Table[le16(blk)]
	for ib := 0; ib < 8; ib++ {
		dl := d * float32(iq4XSScale(blk, ib))
		for j, q := range blk[8+16*ib : 8+16*ib+16] {
			y[32*ib+j] = dl * float32(kvaluesIQ4NL[q&0xf])
			y[32*ib+16+j] = dl * float32(kvaluesIQ4NL[q>>4])
		}
	}
}

func dotIQ4XSBlock(blk []byte, y *q8KBlock) float32 {
	var isum int32
	for ib := 0; ib < 8; ib++ {
		var s int32
		for j, q := range blk[8+16*ib : 8+16*ib+16] {
			s += int32(kvaluesIQ4NL[q&0xf])*int32(y.qs[32*ib+j]) + int32(kvaluesIQ4NL[q>>4])*int32(y.qs[32*ib+16+j])
		}
		isum += iq4XSScale(blk, ib) * s
	}
	return f16Table[le16(blk)] * y.d * float32(isum)
}

// quantIQ4XS follows quantize_row_iq4_xs_impl without an importance matrix: a scale
// per 32 as IQ4_NL's, the scales quantized to 6 bits against d = -max/32, and the
// indices recomputed against the quantized scales.
func quantIQ4XS(blk []byte, x []float32) {
	var scales [8]float32
	var amax, maxScale float32
	for ib := range scales {
		scales[ib] = iq4Scale(x[32*ib : 32*ib+32])
		if a := abs32(scales[ib]); a > amax {
			amax, maxScale = a, scales[ib]
		}
	}
	clear(blk[:8])
	if amax == 0 {
		clear(blk)
		return
	}
	d := -maxScale / 32
	id := 1 / d
	put16(blk, F32ToF16(d))
	var h uint16
	for ib, s := range scales {
		l := max(-32, min(31, nearestInt(id*s)))
		dl := d * float32(l)
		var idl float32
		if dl != 0 {
			idl = 1 / dl
		}
		xs := x[32*ib : 32*ib+32]
		for j := 0; j < 16; j++ {
			blk[8+16*ib+j] = bestIndexIQ4(idl*xs[j]) | bestIndexIQ4(idl*xs[j+16])<<4
		}
		l += 32
		blk[4+ib/2] |= byte(l&0xf) << (4 * (ib % 2))
		h |= uint16(l>>4) << (2 * ib)
	}
	put16(blk[2:], h)
}

// ---- TQ1_0: qs [48]byte, qh [4]byte, d f16: ternary weights {-1, 0, 1}·d packed
// five trits a byte (four in qh), the byte holding ⌈v·256/243⌉ for the base-3
// number v of its trits, first trit most significant. Trit n of byte q is the top
// bits of 3·(q·3ⁿ mod 256).

var pow3 = [6]uint8{1, 3, 9, 27, 81, 243}

func trit(q uint8, n int) int32 { return int32((uint16(q*pow3[n]) * 3) >> 8) }

// tq1Value returns the trit (0..2) of element e: elements 0..159 are trit e/32 of
// qs[e%32], 160..239 trit (e-160)/16 of qs[32+(e-160)%16], 240..255 trit (e-240)/4
// of qh[(e-240)%4].
func tq1Value(blk []byte, e int) int32 {
	switch {
	case e < 160:
		return trit(blk[e%32], e/32)
	case e < 240:
		return trit(blk[32+(e-160)%16], (e-160)/16)
	}
	return trit(blk[48+(e-240)%4], (e-240)/4)
}

func dequantTQ1_0(y []float32, blk []byte) {
	d := f16Table[le16(blk[52:])]
	for e := range y[:qkK] {
		y[e] = float32(tq1Value(blk, e)-1) * d
	}
}

func dotTQ1_0Block(blk []byte, y *q8KBlock) float32 {
	var isum int32
	for e := 0; e < qkK; e++ {
		isum += tq1Value(blk, e) * int32(y.qs[e])
	}
	for _, s := range y.bsums {
		isum -= int32(s)
	}
	return float32(isum) * (f16Table[le16(blk[52:])] * y.d)
}

// ternary returns the trits (0..2) of x against d = max|x|: round(x/d)+1, rounding
// half away from zero as ggml's lroundf.
func ternary(x []float32) (t [qkK]uint8, d float32) {
	for _, v := range x {
		d = max(d, abs32(v))
	}
	var id float32
	if d != 0 {
		id = 1 / d
	}
	for i, v := range x {
		t[i] = uint8(max(-1, min(1, int(math.Round(float64(v*id))))) + 1)
	}
	return t, d
}

// packTrits returns the byte of trits t (first most significant, padded to five).
func packTrits(t ...uint8) byte {
	var q uint16
	for i := 0; i < 5; i++ {
		q *= 3
		if i < len(t) {
			q += uint16(t[i])
		}
	}
	return byte((q*256 + 242) / 243)
}

// quantTQ1_0 is quantize_row_tq1_0_ref.
func quantTQ1_0(blk []byte, x []float32) {
	t, d := ternary(x)
	for m := 0; m < 32; m++ {
		blk[m] = packTrits(t[m], t[m+32], t[m+64], t[m+96], t[m+128])
	}
	for m := 0; m < 16; m++ {
		blk[32+m] = packTrits(t[160+m], t[176+m], t[192+m], t[208+m], t[224+m])
	}
	for j := 0; j < 4; j++ {
		blk[48+j] = packTrits(t[240+j], t[244+j], t[248+j], t[252+j])
	}
	put16(blk[52:], F32ToF16(d))
}

// ---- TQ2_0: qs [64]byte, d f16: element 128n+32k+l is (qs[32n+l]>>2k & 3) - 1,
// times d (Q2_K's placement).

func dequantTQ2_0(y []float32, blk []byte) {
	d := f16Table[le16(blk[64:])]
	for e := range y[:qkK] {
		y[e] = float32(q2KValue(blk, e)-1) * d
	}
}

func dotTQ2_0Block(blk []byte, y *q8KBlock) float32 {
	var isum int32
	for e := 0; e < qkK; e++ {
		isum += q2KValue(blk, e) * int32(y.qs[e])
	}
	for _, s := range y.bsums {
		isum -= int32(s)
	}
	return float32(isum) * (f16Table[le16(blk[64:])] * y.d)
}

// quantTQ2_0 is quantize_row_tq2_0_ref.
func quantTQ2_0(blk []byte, x []float32) {
	t, d := ternary(x)
	for n := 0; n < 2; n++ {
		for l := 0; l < 32; l++ {
			e := t[128*n:]
			blk[32*n+l] = e[l] | e[l+32]<<2 | e[l+64]<<4 | e[l+96]<<6
		}
	}
	put16(blk[64:], F32ToF16(d))
}
