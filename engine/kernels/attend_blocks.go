package kernels

import "math"

// AttendBlocks is Attend over a KV cache kept in blocks (engine/kvcache's paged
// layout): position j's K row is ks[j/bt][(j%bt)*stride+off:][:len(out)] and its V row
// the same place in vs. The positions are visited in the same order with the same
// operations as Attend's, so the result is the same bits as Attend over the rows laid
// out contiguously: a sequence's attention does not depend on how its cache is paged.
func AttendBlocks(out, q []float32, ks, vs [][]uint16, off, stride, bt, n int, scale float32) {
	hd := len(out)
	var qbuf [256]float32
	var accBuf [256]uint16
	qr, acc := qbuf[:0], accBuf[:0]
	if hd <= len(qbuf) {
		qr, acc = qbuf[:hd], accBuf[:hd]
	} else {
		qr, acc = make([]float32, hd), make([]uint16, hd)
	}
	for i, x := range q[:hd] {
		qr[i] = RoundF16(x)
	}
	sum := float32(0)
	mx := float32(math.Inf(-1))
	for j := 0; j < n; j++ {
		r := (j%bt)*stride + off
		kb, vb := ks[j/bt], vs[j/bt]
		var a8 [8]float32
		attnLanes(kb[r:r+hd], qr, &a8)
		s := sum8(&a8) * scale
		ms, vsc := float32(1), float32(1)
		if s > mx {
			ms = expf(mx - s)
			mx = s
			attnScale(acc, ms)
		} else {
			vsc = expf(s - mx)
		}
		attnMad(acc, vb[r:r+hd], vsc)
		sum = sum*ms + vsc
	}
	inv := 1 / sum
	for i, a := range acc {
		out[i] = f16Table[a] * inv
	}
}
