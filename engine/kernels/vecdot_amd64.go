//go:build !purego

package kernels

import "unsafe"

// dotF16VecDot64s is dotF16VecDot64sGeneric through attnScoresF16 (AVX2; its
// order for a multiple of 64 values is attnScore's, and a scale of 1 changes no
// bits).
func dotF16VecDot64s(out []float32, rows []byte, x []float32, rb int) {
	if !useAVX2 || len(out) == 0 {
		dotF16VecDot64sGeneric(out, rows, x, rb)
		return
	}
	_ = rows[(len(out)-1)*rb+2*len(x)-1]
	attnScoresF16((*uint16)(unsafe.Pointer(&rows[0])), &x[0], len(x), len(out), rb/2, 1, &out[0])
}
