//go:build !amd64 || purego

package kernels

func dotF16VecDot64s(out []float32, rows []byte, x []float32, rb int) {
	dotF16VecDot64sGeneric(out, rows, x, rb)
}

func dotF16VecDotTails(out []float32, rows []byte, x []float32, rb, n64 int) int { return 0 }

func dotF16VecDotTails2(out0, out1 []float32, rows []byte, x0, x1 []float32, rb, n64 int) int {
	return 0
}

func addScaled(dst, src []float32, s float32) { addScaledGeneric(dst, src, s) }

func dotF32VecDotTails(out []float32, rows []byte, x []float32, rb, n64 int) (nr, n8 int) {
	return 0, 0
}

func dotQ8_0VecDots(out []float32, rows []byte, y []q8Block, rb int) int { return 0 }
