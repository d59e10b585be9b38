//go:build !purego

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// BenchmarkQ6KTokens measures one Q6_K row of 2048 columns against 8 tokens
// through the AVX2 kernels of 1, 2, 4 and 8 tokens per call (dotQ6KAVX2, x2, x4,
// x8): what a verification step's 8-token products pay per weight row. The
// bytes are the row's, once per token.
func BenchmarkQ6KTokens(b *testing.B) {
	if !useAVX2 {
		b.Skip("no AVX2")
	}
	r := rand.New(rand.NewPCG(5, 8))
	const cols, nTok = 2048, 8
	nb := cols / qkK
	var a acts
	a.prepare(Q6_K, randRow(r, cols*nTok, 1), nTok, cols)
	row := make([]byte, Q6_K.RowBytes(cols))
	QuantizeRow(row, Q6_K, randRow(r, cols, 0.1))
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
						out[t] = dotQ6KAVX2(&row[0], y(t), nb)
					case 2:
						dotQ6KAVX2x2(&row[0], y(t), nb, stride, &out[t])
					case 4:
						dotQ6KAVX2x4(&row[0], y(t), nb, stride, &out[t])
					case 8:
						dotQ6KAVX2x8(&row[0], y(t), nb, stride, &out[t])
					}
				}
			}
		})
	}
}

// TestQ6KRowsEveryCount: dotQ6KRows for every token count 1-20 (each mix of the
// AVX2 kernels of 8, 4, 2 and 1 tokens, and the 8- and 4-token kernels over the
// last tokens again) gives every token the one-token kernel's bits and the
// reference's (llama.cpp's float order), and writes nothing around its outputs.
func TestQ6KRowsEveryCount(t *testing.T) {
	requireSIMD(t, "avx2")
	defer setSIMD("avx2")() // the AVX2 kernels also where the CPU has AVX-512
	r := rand.New(rand.NewPCG(6, 9))
	const guard = -12345.5
	for _, nb := range []int{1, 2, 5} {
		row := weightRow(r, Q6_K, nb, "random", false)
		y := q8KActs(r, nb*20, "random", false)
		for n := 1; n <= 20; n++ {
			buf := make([]float32, n+2)
			for i := range buf {
				buf[i] = guard
			}
			dotQ6KRows(buf[1:n+1], row, y, nb)
			if buf[0] != guard || buf[n+1] != guard {
				t.Errorf("nb %d, %d tokens: guard overwritten: %v", nb, n, buf)
			}
			for tok := range n {
				yt := y[tok*nb : (tok+1)*nb]
				want := dotQ6KRow(row, yt)
				if got := buf[1+tok]; math.Float32bits(got) != math.Float32bits(want) {
					t.Errorf("nb %d, %d tokens: token %d: %v, one-token kernel %v", nb, n, tok, got, want)
				}
				if ref := dotQ6KRowGeneric(row, yt); math.Float32bits(ref) != math.Float32bits(want) {
					t.Errorf("nb %d, %d tokens: token %d: %v, reference %v", nb, n, tok, want, ref)
				}
			}
		}
	}
}
