package kernels

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkLoRAProducts times a decode step's LoRA products of one projection of
// the 125m shape (rank 16, 768 → 2048, 16 tokens, f16 pairs): A then B, in MatMul's
// order (MatMulsSerial) and in ggml's vec_dot order (MatMulsVecDot).
func BenchmarkLoRAProducts(b *testing.B) {
	const rank, in, out, nTok = 16, 768, 2048, 16
	rng := rand.New(rand.NewPCG(1, 2))
	mk := func(rows, cols int) Matrix {
		d := make([]byte, 2*rows*cols)
		for i := 0; i < len(d); i += 2 {
			h := F32ToF16(float32(rng.NormFloat64() * 0.1))
			d[i], d[i+1] = byte(h), byte(h>>8)
		}
		return Matrix{Type: F16, Rows: rows, Cols: cols, Data: d}
	}
	a, bm := mk(rank, in), mk(out, rank)
	x := make([]float32, nTok*in)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	t, d := make([]float32, nTok*rank), make([]float32, nTok*out)
	pa := []Product{{Dst: t, W: a, X: x, NTok: nTok}}
	pb := []Product{{Dst: d, W: bm, X: t, NTok: nTok}}
	b.Run("matmul", func(b *testing.B) {
		for b.Loop() {
			MatMulsSerial(pa)
			MatMulsSerial(pb)
		}
	})
	b.Run("vecdot", func(b *testing.B) {
		for b.Loop() {
			MatMulsVecDot(pa, true)
			MatMulsVecDot(pb, true)
		}
	})
	// A and B apart, as a decode step has them: one token a product.
	pa1 := []Product{{Dst: t[:rank], W: a, X: x[:in], NTok: 1}}
	pb1 := []Product{{Dst: d[:out], W: bm, X: t[:rank], NTok: 1}}
	b.Run("vecdot-A-1tok", func(b *testing.B) {
		for b.Loop() {
			MatMulsVecDot(pa1, true)
		}
	})
	b.Run("vecdot-B-1tok", func(b *testing.B) {
		for b.Loop() {
			MatMulsVecDot(pb1, true)
		}
	})
}
