package kernels

// AttendBlocks is Attend over a KV cache kept in blocks (engine/kvcache's paged
// layout): position j's K row is ks[j/bt][(j%bt)*stride+off:][:len(out)] and its V row
// the same place in vs. The blocks go through the same online softmax as Attend's
// contiguous span, in position order, so the result is the same bits as Attend over
// the rows laid out contiguously: a sequence's attention does not depend on how its
// cache is paged.
func AttendBlocks(out, q []float32, ks, vs [][]uint16, off, stride, bt, n int, scale float32) {
	var st attnState
	st.start(q[:len(out)])
	if n > 0 {
		st.spanBlocks(ks, vs, off, stride, bt, n, scale)
	}
	st.finish(out)
}

// spanEachBlock adds positions 0..n-1 of a paged cache block by block, each block
// through span: the way for block sizes the chunked path does not take.
func (st *attnState) spanEachBlock(ks, vs [][]uint16, off, stride, bt, n int, scale float32) {
	for b := 0; n > 0; b++ {
		m := min(bt, n)
		st.span(ks[b][off:], vs[b][off:], m, stride, scale)
		n -= m
	}
}
