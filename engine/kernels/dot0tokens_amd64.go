//go:build !purego

package kernels

import "unsafe"

// dot0Rows sets out[t] to the dot product of one Q8_0, Q4_0 or Q5_0 row (wt) of
// nb blocks with token t's blocks y[t*nb:(t+1)*nb], for each t < len(out):
// with AVX2, four tokens a call (dotQ8_0AVX2t4 …, _asm/dot0tokens.go; each
// weight block decoded once for them), the last two or three with earlier
// tokens again through the four-token kernel (the same bits) or two a call,
// and a lone token through the row kernel. Every output has the one-token
// kernel's bits (dotQ8_0Row, dotQ4_0Row, dotQ5_0Row).
func dot0Rows(wt Type, out []float32, row []byte, y []q8Block, nb int) {
	t, n := 0, len(out)
	if useAVX2 && nb > 0 && n > 1 {
		_, _ = row[nb*wt.BlockBytes()-1], y[n*nb-1]
		ys := nb * int(unsafe.Sizeof(y[0]))
		for t < n {
			k := 4
			switch {
			case n-t >= 4:
			case n >= 4:
				t = n - 4 // the last tokens with earlier ones again
			default:
				k, t = 2, min(t, n-2)
			}
			x, yt, o := &row[0], (*byte)(unsafe.Pointer(&y[t*nb])), &out[t]
			switch {
			case wt == Q4_0 && k == 4:
				dotQ4_0AVX2t4(x, yt, ys, nb, o, 4)
			case wt == Q4_0:
				dotQ4_0AVX2t2(x, yt, ys, nb, o, 4)
			case wt == Q5_0 && k == 4:
				dotQ5_0AVX2t4(x, yt, ys, nb, o, 4)
			case wt == Q5_0:
				dotQ5_0AVX2t2(x, yt, ys, nb, o, 4)
			case k == 4:
				dotQ8_0AVX2t4(x, yt, ys, nb, o, 4)
			default:
				dotQ8_0AVX2t2(x, yt, ys, nb, o, 4)
			}
			t += k
		}
		return
	}
	for ; t < n; t++ {
		yt := y[t*nb : (t+1)*nb]
		switch wt {
		case Q4_0:
			out[t] = dotQ4_0Row(row, yt)
		case Q5_0:
			out[t] = dotQ5_0Row(row, yt)
		default:
			out[t] = dotQ8_0Row(row, yt)
		}
	}
}
