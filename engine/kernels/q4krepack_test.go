package kernels

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// q4KMatrix returns a Q4_K matrix of rows random rows of nb blocks (weightRow's
// modes in turn).
func q4KMatrix(r *rand.Rand, rows, nb int) Matrix {
	m := Matrix{Type: Q4_K, Rows: rows, Cols: nb * qkK}
	modes := []string{"quantized", "random", "0xff", "0x80"}
	for i := 0; i < rows; i++ {
		m.Data = append(m.Data, weightRow(r, Q4_K, nb, modes[i%len(modes)], false)...)
	}
	return m
}

// TestPackQ4KKeepsRows: PackQ4K repacks whole groups of 16 rows in place
// (leaving a last partial group as it was), RowInto gives back every row's
// plain bytes, and the packed layout's reference product has each row's
// dotQ4KRowGeneric bits.
func TestPackQ4KKeepsRows(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 16))
	for _, shape := range [][2]int{{16, 1}, {37, 3}, {32, 8}} {
		rows, nb := shape[0], shape[1]
		t.Run(fmt.Sprintf("%dx%d", rows, nb), func(t *testing.T) {
			m := q4KMatrix(r, rows, nb)
			plain := bytes.Clone(m.Data)
			if n := PackQ4K(&m); n != rows/16*16 || m.Packed != n {
				t.Fatalf("packed %d rows (Packed %d), want %d", n, m.Packed, rows/16*16)
			}
			rb := nb * 144
			if !bytes.Equal(m.Data[m.Packed*rb:], plain[m.Packed*rb:]) {
				t.Fatal("rows past the last group of 16 changed")
			}
			if bytes.Equal(m.Data[:rb*16], plain[:rb*16]) {
				t.Fatal("the first group was not repacked")
			}
			y := q8KActs(r, nb, "quantized", false)
			var buf []byte
			for i := 0; i < rows; i++ {
				buf = m.RowInto(buf, i)
				want := plain[i*rb : (i+1)*rb]
				if !bytes.Equal(buf, want) {
					t.Fatalf("row %d: RowInto differs from the plain row", i)
				}
				if i < m.Packed {
					grp := m.Data[i/16*16*rb : (i/16+1)*16*rb]
					got := dotQ4KX16Generic(grp, i%16, y)
					if ref := dotQ4KRowGeneric(want, y); math.Float32bits(got) != math.Float32bits(ref) {
						t.Fatalf("row %d: packed reference %v, dotQ4KRowGeneric %v", i, got, ref)
					}
				}
			}
		})
	}
}

// TestQ4KX16Layout pins the packed layout's byte positions (the kernels'
// generator, _asm/q4krepack.go, reads them by these offsets).
func TestQ4KX16Layout(t *testing.T) {
	const nb = 2
	src := make([]byte, 16*nb*144)
	for i := range src {
		src[i] = byte(i*7 + i/251)
	}
	dst := make([]byte, len(src))
	packQ4KX16(dst, src, nb)
	for b := 0; b < nb; b++ {
		out := dst[b*q4KX16Bytes:]
		for r := 0; r < 16; r++ {
			blk := src[r*nb*144+b*144:]
			if out[2*r] != blk[0] || out[2*r+1] != blk[1] || out[32+2*r] != blk[2] || out[33+2*r] != blk[3] {
				t.Fatalf("block %d row %d: d, dmin misplaced", b, r)
			}
			for i := 0; i < 12; i++ {
				if out[64+16*i+r] != blk[4+i] {
					t.Fatalf("block %d row %d: scales[%d] misplaced", b, r, i)
				}
			}
			for q := 0; q < 128; q++ {
				if out[256+64*(q/4)+4*r+q%4] != blk[16+q] {
					t.Fatalf("block %d row %d: qs[%d] misplaced", b, r, q)
				}
			}
		}
	}
}

// TestMatMulPackedQ4KMatchesPlain: MatMul on a packed Q4_K matrix gives every
// token of 1 … 20 the bits of the same matrix unpacked, one token at a time
// (batch invariance), with a partial last group of rows, on one thread and on
// several.
func TestMatMulPackedQ4KMatchesPlain(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 20))
	const rows, nb = 53, 4
	plain := q4KMatrix(r, rows, nb)
	packed := plain
	packed.Data = bytes.Clone(plain.Data)
	PackQ4K(&packed)
	x := randRow(r, 20*plain.Cols, 1)
	want := make([]float32, 20*rows)
	for tk := 0; tk < 20; tk++ {
		MatMul(want[tk*rows:(tk+1)*rows], plain, x[tk*plain.Cols:(tk+1)*plain.Cols], 1)
	}
	for _, threads := range []int{1, 3} {
		prev := SetThreads(threads)
		for n := 1; n <= 20; n++ {
			got := make([]float32, n*rows)
			MatMul(got, packed, x, n)
			for i, v := range got {
				if math.Float32bits(v) != math.Float32bits(want[i]) {
					SetThreads(prev)
					t.Fatalf("%d threads, %d tokens: token %d row %d: %v, one token on the plain rows %v", threads, n, i/rows, i%rows, v, want[i])
				}
			}
		}
		SetThreads(prev)
	}
	// Ranges of rows that cut groups of 16 (a worker's share need not be whole
	// groups): only the range's outputs, with the same bits.
	for _, n := range []int{1, 7, 12} {
		a := new(acts)
		a.prepare(Q4_K, x, n, packed.Cols)
		for _, rg := range [][2]int{{5, 40}, {17, 30}, {33, 53}} {
			got := make([]float32, n*rows)
			mm := matMul{dst: got, w: packed, a: a, nTok: n, rb: Q4_K.RowBytes(packed.Cols)}
			mm.rows(rg[0], rg[1])
			for i, v := range got {
				if in := i%rows >= rg[0] && i%rows < rg[1]; !in && v != 0 || in && math.Float32bits(v) != math.Float32bits(want[i]) {
					t.Fatalf("rows [%d, %d), %d tokens: token %d row %d: %v, want %v", rg[0], rg[1], n, i/rows, i%rows, v, want[i])
				}
			}
		}
	}
}

// TestMatMulsVecDotPackedQ4K: MatMulsVecDot (ggml's vec_dot orders, LoRA's
// products) on a packed Q4_K matrix gives the plain matrix's bits.
func TestMatMulsVecDotPackedQ4K(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 54))
	const rows, nb, nTok = 37, 3, 5
	plain := q4KMatrix(r, rows, nb)
	packed := plain
	packed.Data = bytes.Clone(plain.Data)
	PackQ4K(&packed)
	x := randRow(r, nTok*plain.Cols, 1)
	want, got := make([]float32, nTok*rows), make([]float32, nTok*rows)
	MatMulsVecDot([]Product{{Dst: want, W: plain, X: x, NTok: nTok}}, true)
	MatMulsVecDot([]Product{{Dst: got, W: packed, X: x, NTok: nTok}}, true)
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("token %d row %d: %v, plain %v", i/rows, i%rows, got[i], want[i])
		}
	}
}
