//go:build !purego

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestQ4KAVX2TokensEveryCount: dotQ4KRowsT (the AVX2 kernels of 2-9 tokens on
// q8kA's layout) for every token count 2-40 and weight and activation
// extremes (all-0xff weights and scales against all -128 or 127, random
// bytes) gives every token the one-token kernel's bits and the reference's,
// and writes nothing around its outputs.
func TestQ4KAVX2TokensEveryCount(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2")
	}
	const guard = -12345.5
	r := rand.New(rand.NewPCG(33, 48))
	for _, wm := range []string{"random", "quantized", "0xff", "0x00"} {
		for _, am := range []string{"random", "quantized", "max", "min"} {
			for _, nb := range []int{1, 3, 8} {
				row := weightRow(r, Q4_K, nb, wm, false)
				y := q8KActs(r, nb*40, am, false)
				var a acts
				a.q8k = y
				a.layoutQ4KAVX2(nb, 40)
				for n := 2; n <= 40; n++ {
					buf := make([]float32, n+2)
					for i := range buf {
						buf[i] = guard
					}
					dotQ4KRowsT(buf[1:n+1], row, a.q8kA, nb)
					if buf[0] != guard || buf[n+1] != guard {
						t.Errorf("%s/%s nb %d, %d tokens: guard overwritten", wm, am, nb, n)
					}
					for tok := range n {
						yt := y[tok*nb : (tok+1)*nb]
						one := dotQ4KRow(row, yt)
						if got := buf[1+tok]; math.Float32bits(got) != math.Float32bits(one) {
							t.Fatalf("%s/%s nb %d, %d tokens: token %d: %v, one-token kernel %v", wm, am, nb, n, tok, got, one)
						}
						if ref := dotQ4KRowGeneric(row, yt); math.Float32bits(ref) != math.Float32bits(one) {
							t.Fatalf("%s/%s nb %d: token %d: one-token %v, reference %v", wm, am, nb, tok, one, ref)
						}
					}
				}
			}
		}
	}
}

// TestMatMulQ4KAVX2TokensMatchOneToken: MatMul of a Q4_K matrix against n = 1 …
// 20 tokens (through q8kA and dotQ4KRowsT on AVX2) gives each token the bits of
// a MatMul of that token alone, on one thread and on several.
func TestMatMulQ4KAVX2TokensMatchOneToken(t *testing.T) {
	if !usesQ4KAVX2T(Q4_K, 9) {
		t.Skip("not the AVX2 few-token path")
	}
	r := rand.New(rand.NewPCG(3, 33))
	const rows, cols = 37, 768
	w := Matrix{Type: Q4_K, Rows: rows, Cols: cols, Data: make([]byte, rows*Q4_K.RowBytes(cols))}
	for i := 0; i < rows; i++ {
		QuantizeRow(w.Row(i), Q4_K, randRow(r, cols, 0.1))
	}
	x := randRow(r, 20*cols, 1)
	one := make([]float32, 20*rows)
	for tok := 0; tok < 20; tok++ {
		MatMul(one[tok*rows:(tok+1)*rows], w, x[tok*cols:(tok+1)*cols], 1)
	}
	for _, threads := range []int{1, 3} {
		t.Run(fmt.Sprint("threads", threads), func(t *testing.T) {
			defer SetThreads(SetThreads(threads))
			for n := 2; n <= 20; n++ {
				dst := make([]float32, n*rows)
				MatMul(dst, w, x[:n*cols], n)
				for i := range dst {
					if math.Float32bits(dst[i]) != math.Float32bits(one[i]) {
						t.Fatalf("%d tokens: token %d row %d: %v, alone %v", n, i/rows, i%rows, dst[i], one[i])
					}
				}
			}
		})
	}
}

// BenchmarkQ4KAVX2Tokens: MatMul of a Q4_K matrix of 8192 rows × 2048 columns
// (a 1b model's ffn_up) against 1, 2, 5, 9 and 17 tokens on one thread, through
// dotQ4KRowsMixed (t: the kernels of 3, 5, 6, 7 and 9 tokens for what the
// eights leave) and through dotQ4KRows' kernels of 8, 4, 2 and 1 tokens (x):
// CPU time per call (cpu-us/op). (With dotQ4KRowsT alone, 17 tokens as 9 + 8
// took 1.1–1.3× x's CPU: its 8-token kernel is slower than dotQ4KAVX2x8.)
func BenchmarkQ4KAVX2Tokens(b *testing.B) {
	if !usesQ4KAVX2T(Q4_K, 9) {
		b.Skip("not the AVX2 few-token path")
	}
	defer SetThreads(SetThreads(1))
	r := rand.New(rand.NewPCG(7, 33))
	const rows, cols = 8192, 2048
	w := Matrix{Type: Q4_K, Rows: rows, Cols: cols, Data: make([]byte, rows*Q4_K.RowBytes(cols))}
	for i := 0; i < rows; i++ {
		QuantizeRow(w.Row(i), Q4_K, randRow(r, cols, 0.1))
	}
	x := randRow(r, 17*cols, 1)
	dst := make([]float32, 17*rows)
	for _, n := range []int{1, 2, 5, 9, 17} {
		for _, path := range []string{"x", "t"} {
			b.Run(fmt.Sprintf("t%d/%s", n, path), func(b *testing.B) {
				defer func(v bool) { useQ4KAVX2T = v }(useQ4KAVX2T)
				useQ4KAVX2T = path == "t"
				c0 := cpuSeconds()
				for b.Loop() {
					MatMul(dst, w, x[:n*cols], n)
				}
				b.ReportMetric((cpuSeconds()-c0)*1e6/float64(b.N), "cpu-us/op")
			})
		}
	}
}

// BenchmarkQ4KAVX2Kernels: the kernels alone over the 8192 rows of
// BenchmarkQ4KAVX2Tokens' matrix, one row a call: dotQ4KRows (x) against
// dotQ4KRowsT (t) for 8 and 9 tokens (cpu-us/op).
func BenchmarkQ4KAVX2Kernels(b *testing.B) {
	if !usesQ4KAVX2T(Q4_K, 9) {
		b.Skip("not the AVX2 few-token path")
	}
	r := rand.New(rand.NewPCG(7, 33))
	const rows, cols = 8192, 2048
	nb := cols / qkK
	w := Matrix{Type: Q4_K, Rows: rows, Cols: cols, Data: make([]byte, rows*Q4_K.RowBytes(cols))}
	for i := 0; i < rows; i++ {
		QuantizeRow(w.Row(i), Q4_K, randRow(r, cols, 0.1))
	}
	var a acts
	a.prepare(Q4_K, randRow(r, 9*cols, 1), 9, cols)
	out := make([]float32, 9)
	for _, n := range []int{8, 9} {
		for _, path := range []string{"x", "t"} {
			b.Run(fmt.Sprintf("t%d/%s", n, path), func(b *testing.B) {
				c0 := cpuSeconds()
				for b.Loop() {
					for i := 0; i < rows; i++ {
						if path == "t" {
							dotQ4KRowsT(out[:n], w.Row(i), a.q8kA, nb)
						} else {
							dotQ4KRows(out[:n], w.Row(i), a.q8k, nb)
						}
					}
				}
				b.ReportMetric((cpuSeconds()-c0)*1e6/float64(b.N), "cpu-us/op")
			})
		}
	}
}
