//go:build !purego

package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// BenchmarkQ4KTokens measures one Q4_K row of 2048 columns against 8 tokens
// through the AVX2 kernels of 1, 2, 4 and 8 tokens per call (dotQ4KAVX2, x2, x4,
// x8): what a verification step's 8-token products pay per weight row. The
// bytes are the row's, once per token.
func BenchmarkQ4KTokens(b *testing.B) {
	if !useAVX2 {
		b.Skip("no AVX2")
	}
	r := rand.New(rand.NewPCG(5, 8))
	const cols, nTok = 2048, 8
	nb := cols / qkK
	var a acts
	a.prepare(Q4_K, randRow(r, cols*nTok, 1), nTok, cols)
	row := make([]byte, Q4_K.RowBytes(cols))
	QuantizeRow(row, Q4_K, randRow(r, cols, 0.1))
	out := make([]float32, nTok)
	stride := nb * int(unsafe.Sizeof(a.q8k[0]))
	y := func(t int) *byte { return (*byte)(unsafe.Pointer(&a.q8k[t*nb])) }
	for _, T := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("x%d", T), func(b *testing.B) {
			b.SetBytes(int64(len(row) * nTok))
			for b.Loop() {
				for t := 0; t < nTok; t += T {
					switch T {
					case 1:
						out[t] = dotQ4KAVX2(&row[0], y(t), nb)
					case 2:
						dotQ4KAVX2x2(&row[0], y(t), nb, stride, &out[t])
					case 4:
						dotQ4KAVX2x4(&row[0], y(t), nb, stride, &out[t])
					case 8:
						dotQ4KAVX2x8(&row[0], y(t), nb, stride, &out[t])
					}
				}
			}
		})
	}
}
