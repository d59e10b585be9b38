//go:build !purego

package kernels

// The assembly takes the multiple-of-8 head of each slice; the Go loops finish the
// rest (lane i%8 of the tail is the lane the whole loop would have used, since the
// head's length is a multiple of 8).

func attnLanes(k []uint16, q []float32, lanes *[8]float32) {
	n := len(q) &^ 7
	if !useAVX2 || n == 0 {
		attnLanesGeneric(k, q, lanes)
		return
	}
	_ = k[len(q)-1]
	attnLanesF16(&k[0], &q[0], n, &lanes[0])
	attnLanesGeneric(k[n:], q[n:], lanes)
}

func attnMad(acc, v []uint16, s float32) {
	n := len(acc) &^ 7
	if !useAVX2 || n == 0 {
		attnMadGeneric(acc, v, s)
		return
	}
	_ = v[len(acc)-1]
	attnMadF16(&acc[0], &v[0], n, s)
	attnMadGeneric(acc[n:], v[n:], s)
}

func attnScale(acc []uint16, s float32) {
	n := len(acc) &^ 7
	if !useAVX2 || n == 0 {
		attnScaleGeneric(acc, s)
		return
	}
	attnScaleF16(&acc[0], n, s)
	attnScaleGeneric(acc[n:], s)
}
