//go:build !amd64 || purego

package kernels

// packedRows computes the outputs of m's packed rows in [lo, hi) and returns
// the first row it left (min(hi, Packed)).
func (m *matMul) packedRows(lo, hi int) int {
	end := min(hi, m.w.Packed)
	m.packedRowsGeneric(lo, end)
	return end
}

// PacksQ4K reports whether Q4_K matrices are worth packing (PackQ4K): whether
// the packed kernels run here.
func PacksQ4K() bool { return false }
