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
