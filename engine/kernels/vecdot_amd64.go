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
// dotF16VecDotTailAVX512 (dotF16VecDotTail16AVX512 for sixteen rows of a tail of
// a multiple of 16 values), in the float64 order of dotF16VecDotRows's tails, and
// returns how many rows it did (0 for a tail of one value; below AVX-512,
// dotF16VecDotTailsAVX2).
func dotF16VecDotTails(out []float32, rows []byte, x []float32, rb, n64 int) int {
	nr, n := len(out)&^7, len(x)-n64
	if !useAVX512 {
		return dotF16VecDotTailsAVX2(out, rows, x, rb, n64)
	}
	if nr == 0 || n < 2 {
		return 0
	}
	_ = rows[(nr-1)*rb+2*len(x)-1]
	r := 0
	if n%16 == 0 && nr >= 16 {
		// Sixteen rows at a time, transposed in registers (no gathers).
		r = nr &^ 15
		var x64 [64]float64
		for i, v := range x[n64:] {
			x64[i] = float64(v)
		}
		dotF16VecDotTail16AVX512t1(&out[0], 0, &rows[2*n64], rb, &x64[0], 0, n, r)
		if r == nr {
			return nr
		}
	}
	dotF16VecDotTailAVX512(&out[r], &rows[r*rb+2*n64], rb, &x[n64], n, nr-r)
	return nr
}

// dotF16VecDotTails2 is dotF16VecDotTails for two tokens at once (their own
// outputs out0 and out1 and activations x0 and x1, each in its one-token order)
// over the first multiple of 16 of len(out0) rows, for a tail of a multiple of
// 16 values (dotF16VecDotTail16AVX512t2: the rows transposed once for the two);
// it returns how many rows it did.
func dotF16VecDotTails2(out0, out1 []float32, rows []byte, x0, x1 []float32, rb, n64 int) int {
	nr, n := len(out0)&^15, len(x0)-n64
	if !useAVX512 {
		return dotF16VecDotTails2AVX2(out0, out1, rows, x0, x1, rb, n64)
	}
	if nr == 0 || n == 0 || n%16 != 0 || len(out1) < nr || len(x1) != len(x0) {
		return 0
	}
	_ = rows[(nr-1)*rb+2*len(x0)-1]
	var x64 [2][64]float64
	for i := range n {
		x64[0][i], x64[1][i] = float64(x0[n64+i]), float64(x1[n64+i])
	}
	// out1 as an offset from out0 (token rows of one product's output, out1's after).
	d := int(uintptr(unsafe.Pointer(&out1[0])) - uintptr(unsafe.Pointer(&out0[0])))
	if d < 4*nr || d%4 != 0 {
		return 0
	}
	os := d / 4
	dotF16VecDotTail16AVX512t2(&out0[0], os, &rows[2*n64], rb, &x64[0][0], 64, n, nr)
	return nr
}

// addScaled is addScaledGeneric through addScaledAVX2 (the same bits: each
// product rounded, then added).
func addScaled(dst, src []float32, s float32) {
	n := len(src) &^ 7
	if useAVX2 && n > 0 {
		addScaledAVX2(&dst[0], &src[0], s, n)
	} else {
		n = 0
	}
	addScaledGeneric(dst[n:], src[n:], s)
}
