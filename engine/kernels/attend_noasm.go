//go:build !amd64 || purego

package kernels

func (st *attnState) span(k, v []uint16, n, stride int, scale float32) {
	attnSpanGeneric(st, k, v, n, stride, scale)
}

func (st *attnState) spanBlocks(ks, vs [][]uint16, off, stride, bt, n int, scale float32) {
	for b := 0; n > 0; b++ {
		m := min(bt, n)
		st.span(ks[b][off:], vs[b][off:], m, stride, scale)
		n -= m
	}
}
