//go:build !purego

package kernels

import "unsafe"

// The assembly takes whole blocks (the quantizers) or the multiple-of-8 head of
// the slices; Go finishes the rest. The slices are checked before it reads them.

func quantRowsQ8_0(y []q8Block, x []float32, shift int) {
	if !useAVX2 || len(y) == 0 {
		quantRowsQ8_0Generic(y, x, shift)
		return
	}
	_ = x[len(y)*qk0-1]
	quantQ8_0AVX2(&x[0], len(y), (*byte)(unsafe.Pointer(&y[0])), shift)
}

func quantRowsQ8K(y []q8KBlock, x []float32) {
	if !useAVX2 || len(y) == 0 {
		quantRowsQ8KGeneric(y, x)
		return
	}
	_ = x[len(y)*qkK-1]
	quantQ8KAVX2(&x[0], len(y), (*byte)(unsafe.Pointer(&y[0])))
}

func roundF16s(dst, src []float32) {
	n := len(src) &^ 7
	if useAVX2 && n > 0 {
		_ = dst[n-1]
		roundF16AVX2(&dst[0], &src[0], n)
	} else {
		n = 0
	}
	roundF16sGeneric(dst[n:], src[n:])
}

func toF16s(dst []uint16, src []float32) {
	n := len(src) &^ 7
	if useAVX2 && n > 0 {
		_ = dst[n-1]
		toF16AVX2(&dst[0], &src[0], n)
	} else {
		n = 0
	}
	toF16sGeneric(dst[n:], src[n:])
}

func roundBF16s(dst, src []float32) {
	n := len(src) &^ 7
	if useAVX2 && n > 0 {
		_ = dst[n-1]
		roundBF16AVX2(&dst[0], &src[0], n)
	} else {
		n = 0
	}
	roundBF16sGeneric(dst[n:], src[n:])
}

func swiglu(dst, gate, up []float32) {
	n := len(gate) &^ 7
	if useAVX2 && n > 0 {
		_, _ = dst[n-1], up[n-1]
		swigluAVX2(&dst[0], &gate[0], &up[0], n)
	} else {
		n = 0
	}
	swigluGeneric(dst[n:], gate[n:], up[n:])
}
