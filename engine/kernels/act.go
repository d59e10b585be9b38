package kernels

import "math"

// Activation kernels, in pure Go: the references of the assembly in act_amd64.go
// (dispatched by the functions without the Generic suffix) and the code everywhere
// else. The assembly gives their bits for finite inputs.

// quantRowsQ8_0Generic quantizes x (len(y)·32 values) to Q8_0 activation blocks
// (c = −(Σqs << shift)).
func quantRowsQ8_0Generic(y []q8Block, x []float32, shift int) {
	for b := range y {
		quantActQ8_0(&y[b], x[b*qk0:(b+1)*qk0], shift)
	}
}

// quantRowsQ8KGeneric quantizes x (len(y)·256 values) to Q8_K activation blocks.
func quantRowsQ8KGeneric(y []q8KBlock, x []float32) {
	for b := range y {
		quantActQ8K(&y[b], x[b*qkK:(b+1)*qkK])
	}
}

// roundF16sGeneric sets dst[i] = RoundF16(src[i]).
func roundF16sGeneric(dst, src []float32) {
	for i, v := range src {
		dst[i] = RoundF16(v)
	}
}

// toF16sGeneric sets dst[i] = F32ToF16(src[i]).
func toF16sGeneric(dst []uint16, src []float32) {
	for i, v := range src {
		dst[i] = F32ToF16(v)
	}
}

// roundBF16sGeneric sets dst[i] = RoundBF16(src[i]).
func roundBF16sGeneric(dst, src []float32) {
	for i, v := range src {
		dst[i] = RoundBF16(v)
	}
}

// swigluGeneric is SwiGLU's reference: llama.cpp's ggml_vec_swiglu_f32 on AVX-512,
// silu(g) = g/(1 + e**-g) with ggml's vector exponential (expfGGML), times up.
func swigluGeneric(dst, gate, up []float32) {
	for i, g := range gate {
		dst[i] = g / (1 + expfGGML(-g)) * up[i]
	}
}

// fmaf is a·b + c rounded once to float32 (the float64 product is exact, and a
// float64 sum rounded again to float32 differs from a single rounding only in
// cases these inputs do not reach).
func fmaf(a, b, c float32) float32 { return float32(math.FMA(float64(a), float64(b), float64(c))) }

// expfGGML is e**x as ggml_v_expf computes it in llama.cpp's AVX-512 builds (the
// SiLU of its SwiGLU op): n = round(x·log2 e) by the 1.5·2**23 trick, b = x − n·ln 2
// in two parts, a degree-5 polynomial in fused multiply-adds, and the result j·2**n
// rounded once (VSCALEFPS); |n| > 192 gives +Inf above and 0 below. Its last bit
// differs from libm's expf (and from ggml's AVX2 variant, which forms k + k·j) on
// some inputs, and that bit matters: llama.cpp's quantized activations can round
// the other way on it (issue 32). TestSwiGLUMatchesLlamaCpp checks it against
// llama.cpp's own op.
func expfGGML(x float32) float32 {
	const r = 12582912 // 0x1.8p23
	z := fmaf(x, 0x1.715476p+0, r)
	n := z - r
	b := fmaf(-n, 0x1.7f7d1cp-20, fmaf(-n, 0x1.62e4p-1, x))
	u := b * b
	j := fmaf(fmaf(fmaf(0x1.0e4020p-7, b, 0x1.573e2ep-5), u, fmaf(0x1.555e66p-3, b, 0x1.fffdb6p-2)), u, fmaf(0x1.ffffecp-1, b, 1))
	if abs32(n) > 192 {
		if n <= 0 {
			return 0
		}
		return float32(math.Inf(1))
	}
	return float32(float64(j) * math.Ldexp(1, int(n)))
}
