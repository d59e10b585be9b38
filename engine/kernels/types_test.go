package kernels

import (
	"testing"

	"github.com/lmlite/lmlite/engine/gguf"
)

// TestTypesAgreeWithGGUF: kernels keeps its own small table of the formats it
// implements (so that the kernels, and the SIMD code to come, do not depend on the
// file format package); it must agree with engine/gguf's on numbers and sizes.
func TestTypesAgreeWithGGUF(t *testing.T) {
	for _, typ := range []Type{F32, F16, BF16, Q4_0, Q8_0, Q4_K, Q6_K, Q8_K} {
		g := gguf.GGMLType(typ)
		if g.String() != typ.String() || g.BlockSize() != typ.BlockSize() || g.BlockBytes() != typ.BlockBytes() {
			t.Errorf("%v: gguf says %v, block %d of %d bytes; kernels: block %d of %d bytes",
				typ, g, g.BlockSize(), g.BlockBytes(), typ.BlockSize(), typ.BlockBytes())
		}
	}
	if Supported(Q8_K) || Supported(Type(gguf.Q5_K)) {
		t.Error("Q8_K and Q5_K are not weight types")
	}
}
