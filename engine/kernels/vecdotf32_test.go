package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lmlite/lmlite/internal/ggmlref"
)

// TestVecDotF32MatchesLlamaCppBits: MatMulVecDotF32 gives, on every SIMD level and
// for one token or several, the bits of ggml_vec_dot_f32 in llama.cpp's AVX-512 CPU
// variant (what its AVX-512 builds decode with) for every row, at row lengths that
// are multiples of 64; MatMul's F32 order, which the routers took before (issue 32),
// differed in most rows (logged).
func TestVecDotF32MatchesLlamaCppBits(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a C program against llama.cpp; skipped in -short")
	}
	r := rand.New(rand.NewPCG(32, 64))
	for _, cols := range []int{64, 128, 2048} {
		const rows, nTok = 48, 3
		w := make([]float32, rows*cols)
		x := make([]float32, nTok*cols)
		for i := range w {
			w[i] = float32(r.NormFloat64() * 0.05)
		}
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		var want []float32
		for tok := 0; tok < nTok; tok++ {
			want = append(want, ggmlref.RunAVX512(t, uint32(F32), rows, cols, 4*cols, w, nil, x[tok*cols:(tok+1)*cols]).Dots...)
		}
		data := make([]byte, 4*len(w))
		for i, v := range w {
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
		}
		m := Matrix{Type: F32, Rows: rows, Cols: cols, Data: data}
		count := func(dst []float32) (bad int) {
			for i, v := range dst {
				if math.Float32bits(v) != math.Float32bits(want[i]) {
					bad++
				}
			}
			return bad
		}
		for _, level := range simdLevels() {
			restore := setSIMD(level)
			for _, n := range []int{1, nTok} {
				dst := make([]float32, n*rows)
				MatMulVecDotF32(dst, m, x[:n*cols], n)
				if bad := count(dst); bad > 0 {
					t.Errorf("%d columns, %s, %d tokens: %d of %d products differ from llama.cpp's bits", cols, level, n, bad, len(dst))
				}
			}
			dst := make([]float32, nTok*rows)
			MatMul(dst, m, x, nTok)
			t.Logf("%d columns, %s: MatMul's F32 order differs from llama.cpp's decoding bits in %d of %d products", cols, level, count(dst), len(dst))
			restore()
		}
	}
}

// BenchmarkRouterF32: a mixture of experts' router (64 experts × 2048, F32) on one
// thread, for one token and for 128, through MatMul and MatMulVecDotF32, as CPU
// time (cpu-us/op).
func BenchmarkRouterF32(b *testing.B) {
	defer SetThreads(SetThreads(1))
	r := rand.New(rand.NewPCG(3, 4))
	const rows, cols = 64, 2048
	m := Matrix{Type: F32, Rows: rows, Cols: cols, Data: make([]byte, rows*cols*4)}
	for i := 0; i < rows; i++ {
		fillRow(r, F32, m.Row(i), 0.1)
	}
	for _, nTok := range []int{1, 128} {
		x := randRow(r, nTok*cols, 1)
		dst := make([]float32, nTok*rows)
		for _, k := range []struct {
			name string
			f    func([]float32, Matrix, []float32, int)
		}{{"MatMul", MatMul}, {"VecDotF32", MatMulVecDotF32}} {
			b.Run(fmt.Sprintf("%s/tokens%d", k.name, nTok), func(b *testing.B) {
				t0 := cpuSeconds()
				for b.Loop() {
					k.f(dst, m, x, nTok)
				}
				b.ReportMetric((cpuSeconds()-t0)*1e6/float64(b.N), "cpu-us/op")
			})
		}
	}
}
