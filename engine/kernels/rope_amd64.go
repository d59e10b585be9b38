//go:build !purego

package kernels

// ropeHead rotates one head v (RoPE): the AVX2 kernels take the pairs of whole
// vectors (4 neox pairs, 2 normal ones), ropeHeadGeneric the rest.
func ropeHead(v, cos, sin []float32, neox bool) {
	half := len(cos)
	n := 0
	if useAVX2 {
		if neox {
			if n = half &^ 3; n > 0 {
				_, _ = v[2*half-1], sin[half-1]
				ropeNeoxAVX2(&v[0], half, &cos[0], &sin[0], n)
			}
		} else if n = half &^ 1; n > 0 {
			_, _ = v[2*n-1], sin[n-1]
			ropeNormalAVX2(&v[0], &cos[0], &sin[0], n)
		}
	}
	ropeHeadGeneric(v, cos, sin, n, neox)
}
