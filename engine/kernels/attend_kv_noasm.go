//go:build !amd64 || purego

package kernels

func tileKV(sts []kvState, ns []int, ks, vs [][]uint16, koff, voff, kstride, vstride, bt, nmax, gs, hk, hv int, scale float32) bool {
	return tileKVGroups(sts, ns, ks, vs, koff, voff, kstride, vstride, bt, nmax, gs, hk, hv, scale)
}
