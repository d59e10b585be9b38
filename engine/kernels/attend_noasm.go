//go:build !amd64 || purego

package kernels

func (st *attnState) span(k, v []uint16, n, stride int, scale float32) {
	attnSpanGeneric(st, k, v, n, stride, scale)
}

func (st *attnState) spanBlocks(ks, vs [][]uint16, off, stride, bt, n int, scale float32) {
	st.spanEachBlock(ks, vs, off, stride, bt, n, scale)
}

func tileChunks([]attnState, []int, [][]uint16, [][]uint16, int, int, int, int, float32) bool {
	return false
}

func accumQ8_0(acc []float32, v []byte, vs float32) { accumQ8_0Generic(acc, v, vs) }

func accumQ4_0(acc []float32, v []byte, vs float32) { accumQ4_0Generic(acc, v, vs) }

func (st *kvState) span(k, v []uint16, n, kstride, vstride int, scale float32) {
	st.spanGeneric(k, v, n, kstride, vstride, scale)
}

func tileKVGroups([]kvState, []int, [][]uint16, [][]uint16, int, int, int, int, int, int, int, int, int, float32) bool {
	return false
}

// attnGroupMax is the most states a group of AttendBlocksTileKV's takes at once
// (attend_amd64.go's group kernels; here, the grouping AttendBlocksTileKVHeads
// asks for).
const attnGroupMax = 4
