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
