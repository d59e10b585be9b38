//go:build !purego

package kernels

import "unsafe"

// dotF16VecDotTailsAVX2 is dotF16VecDotTails below AVX-512: the tails of the
// first multiple of 8 of len(out) rows through dotF16VecDotTail16AVX2t1, for a
// tail of a multiple of 16 values (a rank-16, -32 or -48 LoRA B); it returns how
// many rows it did (0 without AVX2 or for another tail).
func dotF16VecDotTailsAVX2(out []float32, rows []byte, x []float32, rb, n64 int) int {
	nr, n := len(out)&^7, len(x)-n64
	if !useAVX2 || nr == 0 || n == 0 || n%16 != 0 {
		return 0
	}
	_ = rows[(nr-1)*rb+2*len(x)-1]
	var x64 [64]float64
	for i, v := range x[n64:] {
		x64[i] = float64(v)
	}
	dotF16VecDotTail16AVX2t1(&out[0], 0, &rows[2*n64], rb, &x64[0], 0, n, nr)
	return nr
}

// dotF16VecDotTails2AVX2 is dotF16VecDotTails2 below AVX-512 (through
// dotF16VecDotTail16AVX2t2: the rows transposed once for the two tokens) over the
// first multiple of 8 of len(out0) rows; it returns how many rows it did.
func dotF16VecDotTails2AVX2(out0, out1 []float32, rows []byte, x0, x1 []float32, rb, n64 int) int {
	nr, n := len(out0)&^7, len(x0)-n64
	if !useAVX2 || nr == 0 || n == 0 || n%16 != 0 || len(out1) < nr || len(x1) != len(x0) {
		return 0
	}
	_ = rows[(nr-1)*rb+2*len(x0)-1]
	// out1 as an offset from out0 (token rows of one product's output, out1's after).
	d := int(uintptr(unsafe.Pointer(&out1[0])) - uintptr(unsafe.Pointer(&out0[0])))
	if d < 4*nr || d%4 != 0 {
		return 0
	}
	var x64 [2][64]float64
	for i := range n {
		x64[0][i], x64[1][i] = float64(x0[n64+i]), float64(x1[n64+i])
	}
	dotF16VecDotTail16AVX2t2(&out0[0], d/4, &rows[2*n64], rb, &x64[0][0], 64, n, nr)
	return nr
}
