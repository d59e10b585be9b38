//go:build !amd64 || purego

package kernels

func usesQ4KAVX2T(Type, int) bool { return false }

func dotQ4KRowsT(out []float32, row []byte, y []q8KBlock, nb int) {
	panic("kernels: dotQ4KRowsT without AVX2")
}

func dotQ4KRowsMixed(out []float32, row []byte, a *acts, t0, nb int) {
	dotQ4KRows(out, row, a.q8k[t0*nb:], nb)
}
