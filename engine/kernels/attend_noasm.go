//go:build !amd64 || purego

package kernels

func (st *attnState) span(k, v []uint16, n, stride int, scale float32) {
	attnSpanGeneric(st, k, v, n, stride, scale)
}
