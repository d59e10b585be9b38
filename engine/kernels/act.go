package kernels

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

// swigluGeneric is SwiGLU's reference.
func swigluGeneric(dst, gate, up []float32) {
	for i, g := range gate {
		dst[i] = g / (1 + expf(-g)) * up[i]
	}
}
