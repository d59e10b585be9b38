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

// dotF16VecDotTails adds to out[r] the tails (the values from n64 on) of the
// rows of the first multiple of 8 of len(out) rows through
// dotF16VecDotTailAVX512, in the float64 order of dotF16VecDotRows's tails, and
// returns how many rows it did (0 below AVX-512 or for a tail of one value).
func dotF16VecDotTails(out []float32, rows []byte, x []float32, rb, n64 int) int {
	nr, n := len(out)&^7, len(x)-n64
	if !useAVX512 || nr == 0 || n < 2 {
		return 0
	}
	_ = rows[(nr-1)*rb+2*len(x)-1]
	dotF16VecDotTailAVX512(&out[0], &rows[2*n64], rb, &x[n64], n, nr)
	return nr
}
