package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestMatMulsMatchesMatMul checks that a group of products gives each product the
// same bits as MatMul alone, with one worker and with several (the group's rows
// split across them at other places than a lone product's), for products of no,
// one, a few and many tokens, products sharing their activations (the same X and
// activation format) and products that read the same X in another format (which
// must not share: Q8_0 and Q4_K weights meet different activations). MatMulsSerial
// gives the same bits on the calling goroutine.
func TestMatMulsMatchesMatMul(t *testing.T) {
	defer SetThreads(SetThreads(1))
	r := rand.New(rand.NewPCG(18, 1))
	const cols = 512
	mat := func(typ Type, rows int) Matrix {
		w := Matrix{Type: typ, Rows: rows, Cols: cols, Data: make([]byte, rows*typ.RowBytes(cols))}
		for i := 0; i < rows; i++ {
			fillRow(r, typ, w.Row(i), 0.1)
		}
		return w
	}
	x := randRow(r, 40*cols, 1)
	y := randRow(r, 40*cols, 1)
	ps := []Product{
		{W: mat(Q4_K, 100), X: x, NTok: 21},
		{W: mat(Q4_K, 37), X: x, NTok: 21}, // shares the first's activations
		{W: mat(Q6_K, 64), X: x[3*cols:], NTok: 1},
		{W: mat(Q8_0, 50), X: x, NTok: 21}, // the same X in Q8_0 form
		{W: mat(Q4_K, 30), X: y, NTok: 0},
		{W: mat(F32, 17), X: y, NTok: 3},
		{W: mat(Q4_K, 129), X: y[cols:], NTok: 16},
		{W: mat(Q8_0, 16), X: y, NTok: 40},
	}
	want := make([][]float32, len(ps))
	for i := range ps {
		p := &ps[i]
		want[i] = make([]float32, max(p.NTok, 1)*p.W.Rows)
		p.Dst = make([]float32, len(want[i]))
		if p.NTok > 0 {
			MatMul(want[i], p.W, p.X, p.NTok)
		}
	}
	for _, c := range []struct {
		threads int
		serial  bool
	}{{1, false}, {2, false}, {3, false}, {3, true}} {
		t.Run(fmt.Sprint("threads", c.threads, "serial", c.serial), func(t *testing.T) {
			SetThreads(c.threads)
			for i := range ps {
				for k := range ps[i].Dst {
					ps[i].Dst[k] = float32(math.NaN())
				}
			}
			if c.serial {
				MatMulsSerial(ps)
			} else {
				MatMuls(ps)
			}
			for i, p := range ps {
				if p.NTok == 0 {
					for k, v := range p.Dst {
						if !math.IsNaN(float64(v)) {
							t.Fatalf("product %d of no tokens wrote %v at %d", i, v, k)
						}
					}
					continue
				}
				for k, v := range p.Dst {
					if math.Float32bits(v) != math.Float32bits(want[i][k]) {
						t.Fatalf("product %d (%s, %d tokens) value %d: %v, alone %v", i, p.W.Type, p.NTok, k, v, want[i][k])
					}
				}
			}
		})
	}
}

// TestMatMulTokenTails checks batches of every size up to 40 tokens against one
// token at a time, bit for bit, for the types with tile kernels: a batch's last
// tokens go through the 16- or 4-token kernels again over some of the tokens
// before them, and a batch of 2 or 3 tokens through the 4-token kernel with zero
// rows for padding, which must write the same bits.
func TestMatMulTokenTails(t *testing.T) {
	defer SetThreads(SetThreads(1))
	r := rand.New(rand.NewPCG(18, 2))
	const rows, cols = 26, 512 // not a multiple of 4 or 16: every kernel meets a remainder
	for _, typ := range []Type{Q4_K, Q6_K, Q8_0, Q4_0, Q5_K, F16, BF16, Q5_1, Q4_1, F32} {
		w := Matrix{Type: typ, Rows: rows, Cols: cols, Data: make([]byte, rows*typ.RowBytes(cols))}
		for i := 0; i < rows; i++ {
			fillRow(r, typ, w.Row(i), 0.1)
		}
		x := randRow(r, 40*cols, 1)
		alone := make([]float32, 40*rows)
		for tk := 0; tk < 40; tk++ {
			MatMul(alone[tk*rows:(tk+1)*rows], w, x[tk*cols:(tk+1)*cols], 1)
		}
		for n := 1; n <= 40; n++ {
			dst := make([]float32, n*rows)
			MatMul(dst, w, x, n)
			for k, v := range dst {
				if math.Float32bits(v) != math.Float32bits(alone[k]) {
					t.Fatalf("%s, %d tokens: token %d row %d: %v, alone %v", typ, n, k/rows, k%rows, v, alone[k])
				}
			}
		}
	}
	// Rows wide enough that MatMul takes them in several blocks (blockBytes): 16,
	// 16 and 8 rows, each through every chunk of tokens.
	const wide, wrows = 8192, 40
	for _, typ := range []Type{Q4_K, Q8_0, F16, F32} {
		w := Matrix{Type: typ, Rows: wrows, Cols: wide, Data: make([]byte, wrows*typ.RowBytes(wide))}
		if blockBytes/typ.RowBytes(wide) >= 32 {
			t.Fatalf("%s rows of %d are not wide enough to make blocks", typ, wide)
		}
		for i := 0; i < wrows; i++ {
			fillRow(r, typ, w.Row(i), 0.1)
		}
		x := randRow(r, 37*wide, 1)
		dst := make([]float32, 37*wrows)
		MatMul(dst, w, x, 37)
		one := make([]float32, wrows)
		for tk := 0; tk < 37; tk++ {
			MatMul(one, w, x[tk*wide:(tk+1)*wide], 1)
			for i, v := range one {
				if math.Float32bits(v) != math.Float32bits(dst[tk*wrows+i]) {
					t.Fatalf("%s wide, 37 tokens: token %d row %d: %v, alone %v", typ, tk, i, dst[tk*wrows+i], v)
				}
			}
		}
	}
}
