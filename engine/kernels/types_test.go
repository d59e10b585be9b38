package kernels

import (
	"testing"

	"github.com/lmlite/lmlite/engine/gguf"
)

// TestTypesAgreeWithGGUF: kernels keeps its own small table of the formats it
// implements (so that the kernels, and the SIMD code to come, do not depend on the
// file format package); it must agree with engine/gguf's on numbers and sizes.
func TestTypesAgreeWithGGUF(t *testing.T) {
	for _, typ := range append(SupportedTypes(), Q8_1, Q8_K) {
		g := gguf.GGMLType(typ)
		if g.String() != typ.String() || g.BlockSize() != typ.BlockSize() || g.BlockBytes() != typ.BlockBytes() {
			t.Errorf("%v: gguf says %v, block %d of %d bytes; kernels: block %d of %d bytes",
				typ, g, g.BlockSize(), g.BlockBytes(), typ.BlockSize(), typ.BlockBytes())
		}
	}
	if Supported(Q8_K) || Supported(Q8_1) || Supported(Type(gguf.IQ2_XXS)) || Supported(Type(gguf.MXFP4)) {
		t.Error("Q8_K and Q8_1 are not weight types, and IQ2_XXS and MXFP4 are not implemented")
	}
	if n := len(SupportedTypes()); n != 17 {
		t.Errorf("%d supported types, want 17", n)
	}
}
