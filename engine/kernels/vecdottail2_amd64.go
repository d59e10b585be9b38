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

// dotF32VecDotTails adds to out[r], for the first multiple of 8 of len(out) rows,
// the products of the first multiple of 8 of the tail's values (from n64 on) in
// dotF32VecDotTail's order through dotF32VecDotTailAVX2, and returns how many rows
// and values it did (0, 0 without AVX2).
func dotF32VecDotTails(out []float32, rows []byte, x []float32, rb, n64 int) (nr, n8 int) {
	nr, n8 = len(out)&^7, (len(x)-n64)&^7
	if !useAVX2 || nr == 0 || n8 == 0 {
		return 0, 0
	}
	_ = rows[(nr-1)*rb+4*len(x)-1]
	dotF32VecDotTailAVX2(&out[0], &rows[4*n64], rb, &x[n64], n8, nr)
	return nr, n8
}

// dotQ8_0VecDots sets out[r] to dotQ8_0VecDotGeneric of row r of rows and y
// through dotQ8_0VecDotAVX2 (its bits: ggml's AVX2 order) and returns how many
// rows it did (0 without AVX2).
func dotQ8_0VecDots(out []float32, rows []byte, y []q8Block, rb int) int {
	if !useAVX2 || len(out) == 0 || len(y) == 0 {
		return 0
	}
	_ = rows[(len(out)-1)*rb+34*len(y)-1]
	dotQ8_0VecDotAVX2(&out[0], &rows[0], rb, (*byte)(unsafe.Pointer(&y[0])), len(y), len(out))
	return len(out)
}
