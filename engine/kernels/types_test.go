package kernels

import (
	"slices"
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
	if Supported(Q8_K) || Supported(Q8_1) || Supported(Type(gguf.MXFP4)) || Supported(Type(gguf.I8)) {
		t.Error("Q8_K and Q8_1 are not weight types, and MXFP4 and I8 are not implemented")
	}
	if n := len(SupportedTypes()); n != 24 {
		t.Errorf("%d supported types, want 24", n)
	}
	for _, typ := range SupportedTypes() {
		if lattice := slices.Contains(latticeTypes, typ); CanQuantize(typ) == lattice {
			t.Errorf("%v: CanQuantize %v", typ, CanQuantize(typ))
		}
	}
}
