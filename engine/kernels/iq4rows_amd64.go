//go:build !purego

package kernels

import "unsafe"

// dotIQ4NLRows sets out[t] = dotIQ4NLRow(row, y[t*nb:(t+1)*nb]) for each t <
// len(out): on AVX2, eight then four tokens at a time through
// dotIQ4_NLAVX2x8 and x4 (each block's levels looked up once for the
// tokens; 5-7 tokens left after the eights: the last eight again, 3 left
// after the fours: the last four again), the rest one at a time: the same
// bits (each token's integer sums exact, its float steps the row kernel's).
func dotIQ4NLRows(out []float32, row []byte, y []q8Block, nb int) {
	t, n := 0, len(out)
	if useAVX2 && nb > 0 && n >= 4 {
		_, _ = row[nb*18-1], y[n*nb-1]
		stride := nb * int(unsafe.Sizeof(y[0]))
		yp := func(t int) *byte { return (*byte)(unsafe.Pointer(&y[t*nb])) }
		for ; t+8 <= n; t += 8 {
			dotIQ4_NLAVX2x8(&row[0], yp(t), nb, stride, &out[t])
		}
		if n >= 8 && n-t >= 5 {
			dotIQ4_NLAVX2x8(&row[0], yp(n-8), nb, stride, &out[n-8])
			t = n
		}
		for ; t+4 <= n; t += 4 {
			dotIQ4_NLAVX2x4(&row[0], yp(t), nb, stride, &out[t])
		}
		if n-t == 3 {
			dotIQ4_NLAVX2x4(&row[0], yp(n-4), nb, stride, &out[n-4])
			t = n
		}
	}
	for ; t < n; t++ {
		out[t] = dotIQ4NLRow(row, y[t*nb:(t+1)*nb])
	}
}

// dotIQ4XSRows is dotIQ4NLRows for IQ4_XS (dotIQ4XSAVX2x8 and x4).
func dotIQ4XSRows(out []float32, row []byte, y []q8KBlock, nb int) {
	t, n := 0, len(out)
	if useAVX2 && nb > 0 && n >= 4 {
		_, _ = row[nb*136-1], y[n*nb-1]
		stride := nb * int(unsafe.Sizeof(y[0]))
		yp := func(t int) *byte { return (*byte)(unsafe.Pointer(&y[t*nb])) }
		for ; t+8 <= n; t += 8 {
			dotIQ4XSAVX2x8(&row[0], yp(t), nb, stride, &out[t])
		}
		if n >= 8 && n-t >= 5 {
			dotIQ4XSAVX2x8(&row[0], yp(n-8), nb, stride, &out[n-8])
			t = n
		}
		for ; t+4 <= n; t += 4 {
			dotIQ4XSAVX2x4(&row[0], yp(t), nb, stride, &out[t])
		}
		if n-t == 3 {
			dotIQ4XSAVX2x4(&row[0], yp(n-4), nb, stride, &out[n-4])
			t = n
		}
	}
	for ; t < n; t++ {
		out[t] = dotIQ4XSRow(row, y[t*nb:(t+1)*nb])
	}
}
