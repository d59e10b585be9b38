//go:build !purego

package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"golang.org/x/sys/cpu"
)

// TestBF16DPKernels: the VDPBF16PS kernels (dotBF16DPt1/2/4/6) give every token
// dotBF16AVX2's bits (the BF16 reference of the AVX-512 levels), for rows of an
// even and an odd number of 64-column blocks, with activations of every sign
// and of exponents wide apart (normal numbers: subnormals are flushed, as the
// kernels' doc says), and write only their outputs.
func TestBF16DPKernels(t *testing.T) {
	if !cpu.X86.HasAVX512BF16 || !useAVX512 {
		t.Skip("no AVX512_BF16")
	}
	r := rand.New(rand.NewPCG(7, 8))
	for _, cols := range []int{64, 128, 192, 768, 2048 + 64} {
		row := make([]byte, 2*cols)
		for i := 0; i < cols; i++ {
			v := float32(r.NormFloat64()) * float32(math.Ldexp(1, r.IntN(24)-12))
			le16put(row[2*i:], F32ToBF16(v))
		}
		const maxT = 6
		x := make([]float32, maxT*cols)
		for i := range x {
			x[i] = RoundBF16(float32(r.NormFloat64()) * float32(math.Ldexp(1, r.IntN(16)-8)))
		}
		nw := bf16PairWords(cols)
		bp := make([]uint16, maxT*nw)
		for tk := 0; tk < maxT; tk++ {
			packBF16Pairs(bp[tk*nw:(tk+1)*nw], x[tk*cols:(tk+1)*cols], cols)
		}
		want := make([]float32, maxT)
		for tk := range want {
			want[tk] = dotBF16AVX2(&row[0], &x[tk*cols], cols)
		}
		kernels := map[int]func(x *byte, y *uint16, ys int, n int, out *float32, os int){
			1: dotBF16DPt1, 2: dotBF16DPt2, 4: dotBF16DPt4, 6: dotBF16DPt6}
		for T, k := range kernels {
			const os = 3 // outputs 3 floats apart; the ones between stay untouched
			out := make([]float32, os*maxT)
			for i := range out {
				out[i] = -7
			}
			k(&row[0], &bp[0], 2*nw, cols, &out[0], 4*os)
			for i, v := range out {
				tk := i / os
				if i%os != 0 || tk >= T {
					if v != -7 {
						t.Fatalf("cols %d, T %d: wrote out[%d]", cols, T, i)
					}
					continue
				}
				if math.Float32bits(v) != math.Float32bits(want[tk]) {
					t.Fatalf("cols %d, T %d, token %d: %v (%#x), want dotBF16AVX2's %v (%#x)", cols, T, tk, v, math.Float32bits(v), want[tk], math.Float32bits(want[tk]))
				}
			}
		}
	}
}

// TestBF16DPMatMul: MatMul on BF16 weights takes the VDPBF16PS kernels on the
// AVX-512 levels (a.bp packed) and gives the AVX2 level's bits for 1 to 17
// tokens, on an odd number of 64-column blocks.
func TestBF16DPMatMul(t *testing.T) {
	if !cpu.X86.HasAVX512BF16 || !useAVX512 {
		t.Skip("no AVX512_BF16")
	}
	r := rand.New(rand.NewPCG(9, 10))
	const rows, cols = 35, 5 * 64
	w := Matrix{Type: BF16, Rows: rows, Cols: cols, Data: make([]byte, rows*BF16.RowBytes(cols))}
	for i := 0; i < rows; i++ {
		fillRow(r, BF16, w.Row(i), 0.1)
	}
	for _, nTok := range []int{1, 2, 3, 5, 7, 16, 17} {
		x := randRow(r, nTok*cols, 1)
		var a acts
		a.prepare(BF16, x, nTok, cols)
		if len(a.bp) != nTok*bf16PairWords(cols) {
			t.Fatalf("%d tokens: %d packed words, want %d", nTok, len(a.bp), nTok*bf16PairWords(cols))
		}
		restore := setSIMD("avx2")
		want := make([]float32, nTok*rows)
		MatMul(want, w, x, nTok)
		restore()
		got := make([]float32, nTok*rows)
		MatMul(got, w, x, nTok)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%d tokens: output %d = %v, want %v", nTok, i, got[i], want[i])
			}
		}
	}
}

func le16put(b []byte, v uint16) { b[0], b[1] = byte(v), byte(v>>8) }

// setBF16DP turns the VDPBF16PS kernels on or off (on only where the CPU has
// them) and returns whether they were on.
func setBF16DP(on bool) (was bool) {
	was, useBF16DP = useBF16DP, on && useAVX512 && cpu.X86.HasAVX512BF16
	return was
}

// TestBF16DPRows4: dotBF16DPr4 gives each of its four rows dotBF16AVX2's bits
// (dotBF16DPt1's), for rows of an even and an odd number of 64-column blocks
// and a row stride past the row's end, and writes only out[0..3]; one-token
// MatMuls of many columns (through it from bf16DPRowsMinCols, the rows past a
// multiple of 4 through dotBF16DPt1) give the AVX2 level's bits.
func TestBF16DPRows4(t *testing.T) {
	if !cpu.X86.HasAVX512BF16 || !useAVX512 {
		t.Skip("no AVX512_BF16")
	}
	r := rand.New(rand.NewPCG(49, 5))
	for _, cols := range []int{64, 128, 192, 768, 2048 + 64} {
		rb := 2*cols + 128
		data := make([]byte, 4*rb)
		for i := 0; i < 4*rb/2; i++ {
			v := float32(r.NormFloat64()) * float32(math.Ldexp(1, r.IntN(24)-12))
			le16put(data[2*i:], F32ToBF16(v))
		}
		x := make([]float32, cols)
		for i := range x {
			x[i] = RoundBF16(float32(r.NormFloat64()) * float32(math.Ldexp(1, r.IntN(16)-8)))
		}
		bp := make([]uint16, bf16PairWords(cols))
		packBF16Pairs(bp, x, cols)
		out := []float32{-7, -7, -7, -7, -7}
		dotBF16DPr4(&data[0], rb, &bp[0], cols, &out[0])
		if out[4] != -7 {
			t.Fatalf("cols %d: wrote out[4]", cols)
		}
		for i := 0; i < 4; i++ {
			want := dotBF16AVX2(&data[i*rb], &x[0], cols)
			if math.Float32bits(out[i]) != math.Float32bits(want) {
				t.Fatalf("cols %d, row %d: %v (%#x), want dotBF16AVX2's %v (%#x)", cols, i, out[i], math.Float32bits(out[i]), want, math.Float32bits(want))
			}
		}
	}
	const rows, cols = 11, bf16DPRowsMinCols/64*64 + 3*64 // an odd number of 64-column blocks
	w := Matrix{Type: BF16, Rows: rows, Cols: cols, Data: make([]byte, rows*BF16.RowBytes(cols))}
	for i := 0; i < rows; i++ {
		fillRow(r, BF16, w.Row(i), 0.1)
	}
	x := randRow(r, cols, 1)
	restore := setSIMD("avx2")
	want := make([]float32, rows)
	MatMul(want, w, x, 1)
	restore()
	got := make([]float32, rows)
	MatMul(got, w, x, 1)
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("MatMul %d×%d: output %d = %v, want %v", rows, cols, i, got[i], want[i])
		}
	}
}
