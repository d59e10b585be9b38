package kernels

import "math"

// expf is e**x in float32 for the online softmax of attention: Cephes' expf (range
// reduction by ln 2 split in two parts, a degree-6 polynomial, the exponent put in
// by bits), within 2 ulp of the exact value, as libm's expf that llama.cpp calls is
// within 1. It is several times cheaper than math.Exp in float64, which showed as the
// largest item of decoding's profile. Results below the smallest normal float32 are 0.
func expf(x float32) float32 {
	const (
		log2e = 1.44269504088896341
		c1    = 0.693359375
		c2    = -2.12194440e-4
	)
	switch {
	case x != x:
		return x
	case x > 88.72283:
		return float32(math.Inf(1))
	case x < -87.33654:
		return 0
	}
	// The float32 conversions keep every product and sum rounded on its own: the
	// compiler may fuse a*b+c otherwise (GOAMD64=v3), and attnExpF16 computes these
	// very operations.
	n := float32(math.Floor(float64(float32(x*log2e) + 0.5)))
	r := x - float32(n*c1) - float32(n*c2)
	p := float32(1.9875691500e-4)
	p = float32(p*r) + 1.3981999507e-3
	p = float32(p*r) + 8.3334519073e-3
	p = float32(p*r) + 4.1665795894e-2
	p = float32(p*r) + 1.6666665459e-1
	p = float32(p*r) + 5.0000001201e-1
	p = float32(float32(p*r)*r) + r + 1
	// p·2**n, in two steps so that n = 128 (x near the top) and n = -126 stay exact.
	h := int32(n) / 2
	return p * math.Float32frombits(uint32(h+127)<<23) * math.Float32frombits(uint32(int32(n)-h+127)<<23)
}

// attnExpf is e**x rounded once to float32 (NaN for NaN): the online softmax's
// exponential of binary16 attention (AttnF16, and the quantized caches'), as
// llama.cpp's flash attention takes it from libm's expf, whose results are the
// correctly rounded ones (issue 32: Cephes' expf above, within 2 ulp, moved
// llama-dense-c-IQ3_S of ../shared/testdata/zoo-quantize from llama.cpp by a mean
// KL of 1e-3). It works in float64: k = x·log2(e) rounded to an integer (ties to
// even), r = x − k·ln 2 by two fused multiply-adds (ln 2 in two parts), e**r by
// its Taylor polynomial of degree 12 (Horner, fused multiply-adds; |r| ≤ 0.347, so
// within 2e-16 of e**r), times 2**k, then one rounding to float32 (subnormal
// results included; x below −104 gives 0, above 100 +Inf). Its error before
// that rounding is about 1e-15 of an ulp's worth of float64 and so a result
// differs from the correctly rounded one only when e**x lies within ~1e-8 ulp of
// a midpoint between two float32s. attnExpF16 and attnExpF16AVX512 compute the
// very same operations in the same order (expf8CR, expfZCR of _asm/attn.go).
func attnExpf(x float32) float32 {
	if x != x {
		return x
	}
	d := float64(max(min(x, 100), -104))
	k := math.RoundToEven(d * attnExpLog2e)
	r := math.FMA(-k, attnExpLn2Hi, d)
	r = math.FMA(-k, attnExpLn2Lo, r)
	p := attnExpPoly[0]
	for _, c := range attnExpPoly[1:] {
		p = math.FMA(p, r, c)
	}
	return float32(p * math.Float64frombits(uint64(int64(k)+1023)<<52))
}

// attnExpf's constants: ln 2 split so that k·attnExpLn2Hi is exact for |k| < 2**20,
// and 1/n! for n = 12, 11, …, 0.
const (
	attnExpLog2e = 1.44269504088896338700e+00
	attnExpLn2Hi = 6.93147180369123816490e-01
	attnExpLn2Lo = 1.90821492927058770002e-10
)

var attnExpPoly = func() [13]float64 {
	var c [13]float64
	f := 1.0
	for n := 0; n <= 12; n++ {
		if n > 0 {
			f *= float64(n)
		}
		c[12-n] = 1 / f
	}
	return c
}()
