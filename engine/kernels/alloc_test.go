package kernels

import (
	"math/rand/v2"
	"testing"
)

// TestKernelsDoNotAllocate: in steady state (buffers grown by a first call) the
// matrix products, on one token and on a batch (2 and 3 tokens too: the padded
// 4-token path, whose stack buffer once escaped to the heap through a func value),
// through the worker pool, and attention allocate nothing.
func TestKernelsDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes what escapes and empties sync.Pools at random; make test runs this test without it")
	}
	r := rand.New(rand.NewPCG(51, 52))
	const rows, cols = 512, 1024
	for _, typ := range weightTypes {
		w := Matrix{Type: typ, Rows: rows, Cols: cols, Data: make([]byte, rows*typ.RowBytes(cols))}
		for i := 0; i < rows; i++ {
			fillRow(r, typ, w.Row(i), 0.1)
		}
		for _, nTok := range []int{1, 2, 3, 4, 16} {
			x := randRow(r, nTok*cols, 1)
			dst := make([]float32, nTok*rows)
			MatMul(dst, w, x, nTok)
			if n := testing.AllocsPerRun(20, func() { MatMul(dst, w, x, nTok) }); n != 0 {
				t.Errorf("MatMul %v, %d tokens: %v allocations", typ, nTok, n)
			}
		}
	}
	for _, neox := range []bool{false, true} {
		x, cos, sin := randRow(r, 4*64, 1), make([]float32, 32), make([]float32, 32)
		RoPECache(cos, sin, 17, 64, 10000, 1, nil)
		if n := testing.AllocsPerRun(20, func() { RoPE(x, 4, 64, 64, cos, sin, neox) }); n != 0 {
			t.Errorf("RoPE (neox %v): %v allocations", neox, n)
		}
	}
	for _, hd := range []int{64, 128} {
		c := newAttnCase(r, hd, 300, 2*hd, 0, "random")
		out := make([]float32, hd)
		if n := testing.AllocsPerRun(20, func() { Attend(out, c.q, c.k, c.v, c.n, c.stride, c.scale) }); n != 0 {
			t.Errorf("Attend, head size %d: %v allocations", hd, n)
		}
	}
}
