//go:build !purego

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// kTokenKernels are a K-quant type's AVX2 kernels of 1, 2, 4 and 8 tokens per call,
// the rows function that mixes them, the one-token kernel and the Go reference.
type kTokenKernels struct {
	typ   Type
	one   func(x, y *byte, nb int) float32
	many  map[int]func(x, y *byte, nb, stride int, out *float32) // 2, 4, 8 tokens
	rows  func(out []float32, row []byte, y []q8KBlock, nb int)
	row   func(row []byte, y []q8KBlock) float32
	ref   func(row []byte, y []q8KBlock) float32
	order string // what the reference's float order is, for the test's name
}

var kTokens = []kTokenKernels{
	{Q4_K, dotQ4KAVX2, map[int]func(x, y *byte, nb, stride int, out *float32){2: dotQ4KAVX2x2, 4: dotQ4KAVX2x4, 8: dotQ4KAVX2x8},
		dotQ4KRows, dotQ4KRow, dotQ4KRowGeneric, "the one-token order"},
	{Q6_K, dotQ6KAVX2, map[int]func(x, y *byte, nb, stride int, out *float32){2: dotQ6KAVX2x2, 4: dotQ6KAVX2x4, 8: dotQ6KAVX2x8},
		dotQ6KRows, dotQ6KRow, dotQ6KRowGeneric, "llama.cpp's float order"},
	{Q5_K, dotQ5KAVX2, map[int]func(x, y *byte, nb, stride int, out *float32){2: dotQ5KAVX2x2},
		dotQ5KRows, dotQ5KRow, dotQ5KRowGeneric, "llama.cpp's float order"},
	{Q3_K, dotQ3KAVX2, map[int]func(x, y *byte, nb, stride int, out *float32){2: dotQ3KAVX2x2, 4: dotQ3KAVX2x4},
		dotQ3KRows, dotQ3KRow, dotQ3KRowGeneric, "llama.cpp's float order"},
}

// q6KBenchRow: one random Q6_K row of 2048 columns and nTok tokens' activations,
// the fixture of the Q6_K token-kernel benchmarks.
type q6KBenchRow struct {
	row        []byte
	a          acts
	out        []float32
	nb, stride int
	y          func(t int) *byte
}

func newQ6KBenchRow(nTok int) *q6KBenchRow {
	r := rand.New(rand.NewPCG(5, 8))
	const cols = 2048
	f := &q6KBenchRow{nb: cols / qkK, out: make([]float32, nTok), row: make([]byte, Q6_K.RowBytes(cols))}
	f.a.prepare(Q6_K, randRow(r, cols*nTok, 1), nTok, cols)
	QuantizeRow(f.row, Q6_K, randRow(r, cols, 0.1))
	f.stride = f.nb * int(unsafe.Sizeof(f.a.q8k[0]))
	f.y = func(t int) *byte { return (*byte)(unsafe.Pointer(&f.a.q8k[t*f.nb])) }
	return f
}

// BenchmarkKTokensAVX512: BenchmarkKTokens for Q6_K's AVX-512 kernels of 1, 4,
// 8 and 16 tokens per call (dotQ6KAVX512, x4, x8, x16, and x16p on the
// activations by pairs).
func BenchmarkKTokensAVX512(b *testing.B) {
	if !useAVX512 {
		b.Skip("no AVX-512")
	}
	const nTok = 16
	f := newQ6KBenchRow(nTok)
	row, a, out, nb, stride, y := f.row, &f.a, f.out, f.nb, f.stride, f.y
	for _, T := range []int{1, 4, 8, 16, 17} { // 17: x16p, one call
		name := fmt.Sprintf("Q6_K/x%d", T)
		if T == 17 {
			name = "Q6_K/x16p"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(row) * nTok))
			c0 := cpuSeconds()
			for b.Loop() {
				for t := 0; t < nTok; t += T {
					switch T {
					case 1:
						out[t] = dotQ6KAVX512(&row[0], y(t), nb)
					case 4:
						dotQ6KAVX512x4(&row[0], y(t), nb, stride, &out[t])
					case 8:
						dotQ6KAVX512x8(&row[0], y(t), nb, stride, &out[t])
					case 16:
						dotQ6KAVX512x16(&row[0], y(t), nb, stride, &out[t])
					default:
						dotQ6KAVX512x16p(&row[0], &a.q6P[0], nb, nb*q6KPairBytes, &out[t])
					}
				}
			}
			b.ReportMetric((cpuSeconds()-c0)*1e9/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkQ6KNineTokens: one Q6_K row of 2048 columns against 9 tokens (a k =
// 8 verification step's positions) through dotQ6KAVX512x9 and through x8 and
// the one-token kernel (what dotQ6KRows did before x9), CPU time per row.
func BenchmarkQ6KNineTokens(b *testing.B) {
	if !useAVX512 {
		b.Skip("no AVX-512")
	}
	f := newQ6KBenchRow(9)
	row, out, nb, stride, y := f.row, f.out, f.nb, f.stride, f.y
	for _, form := range []string{"x8+1", "x9"} {
		b.Run(form, func(b *testing.B) {
			c0 := cpuSeconds()
			for b.Loop() {
				if form == "x9" {
					dotQ6KAVX512x9(&row[0], y(0), nb, stride, &out[0])
				} else {
					dotQ6KAVX512x8(&row[0], y(0), nb, stride, &out[0])
					out[8] = dotQ6KAVX512(&row[0], y(8), nb)
				}
			}
			b.ReportMetric((cpuSeconds()-c0)*1e9/float64(b.N), "cpu-ns/op")
		})
	}
}

// TestQ6KNineTokensKernel: dotQ6KAVX512x9 gives each of its 9 tokens the
// one-token kernel's bits (dotQ6KRow) and writes only out[0:9], for random,
// extreme and quantized weights and activations (the odd token fills both halves
// of its pair's registers: a slip there puts another token's lanes in it).
func TestQ6KNineTokensKernel(t *testing.T) {
	requireSIMD(t, "avx512")
	const guard = -12345.5
	r := rand.New(rand.NewPCG(91, 92))
	for _, nb := range []int{1, 2, 5, 8} {
		for _, wm := range []string{"quantized", "random", "0xff", "0x00"} {
			for _, am := range []string{"quantized", "random", "min", "max"} {
				row := weightRow(r, Q6_K, nb, wm, false)
				y := q8KActs(r, 9*nb, am, false)
				buf := make([]float32, 11)
				for i := range buf {
					buf[i] = guard
				}
				stride := nb * int(unsafe.Sizeof(y[0]))
				dotQ6KAVX512x9(&row[0], (*byte)(unsafe.Pointer(&y[0])), nb, stride, &buf[1])
				if buf[0] != guard || buf[10] != guard {
					t.Fatalf("nb %d weights %s acts %s: wrote outside out[0:9]: %v", nb, wm, am, buf)
				}
				for tok := range 9 {
					want := dotQ6KRow(row, y[tok*nb:(tok+1)*nb])
					if got := buf[1+tok]; math.Float32bits(got) != math.Float32bits(want) {
						t.Errorf("nb %d weights %s acts %s: token %d: %v, one-token kernel %v", nb, wm, am, tok, got, want)
					}
				}
			}
		}
	}
}

// BenchmarkKTokens measures one Q4_K, Q6_K or Q3_K row of 2048 columns against 8 tokens
// through the AVX2 kernels of 1, 2, 4 and 8 tokens per call (dotQ4KAVX2, x2, x4,
// x8 and Q6_K's): what a verification step's 8-token products pay per weight row.
// The bytes are the row's, once per token.
func BenchmarkKTokens(b *testing.B) {
	if !useAVX2 {
		b.Skip("no AVX2")
	}
	for _, k := range kTokens {
		r := rand.New(rand.NewPCG(5, 8))
		const cols, nTok = 2048, 8
		nb := cols / qkK
		var a acts
		a.prepare(k.typ, randRow(r, cols*nTok, 1), nTok, cols)
		row := make([]byte, k.typ.RowBytes(cols))
		QuantizeRow(row, k.typ, randRow(r, cols, 0.1))
		out := make([]float32, nTok)
		stride := nb * int(unsafe.Sizeof(a.q8k[0]))
		y := func(t int) *byte { return (*byte)(unsafe.Pointer(&a.q8k[t*nb])) }
		for _, T := range []int{1, 2, 4, 8} {
			if T > 1 && k.many[T] == nil {
				continue
			}
			b.Run(fmt.Sprintf("%v/x%d", k.typ, T), func(b *testing.B) {
				b.SetBytes(int64(len(row) * nTok))
				c0 := cpuSeconds()
				for b.Loop() {
					for t := 0; t < nTok; t += T {
						if T == 1 {
							out[t] = k.one(&row[0], y(t), nb)
						} else {
							k.many[T](&row[0], y(t), nb, stride, &out[t])
						}
					}
				}
				b.ReportMetric((cpuSeconds()-c0)*1e9/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// TestKTokensRowsEveryCount: dotQ4KRows, dotQ6KRows, dotQ5KRows and dotQ3KRows for
// every token count 1-40 (each mix of the kernels of 16 (Q6_K's and Q5_K's
// AVX-512), 8 (not Q3_K's or Q5_K's AVX2), 4 (not Q5_K's AVX2), 2 and 1
// tokens, and the 16-, 8- and 4-token kernels over the last tokens
// again), on AVX2 and on AVX-512 (Q3_K's AVX-512 kernels of 8 and 4 tokens), give
// every token the one-token kernel's bits and the reference's, and write nothing
// around their outputs.
func TestKTokensRowsEveryCount(t *testing.T) {
	const guard = -12345.5
	for _, level := range []string{"avx2", "avx512", "avx512vbmi"} {
		t.Run(level, func(t *testing.T) {
			requireSIMD(t, level)
			defer setSIMD(level)() // the AVX2 kernels also where the CPU has AVX-512
			for _, k := range kTokens {
				r := rand.New(rand.NewPCG(6, 9))
				for _, nb := range []int{1, 2, 5} {
					row := weightRow(r, k.typ, nb, "random", false)
					y := q8KActs(r, nb*40, "random", false)
					for n := 1; n <= 40; n++ {
						buf := make([]float32, n+2)
						for i := range buf {
							buf[i] = guard
						}
						k.rows(buf[1:n+1], row, y, nb)
						if buf[0] != guard || buf[n+1] != guard {
							t.Errorf("%v nb %d, %d tokens: guard overwritten: %v", k.typ, nb, n, buf)
						}
						for tok := range n {
							yt := y[tok*nb : (tok+1)*nb]
							want := k.row(row, yt)
							if got := buf[1+tok]; math.Float32bits(got) != math.Float32bits(want) {
								t.Errorf("%v nb %d, %d tokens: token %d: %v, one-token kernel %v", k.typ, nb, n, tok, got, want)
							}
							if ref := k.ref(row, yt); ref != want {
								t.Errorf("%v nb %d, %d tokens: token %d: %v, reference (%s) %v", k.typ, nb, n, tok, want, k.order, ref)
							}
						}
					}
				}
			}
		})
	}
}

// BenchmarkQ6KTokensLevels: MatMul of 128 Q6_K rows × 2048 columns against 9
// tokens (a k = 8 verification step) and 128 (a prompt), one thread, with
// the AVX2 kernels of 8, 4 and 2 tokens and with AVX-512's of 8 and 4: CPU time
// per call (cpu-us/op).
func BenchmarkQ6KTokensLevels(b *testing.B) {
	if !useAVX512 {
		b.Skip("no AVX-512")
	}
	defer SetThreads(SetThreads(1))
	r := rand.New(rand.NewPCG(63, 64))
	const rows, cols = 128, 2048
	w := Matrix{Type: Q6_K, Rows: rows, Cols: cols, Data: make([]byte, rows*Q6_K.RowBytes(cols))}
	for i := 0; i < rows; i++ {
		QuantizeRow(w.Row(i), Q6_K, randRow(r, cols, 0.1))
	}
	x := randRow(r, 128*cols, 1)
	dst := make([]float32, 128*rows)
	for _, n := range []int{9, 128} {
		for _, level := range []string{"avx2", "avx512"} {
			b.Run(fmt.Sprintf("t%d/%s", n, level), func(b *testing.B) {
				defer setSIMD(level)()
				c0 := cpuSeconds()
				for b.Loop() {
					MatMul(dst, w, x, n)
				}
				b.ReportMetric((cpuSeconds()-c0)*1e6/float64(b.N), "cpu-us/op")
			})
		}
	}
}

// TestQ6KPairsEveryCount: with AVX-512, acts.prepare lays out Q6_K's activations
// by pairs of tokens for 16 tokens or more (acts.q6P), and dotRowsAt through
// dotQ6KAVX512x16p (and dotQ6KRows for what it leaves) gives every token
// dotQ6KRow's bits, for every token count 1-40 and first tokens even and odd,
// writing nothing around its outputs; on AVX2 there is no q6P.
func TestQ6KPairsEveryCount(t *testing.T) {
	const guard = -12345.5
	for _, level := range []string{"avx2", "avx512", "avx512vbmi"} {
		t.Run(level, func(t *testing.T) {
			requireSIMD(t, level)
			defer setSIMD(level)()
			r := rand.New(rand.NewPCG(7, 10))
			for _, nb := range []int{1, 2, 5} {
				cols := nb * qkK
				row := weightRow(r, Q6_K, nb, "random", false)
				for rows := 1; rows <= 40; rows++ {
					var a acts
					a.prepare(Q6_K, randRow(r, rows*cols, 1), rows, cols)
					if want := useAVX512 && rows >= 16; (len(a.q6P) > 0) != want {
						t.Fatalf("nb %d, %d rows: q6P laid out %v, want %v", nb, rows, len(a.q6P) > 0, want)
					}
					for _, t0 := range []int{0, 1, 2, 3, 6} {
						for n := 1; t0+n <= rows; n++ {
							buf := make([]float32, n+2)
							for i := range buf {
								buf[i] = guard
							}
							dotRowsAt(Q6_K, row, &a, t0, buf[1:n+1])
							if buf[0] != guard || buf[n+1] != guard {
								t.Errorf("nb %d, %d rows, tokens %d+%d: guard overwritten", nb, rows, t0, n)
							}
							for i := range n {
								tok := t0 + i
								want := dotQ6KRow(row, a.q8k[tok*nb:(tok+1)*nb])
								if got := buf[1+i]; math.Float32bits(got) != math.Float32bits(want) {
									t.Errorf("nb %d, %d rows, tokens %d+%d: token %d: %v, one-token kernel %v", nb, rows, t0, n, tok, got, want)
								}
							}
						}
					}
				}
			}
		})
	}
}
