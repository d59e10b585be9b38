//go:build !amd64 || purego

package kernels

// dot0Rows sets out[t] to the dot product of one Q8_0, Q4_0 or Q5_0 row (wt) of
// nb blocks with token t's blocks y[t*nb:(t+1)*nb], for each t < len(out).
func dot0Rows(wt Type, out []float32, row []byte, y []q8Block, nb int) {
	for t := range out {
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
