package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lmlite/lmlite/internal/ggmlref"
)

// TestAgainstLlamaCpp quantizes rows with llama.cpp's own quantizer (ggml's
// quantize_chunk, from the npm peer's libraries), or for the lattice types (whose
// quantizers take tens of seconds to initialise) makes random blocks with sane
// scales, 256 rows of them so that every grid entry is met, and checks, for every
// quantized weight type, that DequantizeRow decodes them to llama.cpp's values bit
// for bit,
// and that MatMul's dot products (our activation quantization and integer sums)
// agree with llama.cpp's CPU backend (its vec_dot_type quantization and vec_dot) to
// float rounding: a different activation rounding or a misread scale shows far
// above the bound.
func TestAgainstLlamaCpp(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a C program against llama.cpp; skipped in -short")
	}
	for _, typ := range SupportedTypes() {
		if typ.BlockSize() == 1 {
			continue
		}
		t.Run(typ.String(), func(t *testing.T) {
			rows, cols := 8, 1024
			r := rand.New(rand.NewPCG(31, uint64(typ)))
			var w []float32
			var raw []byte
			if CanQuantize(typ) {
				w = randRow(r, rows*cols, 0.05)
				for i := range w {
					w[i] += 0.01
				}
			} else {
				rows = 256
				raw = randomBlocks(r, typ, rows*cols/qkK)
			}
			x := randRow(r, cols, 1)
			g := ggmlref.Run(t, uint32(typ), rows, cols, typ.RowBytes(cols), w, raw, x)
			m := Matrix{Type: typ, Rows: rows, Cols: cols, Data: g.Enc}
			y := make([]float32, cols)
			for i := 0; i < rows; i++ {
				DequantizeRow(y, typ, m.Row(i))
				for j, v := range y {
					if want := g.Deq[i*cols+j]; math.Float32bits(v) != math.Float32bits(want) {
						t.Fatalf("row %d element %d decodes to %v, llama.cpp %v", i, j, v, want)
					}
				}
			}
			dst := make([]float32, rows)
			MatMul(dst, m, x, 1)
			var a acts
			a.prepare(typ, x, 1, cols)
			xq := actFloats(&a, 0)
			var worst float64
			for i := 0; i < rows; i++ {
				var norm float64
				for j, v := range g.Deq[i*cols : (i+1)*cols] {
					norm += math.Abs(float64(v) * float64(xq[j]))
				}
				e := math.Abs(float64(dst[i])-float64(g.Dots[i])) / norm
				worst = max(worst, e)
				if e > 1e-6 {
					t.Errorf("row %d: dot %v, llama.cpp %v (relative %.3g)", i, dst[i], g.Dots[i], e)
				}
			}
			t.Logf("%v: worst relative difference from llama.cpp's dot product %.3g", typ, worst)
		})
	}
}

// randomBlocks returns n random blocks of a lattice type with a positive f16 scale
// between 1/8 and 1/4.
func randomBlocks(r *rand.Rand, typ Type, n int) []byte {
	bb := typ.BlockBytes()
	b := make([]byte, n*bb)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	for i := 0; i < n; i++ {
		blk := b[i*bb : (i+1)*bb]
		d := uint16(0x3000 | r.IntN(0x400))
		if typ == IQ1_M { // the f16 is the top nibbles of the four scale words
			for k := 0; k < 4; k++ {
				blk[48+2*k+1] = blk[48+2*k+1]&0x0f | byte(d>>(4*k)&0xf)<<4
			}
			continue
		}
		put16(blk, d)
	}
	return b
}

// TestSwiGLUMatchesLlamaCpp: SwiGLU gives the bits of llama.cpp's SwiGLU op
// (ggml_swiglu_split on its CPU backend, ggml_v_silu with ggml_v_expf's arithmetic)
// on gates across the exponential's range, on every SIMD level. A different
// exponential (within an ulp or two of e**x, but not ggml's) shows as single-bit
// differences that the dot products' 8-bit activation rounding can turn into
// visible drift on some models (issue 32).
func TestSwiGLUMatchesLlamaCpp(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a C program against llama.cpp; skipped in -short")
	}
	r := rand.New(rand.NewPCG(32, 1))
	const n = 4096
	gate, up := make([]float32, n), make([]float32, n)
	for i := range gate {
		switch i % 4 {
		case 0:
			gate[i] = float32(r.NormFloat64())
		case 1:
			gate[i] = float32(r.NormFloat64() * 8)
		case 2:
			gate[i] = float32((r.Float64() - 0.5) * 220) // both ends, past the limits
		default:
			gate[i] = float32(r.NormFloat64() * 1e-3)
		}
		up[i] = float32(r.NormFloat64())
	}
	want := ggmlref.SwiGLU(t, gate, up)
	for _, level := range simdLevels() {
		restore := setSIMD(level)
		got := make([]float32, n)
		SwiGLU(got, gate, up)
		restore()
		bad := 0
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				if bad < 5 {
					t.Errorf("%s: silu(%v)·%v = %v, llama.cpp %v", level, gate[i], up[i], got[i], want[i])
				}
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d of %d values differ from llama.cpp's", level, bad, n)
		}
	}
}
