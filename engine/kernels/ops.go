package kernels

import (
	"math"
)

// RMSNorm sets dst = x / sqrt(mean(x²) + eps) ⊙ weight (weight nil: no scaling). As
// in ggml the sum of squares is accumulated in float64. dst may be x.
func RMSNorm(dst, x, weight []float32, eps float32) {
	var sum float64
	for _, v := range x {
		sum += float64(v * v)
	}
	mean := float32(sum / float64(len(x)))
	scale := 1 / float32(math.Sqrt(float64(mean+eps)))
	if weight == nil {
		for i, v := range x {
			dst[i] = v * scale
		}
		return
	}
	for i, v := range x {
		dst[i] = v * scale * weight[i]
	}
}

// RoPECache fills cos[i], sin[i] (i < nDims/2) with the rotation of position pos for
// the pair i: theta_i = pos · base^(-2i/nDims) · freqScale / freqFactors[i]
// (freqFactors nil: 1). theta is stepped by repeated float32 multiplication, as ggml
// computes it, so that the angles match llama.cpp's to the last bit.
func RoPECache(cos, sin []float32, pos, nDims int, base, freqScale float32, freqFactors []float32) {
	thetaScale := float32(math.Pow(float64(base), -2/float64(nDims)))
	theta := float32(pos)
	for i := 0; i < nDims/2; i++ {
		t := theta
		if freqFactors != nil {
			t /= freqFactors[i]
		}
		t *= freqScale
		cos[i] = float32(math.Cos(float64(t)))
		sin[i] = float32(math.Sin(float64(t)))
		theta *= thetaScale
	}
}

// RoPE rotates the first nDims elements of each of the nHeads heads (headDim elements
// each) of x by the angles of one position (from RoPECache). Normal (GPT-J/llama
// style) rotates adjacent pairs (x[2i], x[2i+1]); neox rotates (x[i], x[i+nDims/2]).
// Each value is ggml's rotate_pairs as GCC contracts it in llama.cpp's builds:
// x0·cos − x1·sin as fma(x0, cos, −(x1·sin)) and x0·sin + x1·cos as
// fma(x0, sin, x1·cos), bit for bit (TestRoPEMatchesLlamaCppBits; the unfused form
// differed in a fifth of the values, which an F16 LoRA adapter's product passes on:
// issue 32).
// On amd64 an AVX2 kernel (ropeNeoxAVX2, ropeNormalAVX2) does the same
// arithmetic in float64 lanes, hence the same bits (TestRoPEKernelMatchesGo).
func RoPE(x []float32, nHeads, headDim, nDims int, cos, sin []float32, neox bool) {
	half := nDims / 2
	cos, sin = cos[:half], sin[:half]
	for h := 0; h < nHeads; h++ {
		ropeHead(x[h*headDim:h*headDim+nDims], cos, sin, neox)
	}
}

// ropeHeadGeneric is RoPE's reference on one head v from pair from on
// (len(cos) = len(sin) = nDims/2): each value fmaf(x0, cos, −float32(x1·sin)) or
// fmaf(x0, sin, float32(x1·cos)).
func ropeHeadGeneric(v, cos, sin []float32, from int, neox bool) {
	half := len(cos)
	sin = sin[:half]
	if neox {
		lo, hi := v[:half], v[half:2*half]
		for i := from; i < half; i++ {
			x0, x1 := lo[i], hi[i]
			lo[i] = fmaf(x0, cos[i], -float32(x1*sin[i]))
			hi[i] = fmaf(x0, sin[i], float32(x1*cos[i]))
		}
		return
	}
	v = v[:2*half]
	for i := from; i < half; i++ {
		x0, x1 := v[2*i], v[2*i+1]
		v[2*i] = fmaf(x0, cos[i], -float32(x1*sin[i]))
		v[2*i+1] = fmaf(x0, sin[i], float32(x1*cos[i]))
	}
}

// Softmax replaces x by softmax(x), with the sum of exponentials in float64 as ggml.
func Softmax(x []float32) {
	mx := float32(math.Inf(-1))
	for _, v := range x {
		mx = max(mx, v)
	}
	var sum float64
	for i, v := range x {
		e := float32(math.Exp(float64(v - mx)))
		x[i] = e
		sum += float64(e)
	}
	inv := float32(1 / sum)
	for i := range x {
		x[i] *= inv
	}
}

// SwiGLU sets dst = silu(gate) ⊙ up, silu(g) = g/(1+e^-g). dst may alias either.
func SwiGLU(dst, gate, up []float32) { swiglu(dst[:len(gate)], gate, up[:len(gate)]) }
