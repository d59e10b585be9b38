//go:build !amd64 || purego

package kernels

// dotIQ4NLRows sets out[t] = dotIQ4NLRow(row, y[t*nb:(t+1)*nb]) for each t < len(out).
func dotIQ4NLRows(out []float32, row []byte, y []q8Block, nb int) {
	for t := range out {
		out[t] = dotIQ4NLRow(row, y[t*nb:(t+1)*nb])
	}
}

// dotIQ4XSRows sets out[t] = dotIQ4XSRow(row, y[t*nb:(t+1)*nb]) for each t < len(out).
func dotIQ4XSRows(out []float32, row []byte, y []q8KBlock, nb int) {
	for t := range out {
		out[t] = dotIQ4XSRow(row, y[t*nb:(t+1)*nb])
	}
}
