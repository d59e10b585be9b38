package kernels

import (
	"fmt"
	"math"
)

// QuantizeRow encodes src (one row; its length a multiple of t's block size) as type
// t into dst (exactly t.RowBytes(len(src)) bytes); t must be one CanQuantize accepts
// (not a lattice type). The quantizers follow ggml's reference quantizers
// (quantize_row_*_ref, quantize_iq4_*_impl without an importance matrix), with
// shorter scale searches where noted (Q4_K, Q5_K, Q2_K, Q6_K, Q3_K), so files
// written with them are close to what llama.cpp would write without an importance
// matrix; they are deterministic.
func QuantizeRow(dst []byte, t Type, src []float32) {
	n := len(src)
	if want := t.RowBytes(n); len(dst) != want {
		panic(fmt.Sprintf("kernels: QuantizeRow %v: %d bytes for %d elements, want %d", t, len(dst), n, want))
	}
	switch t {
	case F32:
		for i, v := range src {
			u := math.Float32bits(v)
			dst[4*i], dst[4*i+1], dst[4*i+2], dst[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
		}
	case F16:
		for i, v := range src {
			put16(dst[2*i:], F32ToF16(v))
		}
	case BF16:
		for i, v := range src {
			put16(dst[2*i:], F32ToBF16(v))
		}
	case Q8_0:
		for b := 0; b < n/qk0; b++ {
			quantQ8_0(dst[b*34:(b+1)*34], src[b*qk0:(b+1)*qk0])
		}
	case Q4_0:
		for b := 0; b < n/qk0; b++ {
			quantQ4_0(dst[b*18:(b+1)*18], src[b*qk0:(b+1)*qk0])
		}
	case Q4_K:
		for b := 0; b < n/qkK; b++ {
			quantQ4K(dst[b*144:(b+1)*144], src[b*qkK:(b+1)*qkK])
		}
	case Q6_K:
		for b := 0; b < n/qkK; b++ {
			quantQ6K(dst[b*210:(b+1)*210], src[b*qkK:(b+1)*qkK])
		}
	default:
		c := refCodecOf(t)
		if c == nil || c.quant == nil || !Supported(t) {
			panic("kernels: QuantizeRow to " + t.String())
		}
		bs, bb := t.BlockSize(), t.BlockBytes()
		for b := 0; b < n/bs; b++ {
			c.quant(dst[b*bb:(b+1)*bb], src[b*bs:(b+1)*bs])
		}
	}
}

// quantQ8_0 is ggml's Q8_0 quantizer as its x86 code runs it (also for activations):
// d = max|x|/127 stored as f16, q = round-to-nearest-even(x·127/max|x|).
func quantQ8_0(blk []byte, x []float32) {
	var amax float32
	for _, v := range x {
		amax = max(amax, abs32(v))
	}
	put16(blk, F32ToF16(amax/127))
	var id float32
	if amax != 0 {
		id = 127 / amax
	}
	for j, v := range x {
		blk[2+j] = byte(int8(nearestInt(v * id)))
	}
}

// quantQ4_0: d = (the signed value of largest magnitude)/-8, q = min(15, trunc(x/d+8.5)).
func quantQ4_0(blk []byte, x []float32) {
	var amax, mx float32
	for _, v := range x {
		if a := abs32(v); a > amax {
			amax, mx = a, v
		}
	}
	d := mx / -8
	var id float32
	if d != 0 {
		id = 1 / d
	}
	put16(blk, F32ToF16(d))
	for j := 0; j < qk0/2; j++ {
		x0 := min(15, int8(x[j]*id+8.5))
		x1 := min(15, int8(x[j+16]*id+8.5))
		blk[2+j] = byte(x0) | byte(x1)<<4
	}
}

// quantQ4K follows quantize_row_q4_K_ref: each 32-element sub-block gets a scale and
// a min from make_qkx2_quants (weighted by av|x| + |x|), the 8 scales and mins are
// quantized to 6 bits against the block's d and dmin, and the quants are recomputed
// against the quantized scales. The scale search tries 5 candidates (ggml: 21), which
// costs little accuracy and makes generating a 1B-parameter model several times
// faster.
func quantQ4K(blk []byte, x []float32) {
	all := quantScaleMinK(blk[0:4], blk[4:16], x, 15, -1, 0.5, 4)
	qs := blk[16:144]
	for j := 0; j < 4; j++ {
		for l := 0; l < 32; l++ {
			qs[32*j+l] = all[64*j+l] | all[64*j+32+l]<<4
		}
	}
}

// quantScaleMinK is the part Q4_K and Q5_K share: the 8 sub-block scales and mins
// (makeQKX2 with nmax and the search's rmin, rdelta and nstep), quantized to 6 bits
// into sc (12 bytes) against d and dmin (written as f16 to dd[0:2], dd[2:4]), and
// the quants (0..nmax) recomputed against the quantized scales.
func quantScaleMinK(dd, sc []byte, x []float32, nmax int, rmin, rdelta float32, nstep int) (all [qkK]uint8) {
	var L, laux [32]uint8
	var w [32]float32
	var scales, mins [8]float32
	var maxScale, maxMin float32
	for j := 0; j < 8; j++ {
		xs := x[32*j : 32*j+32]
		var sum2 float32
		for _, v := range xs {
			sum2 += v * v
		}
		av := float32(math.Sqrt(float64(sum2 / 32)))
		for l, v := range xs {
			w[l] = av + abs32(v)
		}
		scales[j], mins[j] = makeQKX2(nmax, xs, w[:], L[:], laux[:], rmin, rdelta, nstep)
		maxScale = max(maxScale, scales[j])
		maxMin = max(maxMin, mins[j])
	}
	var invScale, invMin float32
	if maxScale > 0 {
		invScale = 63 / maxScale
	}
	if maxMin > 0 {
		invMin = 63 / maxMin
	}
	clear(sc)
	for j := 0; j < 8; j++ {
		ls := uint8(min(63, nearestInt(invScale*scales[j])))
		lm := uint8(min(63, nearestInt(invMin*mins[j])))
		if j < 4 {
			sc[j], sc[j+4] = ls, lm
		} else {
			sc[j+4] = ls&0xf | lm<<4
			sc[j-4] |= (ls >> 4) << 6
			sc[j] |= (lm >> 4) << 6
		}
	}
	put16(dd, F32ToF16(maxScale/63))
	put16(dd[2:], F32ToF16(maxMin/63))
	d, dmin := f16Table[le16(dd)], f16Table[le16(dd[2:])]
	for j := 0; j < 8; j++ {
		s, m := scaleMinK4(j, sc)
		dq := d * float32(s)
		if dq == 0 {
			continue
		}
		dm := dmin * float32(m)
		for ii := 0; ii < 32; ii++ {
			l := nearestInt((x[32*j+ii] + dm) / dq)
			all[32*j+ii] = uint8(max(0, min(nmax, l)))
		}
	}
	return all
}

// makeQKX2 is ggml's make_qkx2_quants (use_mad false): the scale and (positive) min
// that minimise the weighted squared error of x ≈ scale·L - min with L in [0, nmax],
// searching nstep+1 candidate inverse scales around nmax/(max-min).
func makeQKX2(nmax int, x, w []float32, L, laux []uint8, rmin, rdelta float32, nstep int) (scale, theMin float32) {
	mn, mx := x[0], x[0]
	sumW, sumX := w[0], w[0]*x[0]
	for i := 1; i < len(x); i++ {
		mn, mx = min(mn, x[i]), max(mx, x[i])
		sumW += w[i]
		sumX += w[i] * x[i]
	}
	if mn > 0 {
		mn = 0
	}
	if mx == mn {
		clear(L)
		return 0, -mn
	}
	iscale := float32(nmax) / (mx - mn)
	scale = 1 / iscale
	var bestMad float32
	for i, v := range x {
		l := max(0, min(nmax, nearestInt(iscale*(v-mn))))
		L[i] = uint8(l)
		diff := scale*float32(l) + mn - v
		bestMad += w[i] * diff * diff
	}
	for is := 0; is <= nstep; is++ {
		iscale = (rmin + rdelta*float32(is) + float32(nmax)) / (mx - mn)
		var sumL, sumL2, sumXL float32
		for i, v := range x {
			l := max(0, min(nmax, nearestInt(iscale*(v-mn))))
			laux[i] = uint8(l)
			fl := float32(l)
			sumL += w[i] * fl
			sumL2 += w[i] * fl * fl
			sumXL += w[i] * fl * v
		}
		D := sumW*sumL2 - sumL*sumL
		if D <= 0 {
			continue
		}
		thisScale := (sumW*sumXL - sumX*sumL) / D
		thisMin := (sumL2*sumX - sumL*sumXL) / D
		if thisMin > 0 {
			thisMin = 0
			thisScale = sumXL / sumL2
		}
		var mad float32
		for i, v := range x {
			diff := thisScale*float32(laux[i]) + thisMin - v
			mad += w[i] * diff * diff
		}
		if mad < bestMad {
			copy(L, laux)
			bestMad, scale, mn = mad, thisScale, thisMin
		}
	}
	return scale, -mn
}

// quantQ6K follows quantize_row_q6_K_ref: a signed scale per 16 elements from
// make_qx_quants (nmax 32), the scales quantized to int8 against d, and the quants
// (6 bits, offset 32) recomputed against the quantized scales.
func quantQ6K(blk []byte, x []float32) {
	var L [qkK]uint8
	var scales [16]float32
	var maxScale, maxAbs float32
	for ib := 0; ib < 16; ib++ {
		scales[ib] = makeQX(32, x[16*ib:16*ib+16], L[16*ib:16*ib+16])
		if a := abs32(scales[ib]); a > maxAbs {
			maxAbs, maxScale = a, scales[ib]
		}
	}
	ql, qh, sc := blk[0:128], blk[128:192], blk[192:208]
	if maxAbs < 1e-15 {
		clear(blk)
		return
	}
	iscale := -128 / maxScale
	put16(blk[208:], F32ToF16(1/iscale))
	for ib := range scales {
		sc[ib] = byte(int8(min(127, nearestInt(iscale*scales[ib]))))
	}
	d := f16Table[le16(blk[208:])]
	for j := 0; j < 16; j++ {
		dd := d * float32(int8(sc[j]))
		if dd == 0 {
			continue
		}
		for ii := 0; ii < 16; ii++ {
			l := nearestInt(x[16*j+ii] / dd)
			L[16*j+ii] = uint8(max(-32, min(31, l)) + 32)
		}
	}
	clear(ql)
	clear(qh)
	for h := 0; h < 2; h++ {
		for l := 0; l < 32; l++ {
			e := L[128*h:]
			q1, q2, q3, q4 := e[l], e[l+32], e[l+64], e[l+96]
			ql[64*h+l] = q1&0xf | (q3&0xf)<<4
			ql[64*h+l+32] = q2&0xf | (q4&0xf)<<4
			qh[32*h+l] = q1>>4 | (q2>>4)<<2 | (q3>>4)<<4 | (q4>>4)<<6
		}
	}
}

// makeQX is ggml's make_qx_quants with rmse_type 1 and no importance weights: the
// signed scale minimising Σ x²(x - scale·l)² with l in [-nmax, nmax-1], searching
// inverse scales -(nmax + 0.1k)/max for k = ±3, ±6, ±9 (ggml: every k in ±1..9, a
// finer search that is three times slower for little gain); L gets l+nmax.
func makeQX(nmax int, x []float32, L []uint8) float32 {
	var mx, amax float32
	for _, v := range x {
		if a := abs32(v); a > amax {
			amax, mx = a, v
		}
	}
	if amax < 1e-15 {
		clear(L)
		return 0
	}
	try := func(iscale float32, store bool) (sumLX, sumL2 float32) {
		for i, v := range x {
			l := max(-nmax, min(nmax-1, nearestInt(iscale*v)))
			if store {
				L[i] = uint8(l + nmax)
			}
			w := v * v
			sumLX += w * v * float32(l)
			sumL2 += w * float32(l*l)
		}
		return
	}
	iscale := -float32(nmax) / mx
	sumLX, sumL2 := try(iscale, true)
	var scale float32
	if sumL2 != 0 {
		scale = sumLX / sumL2
	}
	best := scale * sumLX
	for is := -9; is <= 9; is += 3 {
		if is == 0 {
			continue
		}
		iscale = -(float32(nmax) + 0.1*float32(is)) / mx
		sumLX, sumL2 = try(iscale, false)
		if sumL2 > 0 && sumLX*sumLX > best*sumL2 {
			try(iscale, true)
			scale = sumLX / sumL2
			best = scale * sumLX
		}
	}
	return scale
}

func abs32(f float32) float32 { return math.Float32frombits(math.Float32bits(f) &^ (1 << 31)) }
