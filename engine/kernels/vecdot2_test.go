package kernels

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lmlite/lmlite/internal/ggmlref"
)

// TestDotF32VecDotRowsLevelsMatchOneRow checks that dotF32VecDotRows (the tails
// eight rows and eight values at a time through dotF32VecDotTailAVX2 where the CPU
// has AVX2) gives every row the bits of dotF32VecDotTail alone (its products
// rounded and added one by one), at every SIMD level, for tails of none, a multiple of
// 8 and other lengths and row counts around the eight-row groups.
func TestDotF32VecDotRowsLevelsMatchOneRow(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, level := range simdLevels() {
		restore := setSIMD(level)
		for _, n := range []int{1, 7, 8, 9, 16, 17, 24, 32, 63, 64, 72, 80, 81, 200} {
			for _, rows := range []int{1, 7, 8, 9, 16, 17, 24, 33} {
				w := make([]byte, 4*n*rows)
				for i := 0; i < len(w); i += 4 {
					v := float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(8)-4)))
					binary.LittleEndian.PutUint32(w[i:], math.Float32bits(v))
				}
				x := make([]float32, n)
				for i := range x {
					x[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(4)-2)))
				}
				got := make([]float32, rows)
				dotF32VecDotRows(got, w, x, 4*n)
				for r := range rows {
					want := dotF32VecDotTail(w[r*4*n:(r+1)*4*n], x)
					if math.Float32bits(got[r]) != math.Float32bits(want) {
						t.Errorf("%s: n %d, %d rows: row %d %g, alone %g", level, n, rows, r, got[r], want)
					}
				}
			}
		}
		restore()
	}
}

// TestDotQ8_0VecDotRowsLevelsMatchGeneric checks that dotQ8_0VecDotRows (through
// dotQ8_0VecDotAVX2 where the CPU has AVX2) gives every row the bits of
// dotQ8_0VecDotGeneric (ggml_vec_dot_q8_0_q8_0's order), at every SIMD level,
// for one and several blocks, quantized and extreme activations.
func TestDotQ8_0VecDotRowsLevelsMatchGeneric(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, level := range simdLevels() {
		restore := setSIMD(level)
		for _, nb := range []int{1, 2, 3, 24} {
			for _, rows := range []int{1, 5, 16, 33} {
				rb := 34 * nb
				w := make([]byte, rb*rows)
				for r := range rows {
					for b := range nb {
						quantQ8_0(w[r*rb+34*b:r*rb+34*(b+1)], randRow(rng, qk0, math.Pow(10, float64(rng.IntN(6)-3))))
					}
				}
				for _, mode := range []string{"quantized", "random", "max", "min"} {
					y := q8Acts(rng, Q8_0, nb, mode, false)
					got := make([]float32, rows)
					dotQ8_0VecDotRows(got, w, y, rb)
					for r := range rows {
						want := dotQ8_0VecDotGeneric(w[r*rb:(r+1)*rb], y)
						if math.Float32bits(got[r]) != math.Float32bits(want) {
							t.Errorf("%s: %d blocks, %d rows, %s: row %d %g, generic %g", level, nb, rows, mode, r, got[r], want)
						}
					}
				}
			}
		}
		restore()
	}
}

// TestDotF32VecDotTailMatchesLlamaCppBits: dotF32VecDotRows gives, on every SIMD
// level, the bits of ggml_vec_dot_f32 in llama.cpp's AVX-512 CPU variant for row
// lengths with a tail past the last multiple of 64 (an F32 LoRA B's rows are all
// tail below rank 64): the tail's first multiple of 8 products rounded, then
// added, the rest fused (f32TailAdd). Both "all rounded" and "all fused" fail.
func TestDotF32VecDotTailMatchesLlamaCppBits(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a C program against llama.cpp; skipped in -short")
	}
	r := rand.New(rand.NewPCG(13, 14))
	for _, cols := range []int{1, 4, 7, 8, 12, 16, 23, 24, 36, 40, 63, 65, 72, 100, 127, 200} {
		const rows = 24
		w := make([]float32, rows*cols)
		x := make([]float32, cols)
		for i := range w {
			w[i] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(6)-3)))
		}
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		want := ggmlref.RunAVX512(t, uint32(F32), rows, cols, 4*cols, w, nil, x).Dots
		data := make([]byte, 4*len(w))
		for i, v := range w {
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
		}
		for _, level := range simdLevels() {
			restore := setSIMD(level)
			got := make([]float32, rows)
			dotF32VecDotRows(got, data, x, 4*cols)
			bad := 0
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					bad++
				}
			}
			if bad > 0 {
				t.Errorf("%d columns, %s: %d of %d rows differ from llama.cpp's bits", cols, level, bad, rows)
			}
			restore()
		}
	}
}
