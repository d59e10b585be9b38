//go:build !purego

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// tileCase is a tile kernel with its shape and the reference it must match.
type tileCase struct {
	name string
	typ  Type
	R, T int
	k    tileKernel
	ref  func([]byte, []q8KBlock) float32
}

var tileCases = []tileCase{
	{"Q4_K r8t1", Q4_K, 8, 1, dotQ4KAVX512r8t1, dotQ4KRowGeneric},
	{"Q4_K r1t16", Q4_K, 1, 16, dotQ4KAVX512r1t16, dotQ4KRowGeneric},
	{"Q4_K r1t8", Q4_K, 1, 8, dotQ4KAVX512r1t8, dotQ4KRowGeneric},
	{"Q4_K r1t4", Q4_K, 1, 4, dotQ4KAVX512r1t4, dotQ4KRowGeneric},
	{"Q4_K r4t4", Q4_K, 4, 4, dotQ4KAVX512r4t4, dotQ4KRowGeneric},
}

// TestTileKernels: every output of a tile kernel is the Go reference's bits, for
// rows and tokens at odd strides, extreme weights and activations, and nothing
// around the outputs is written.
func TestTileKernels(t *testing.T) {
	requireSIMD(t, "avx512")
	r := rand.New(rand.NewPCG(41, 42))
	const guard = -12345.5
	for _, c := range tileCases {
		bb := c.typ.BlockBytes()
		for _, nb := range []int{1, 2, 3, 8} {
			for _, wm := range []string{"quantized", "random", "0xff", "0x80"} {
				for _, am := range []string{"quantized", "random", "min", "max"} {
					name := fmt.Sprintf("%s nb %d weights %s acts %s", c.name, nb, wm, am)
					rb := nb*bb + 3 // rows apart by more than their bytes
					w := make([]byte, c.R*rb)
					for i := 0; i < c.R; i++ {
						copy(w[i*rb:], weightRow(r, c.typ, nb, wm, false))
					}
					tokBlocks := nb + 1 // tokens apart by more than their blocks
					y := q8KActs(r, c.T*tokBlocks, am, false)
					ydT := make([]float32, nb*c.T)
					for b := 0; b < nb; b++ {
						for tk := 0; tk < c.T; tk++ {
							ydT[b*c.T+tk] = y[tk*tokBlocks+b].d
						}
					}
					os := c.R + 2
					out := make([]float32, c.T*os+1)
					for i := range out {
						out[i] = guard
					}
					c.k(&w[0], rb, (*byte)(unsafe.Pointer(&y[0])), tokBlocks*int(unsafe.Sizeof(y[0])), &ydT[0], 4*c.T, nb, &out[1], os)
					for i, v := range out {
						tk, rr := (i-1)/os, (i-1)%os
						if i == 0 || rr >= c.R {
							if v != guard {
								t.Fatalf("%s: wrote out[%d]", name, i)
							}
							continue
						}
						want := c.ref(w[rr*rb:rr*rb+nb*bb], y[tk*tokBlocks:tk*tokBlocks+nb])
						if math.Float32bits(v) != math.Float32bits(want) {
							t.Fatalf("%s: row %d token %d: %v, reference %v", name, rr, tk, v, want)
						}
					}
				}
			}
		}
	}
}

func BenchmarkTileKernels(b *testing.B) {
	r := rand.New(rand.NewPCG(43, 44))
	const cols = 2048
	for _, c := range tileCases {
		nb := cols / c.typ.BlockSize()
		rb := nb * c.typ.BlockBytes()
		w := make([]byte, c.R*rb)
		for i := 0; i < c.R; i++ {
			QuantizeRow(w[i*rb:(i+1)*rb], c.typ, randRow(r, cols, 0.1))
		}
		y := q8KActs(r, c.T*nb, "quantized", false)
		ydT := make([]float32, nb*c.T)
		out := make([]float32, c.R*c.T)
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(c.R * c.T * rb)) // weight bytes per (row, token) pair
			for b.Loop() {
				c.k(&w[0], rb, (*byte)(unsafe.Pointer(&y[0])), nb*int(unsafe.Sizeof(y[0])), &ydT[0], 4*c.T, nb, &out[0], c.R)
			}
		})
	}
}

// TestOuterKernels: the Q8_0, Q4_0, Q5_0 and IQ4_NL outer-product tiles give the
// reference's bits for every row and token, and write only their outputs.
func TestOuterKernels(t *testing.T) {
	requireSIMD(t, "avx512")
	r := rand.New(rand.NewPCG(45, 46))
	const guard = -12345.5
	for _, typ := range []Type{Q8_0, Q4_0, Q5_0, IQ4_NL} {
		ks := outerKernels(typ)
		for i, T := range []int{16, 8, 4, 1} {
			if ks[i] == nil {
				continue
			}
			for _, nb := range []int{1, 2, 3, 8} {
				for _, wm := range []string{"quantized", "random", "0xff", "0x80"} {
					for _, am := range []string{"quantized", "random", "max", "min"} {
						name := fmt.Sprintf("%v t%d nb %d weights %s acts %s", typ, T, nb, wm, am)
						rb := nb*typ.BlockBytes() + 5
						w := make([]byte, 16*rb)
						for i := 0; i < 16; i++ {
							copy(w[i*rb:], weightRow(r, typ, nb, wm, false))
						}
						tokBlocks := nb + 1
						y := q8Acts(r, typ, T*tokBlocks, am, false)
						yp := (*byte)(unsafe.Pointer(&y[0]))
						os := 19
						out := make([]float32, T*os+1)
						for i := range out {
							out[i] = guard
						}
						ks[i](&w[0], rb, yp, tokBlocks*int(unsafe.Sizeof(y[0])), nb, &out[1], os)
						for j, v := range out {
							tk, rr := (j-1)/os, (j-1)%os
							if j == 0 || rr >= 16 {
								if v != guard {
									t.Fatalf("%s: wrote out[%d]", name, j)
								}
								continue
							}
							row, yt := w[rr*rb:rr*rb+nb*typ.BlockBytes()], y[tk*tokBlocks:tk*tokBlocks+nb]
							var want float32
							switch typ {
							case Q8_0:
								want = dotQ8_0RowGeneric(row, yt)
							case Q4_0:
								want = dotQ4_0RowGeneric(row, yt)
							case Q5_0:
								want = dotQ5_0RowGeneric(row, yt)
							case IQ4_NL:
								want = dotIQ4NLRowGeneric(row, yt)
							}
							if math.Float32bits(v) != math.Float32bits(want) {
								t.Fatalf("%s: row %d token %d: %v, reference %v", name, rr, tk, v, want)
							}
						}
					}
				}
			}
		}
	}
}

// TestLanesKernels: the Q4_1 and Q5_1 tiles in llama.cpp's 8-lane order (16 rows
// by 2 and 1 tokens) give the reference's bits (dotQ4_1RowGeneric,
// dotQ5_1RowGeneric) for every row and token, for rows and tokens at odd
// strides, extreme weights and activations, and write only their outputs.
func TestLanesKernels(t *testing.T) {
	requireSIMD(t, "avx512")
	r := rand.New(rand.NewPCG(53, 54))
	const guard = -12345.5
	for _, typ := range []Type{Q4_1, Q5_1} {
		ks := lanesKernels(typ)
		for i, T := range []int{2, 1} {
			for _, nb := range []int{1, 2, 3, 8} {
				for _, wm := range []string{"quantized", "random", "0xff", "0x80", "0x00"} {
					for _, am := range []string{"quantized", "random", "max", "min"} {
						name := fmt.Sprintf("%v t%d nb %d weights %s acts %s", typ, T, nb, wm, am)
						bb := typ.BlockBytes()
						rb := nb*bb + 5
						w := make([]byte, 16*rb)
						for i := 0; i < 16; i++ {
							copy(w[i*rb:], weightRow(r, typ, nb, wm, false))
						}
						tokBlocks := nb + 1
						y := q8_1Acts(r, T*tokBlocks, am, false)
						os := 19
						out := make([]float32, T*os+1)
						for i := range out {
							out[i] = guard
						}
						ks[i](&w[0], rb, (*byte)(unsafe.Pointer(&y[0])), tokBlocks*int(unsafe.Sizeof(y[0])), nb, &out[1], os)
						for j, v := range out {
							tk, rr := (j-1)/os, (j-1)%os
							if j == 0 || rr >= 16 {
								if v != guard {
									t.Fatalf("%s: wrote out[%d]", name, j)
								}
								continue
							}
							row, yt := w[rr*rb:rr*rb+nb*bb], y[tk*tokBlocks:tk*tokBlocks+nb]
							want := dotQ4_1RowGeneric(row, yt)
							if typ == Q5_1 {
								want = dotQ5_1RowGeneric(row, yt)
							}
							if math.Float32bits(v) != math.Float32bits(want) {
								t.Fatalf("%s: row %d token %d: %v, reference %v", name, rr, tk, v, want)
							}
						}
					}
				}
			}
		}
	}
}

// TestKOuterKernels: the IQ4_XS and Q2_K outer-product tiles (16 rows by 16, 8
// and 4 tokens; Q2_K's decoding one by 1 token too) give the reference's bits for
// every row and token, for rows and tokens at odd strides, extreme weights and
// activations, and write only their outputs.
func TestKOuterKernels(t *testing.T) {
	requireSIMD(t, "avx512")
	r := rand.New(rand.NewPCG(51, 52))
	const guard = -12345.5
	for _, typ := range []Type{IQ4_XS, Q2_K} {
		ks := kOuterKernels(typ)[:]
		Ts := []int{16, 8, 4}
		if typ == Q2_K {
			ks, Ts = append(ks, dotQ2KAVX512x16t1), append(Ts, 1)
		}
		for i, T := range Ts {
			for _, nb := range []int{1, 2, 3, 8} {
				for _, wm := range []string{"quantized", "random", "0xff", "0x80", "0x00"} {
					for _, am := range []string{"quantized", "random", "max", "min"} {
						name := fmt.Sprintf("%v t%d nb %d weights %s acts %s", typ, T, nb, wm, am)
						bb := typ.BlockBytes()
						rb := nb*bb + 5
						w := make([]byte, 16*rb)
						for i := 0; i < 16; i++ {
							copy(w[i*rb:], weightRow(r, typ, nb, wm, false))
						}
						tokBlocks := nb + 1
						y := q8KActs(r, T*tokBlocks, am, false)
						os := 19
						out := make([]float32, T*os+1)
						for i := range out {
							out[i] = guard
						}
						ks[i](&w[0], rb, (*byte)(unsafe.Pointer(&y[0])), tokBlocks*int(unsafe.Sizeof(y[0])), nb, &out[1], os)
						for j, v := range out {
							tk, rr := (j-1)/os, (j-1)%os
							if j == 0 || rr >= 16 {
								if v != guard {
									t.Fatalf("%s: wrote out[%d]", name, j)
								}
								continue
							}
							row, yt := w[rr*rb:rr*rb+nb*bb], y[tk*tokBlocks:tk*tokBlocks+nb]
							var want float32
							if typ == Q2_K {
								want = dotQ2KRowGeneric(row, yt)
							} else {
								want = dotIQ4XSRowGeneric(row, yt)
							}
							if math.Float32bits(v) != math.Float32bits(want) {
								t.Fatalf("%s: row %d token %d: %v, reference %v", name, rr, tk, v, want)
							}
						}
					}
				}
			}
		}
	}
}

func BenchmarkOuterKernels(b *testing.B) {
	r := rand.New(rand.NewPCG(47, 48))
	const cols = 2048
	for _, typ := range []Type{Q8_0, Q4_0} {
		ks := outerKernels(typ)
		nb := cols / qk0
		rb := typ.RowBytes(cols)
		w := make([]byte, 16*rb)
		for i := 0; i < 16; i++ {
			QuantizeRow(w[i*rb:(i+1)*rb], typ, randRow(r, cols, 0.1))
		}
		var a acts
		a.prepare(typ, randRow(r, 16*cols, 1), 16, cols)
		out := make([]float32, 16*16)
		for i, T := range []int{16, 1} {
			k := ks[3*i]
			b.Run(fmt.Sprintf("%v/t%d", typ, T), func(b *testing.B) {
				b.SetBytes(int64(16 * T * rb)) // weight bytes per (row, token) pair
				for b.Loop() {
					k(&w[0], rb, (*byte)(unsafe.Pointer(&a.q8[0])), nb*int(unsafe.Sizeof(q8Block{})), nb, &out[0], 16)
				}
			})
		}
	}
}

// TestMatMulLevels: MatMul gives the same bits on every assembly path (the tiles
// with their row and token remainders, the AVX2 kernels), and for the quantized
// types the reference's bits, for shapes that fill no tile exactly.
func TestMatMulLevels(t *testing.T) {
	r := rand.New(rand.NewPCG(49, 50))
	const rows, cols = 53, 768
	for _, typ := range weightTypes {
		w := Matrix{Type: typ, Rows: rows, Cols: cols, Data: make([]byte, rows*typ.RowBytes(cols))}
		for i := 0; i < rows; i++ {
			fillRow(r, typ, w.Row(i), 0.1)
		}
		for _, nTok := range []int{1, 3, 5, 16, 37} {
			x := randRow(r, nTok*cols, 1)
			results := map[string][]float32{}
			for _, level := range simdLevels() {
				restore := setSIMD(level)
				dst := make([]float32, nTok*rows)
				MatMul(dst, w, x, nTok)
				results[level] = dst
				restore()
			}
			exact := typ == Q8_0 || typ == Q4_0 || typ == Q5_0 || typ == IQ4_NL || typ == IQ4_XS || typ == Q4_1 || typ == Q5_1 || typ == Q2_K || typ == Q3_K || typ == Q4_K || typ == Q5_K || typ == Q6_K || typ == TQ1_0 || typ == TQ2_0 ||
				typ == IQ2_XXS || typ == IQ2_XS || typ == IQ2_S || typ == IQ3_XXS || typ == IQ3_S || typ == IQ1_S || typ == IQ1_M
			for level, got := range results {
				if level == "generic" && !exact {
					continue
				}
				want := results["avx2"]
				if exact {
					want = results["generic"]
				}
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%v, %d tokens, %s: output %d (token %d row %d) = %v, want %v", typ, nTok, level, i, i/rows, i%rows, got[i], want[i])
					}
				}
			}
		}
	}
}

// TestQ4KTile16m: the 16-token Q4_K kernel that takes the mins' products from
// the transposed bsums gives the reference's bits for every token, at odd
// strides and extreme values, and writes only its outputs.
func TestQ4KTile16m(t *testing.T) {
	requireSIMD(t, "avx512")
	testQ4KTileTokens(t, nil, 16)
}

// TestQ4KTilePacked checks the VNNI kernels on permuted quants (q8kP) that pack
// two tokens' accumulators (dotQ4KAVX512r1t2p … t16p: a verification step's
// positions and a prompt's 16-token chunks) against the one-token reference for
// every count, at odd strides and extreme values; they write nothing past their
// last token.
func TestQ4KTilePacked(t *testing.T) {
	requireSIMD(t, "avx512vbmi")
	for T := 2; T <= 16; T++ {
		testQ4KTileTokens(t, q4KVNNIp[T], T)
	}
}

// TestQ4KTilePackedTwoRows checks the two-row VNNI kernels (dotQ4KAVX512r2t5p
// … t9p) like TestQ4KTilePacked: two different rows at an odd stride, every
// output (row i of token t at out[t·os + i]) with dotQ4KRowGeneric's bits on
// its own row and token, nothing written between or past them (a kernel that
// mixes up the rows' accumulators, scales or pointers fails here).
func TestQ4KTilePackedTwoRows(t *testing.T) {
	requireSIMD(t, "avx512vbmi")
	r := rand.New(rand.NewPCG(53, 54))
	const guard = -12345.5
	for T := 5; T < len(q4KVNNIp2); T++ {
		for _, nb := range []int{1, 2, 3, 8} {
			for _, wm := range []string{"quantized", "random", "0xff", "0x80"} {
				for _, am := range []string{"quantized", "random", "min", "max"} {
					name := fmt.Sprintf("%d tokens, nb %d weights %s acts %s", T, nb, wm, am)
					rb := nb*Q4_K.BlockBytes() + 5
					w := make([]byte, 2*rb)
					copy(w, weightRow(r, Q4_K, nb, wm, false))
					copy(w[rb:], weightRow(r, Q4_K, nb, "random", false))
					const yds = 19
					y := q8KActs(r, yds*nb, am, false)
					ydT := make([]float32, nb*yds)
					for b := 0; b < nb; b++ {
						for tk := 0; tk < yds; tk++ {
							ydT[b*yds+tk] = y[tk*nb+b].d
						}
					}
					bsT := make([]int32, 4*nb*yds)
					transposeBsums(bsT, y, nb, yds, yds)
					perm := make([]int8, yds*nb*qkK)
					for i := range yds * nb {
						permuteQ8K(perm[i*qkK:(i+1)*qkK], &y[i].qs)
					}
					const t0, os = 2, 3
					out := make([]float32, 16*os+1)
					for i := range out {
						out[i] = guard
					}
					q4KVNNIp2[T](&w[0], rb, (*byte)(unsafe.Pointer(&perm[t0*nb*qkK])), nb*qkK, &ydT[t0], 4*yds, &bsT[t0], 4*yds, nb, &out[1], os)
					for i, v := range out {
						tk, row := (i-1)/os, (i-1)%os
						if i == 0 || row > 1 || tk >= T {
							if v != guard {
								t.Fatalf("%s: wrote out[%d]", name, i)
							}
							continue
						}
						want := dotQ4KRowGeneric(w[row*rb:row*rb+nb*Q4_K.BlockBytes()], y[(t0+tk)*nb:(t0+tk+1)*nb])
						if math.Float32bits(v) != math.Float32bits(want) {
							t.Fatalf("%s: row %d token %d: %v, reference %v", name, row, tk, v, want)
						}
					}
				}
			}
		}
	}
}

// BenchmarkQ4KVNNIRowPairs: the packed VNNI kernels of 9 tokens (a k = 8
// verification step) one row at a time (r1) and two rows at a time (r2), 64 rows
// of 2048 and of 8192 columns (the 9 tokens' activations: 18 and 73 KiB), one
// thread, as CPU time per Q4_K block (cpu-ns/block).
func BenchmarkQ4KVNNIRowPairs(b *testing.B) {
	if !useVNNI16 {
		b.Skip("no AVX-512 VBMI")
	}
	const rows, T = 64, 9
	for _, cols := range []int{2048, 8192} {
		r := rand.New(rand.NewPCG(43, 44))
		nb := cols / qkK
		rb := nb * Q4_K.BlockBytes()
		w := make([]byte, rows*rb)
		for i := 0; i < rows; i++ {
			QuantizeRow(w[i*rb:(i+1)*rb], Q4_K, randRow(r, cols, 0.1))
		}
		y := q8KActs(r, T*nb, "quantized", false)
		perm := make([]int8, T*nb*qkK)
		for i := range T * nb {
			permuteQ8K(perm[i*qkK:(i+1)*qkK], &y[i].qs)
		}
		ydT := make([]float32, nb*16)
		bsT := make([]int32, 4*nb*16)
		transposeBsums(bsT, y, nb, T, 16)
		out := make([]float32, 16*rows)
		for _, form := range []string{"r1", "r2"} {
			b.Run(fmt.Sprintf("c%d/t%d/%s", cols, T, form), func(b *testing.B) {
				c0 := cpuSeconds()
				for b.Loop() {
					if form == "r1" {
						for i := 0; i < rows; i++ {
							q4KVNNIp[T](&w[i*rb], (*byte)(unsafe.Pointer(&perm[0])), nb*qkK, &ydT[0], 64, &bsT[0], 64, nb, &out[i], rows)
						}
						continue
					}
					for i := 0; i < rows; i += 2 {
						q4KVNNIp2[T](&w[i*rb], rb, (*byte)(unsafe.Pointer(&perm[0])), nb*qkK, &ydT[0], 64, &bsT[0], 64, nb, &out[i], rows)
					}
				}
				b.ReportMetric((cpuSeconds()-c0)*1e9/float64(b.N)/float64(rows*nb), "cpu-ns/block")
			})
		}
	}
}

// testQ4KTileTokens checks the VNNI kernel k of T tokens (nil: the 16-token
// dotQ4KAVX512r1t16m) against dotQ4KRowGeneric, bit for bit.
func testQ4KTileTokens(t *testing.T, k q4KVNNIKernel, T int) {
	vnni := k != nil
	r := rand.New(rand.NewPCG(51, 52))
	const guard = -12345.5
	for _, nb := range []int{1, 2, 3, 8} {
		for _, wm := range []string{"quantized", "random", "0xff", "0x80"} {
			for _, am := range []string{"quantized", "random", "min", "max"} {
				name := fmt.Sprintf("%d tokens, nb %d weights %s acts %s", T, nb, wm, am)
				w := weightRow(r, Q4_K, nb, wm, false)
				const yds = 19 // more tokens than the kernel takes
				y := q8KActs(r, yds*nb, am, false)
				ydT := make([]float32, nb*yds)
				for b := 0; b < nb; b++ {
					for tk := 0; tk < yds; tk++ {
						ydT[b*yds+tk] = y[tk*nb+b].d
					}
				}
				bsT := make([]int32, 4*nb*yds)
				transposeBsums(bsT, y, nb, yds, yds)
				const t0, os = 2, 3
				out := make([]float32, 16*os+1)
				for i := range out {
					out[i] = guard
				}
				perm := make([]int8, yds*nb*qkK)
				for i := range yds * nb {
					permuteQ8K(perm[i*qkK:(i+1)*qkK], &y[i].qs)
				}
				if vnni {
					k(&w[0], (*byte)(unsafe.Pointer(&perm[t0*nb*qkK])), nb*qkK, &ydT[t0], 4*yds, &bsT[t0], 4*yds, nb, &out[1], os)
				} else {
					dotQ4KAVX512r1t16m(&w[0], (*byte)(unsafe.Pointer(&y[t0*nb])), nb*int(unsafe.Sizeof(y[0])), &ydT[t0], 4*yds, &bsT[t0], 4*yds, nb, &out[1], os)
				}
				for i, v := range out {
					tk := (i - 1) / os
					if i == 0 || (i-1)%os != 0 || tk >= T {
						if v != guard {
							t.Fatalf("%s: wrote out[%d]", name, i)
						}
						continue
					}
					want := dotQ4KRowGeneric(w, y[(t0+tk)*nb:(t0+tk+1)*nb])
					if math.Float32bits(v) != math.Float32bits(want) {
						t.Fatalf("%s: token %d: %v, reference %v", name, tk, v, want)
					}
				}
			}
		}
	}
}

func BenchmarkQ4KTile16m(b *testing.B) {
	r := rand.New(rand.NewPCG(43, 44))
	const cols = 2048
	nb := cols / qkK
	w := make([]byte, nb*Q4_K.BlockBytes())
	QuantizeRow(w, Q4_K, randRow(r, cols, 0.1))
	y := q8KActs(r, 16*nb, "quantized", false)
	ydT := make([]float32, nb*16)
	bsT := make([]int32, 4*nb*16)
	transposeBsums(bsT, y, nb, 16, 16)
	out := make([]float32, 16)
	b.SetBytes(int64(16 * len(w)))
	for b.Loop() {
		dotQ4KAVX512r1t16m(&w[0], (*byte)(unsafe.Pointer(&y[0])), nb*int(unsafe.Sizeof(y[0])), &ydT[0], 64, &bsT[0], 64, nb, &out[0], 1)
	}
}

func BenchmarkQ4KTile16v(b *testing.B) {
	if !useVNNI16 {
		b.Skip("no AVX-512 VBMI")
	}
	r := rand.New(rand.NewPCG(43, 44))
	const cols = 2048
	nb := cols / qkK
	w := make([]byte, nb*Q4_K.BlockBytes())
	QuantizeRow(w, Q4_K, randRow(r, cols, 0.1))
	y := q8KActs(r, 16*nb, "quantized", false)
	perm := make([]int8, 16*nb*qkK)
	for i := range 16 * nb {
		permuteQ8K(perm[i*qkK:(i+1)*qkK], &y[i].qs)
	}
	ydT := make([]float32, nb*16)
	bsT := make([]int32, 4*nb*16)
	transposeBsums(bsT, y, nb, 16, 16)
	out := make([]float32, 16)
	b.SetBytes(int64(16 * len(w)))
	for b.Loop() {
		dotQ4KAVX512r1t16p(&w[0], (*byte)(unsafe.Pointer(&perm[0])), nb*qkK, &ydT[0], 64, &bsT[0], 64, nb, &out[0], 1)
	}
}

// BenchmarkQ2KDecode: Q2_K's one-token products in cache (16 rows × 4096
// columns): the 16-row AVX-512 tile against the AVX2 row kernel 16 times.
func BenchmarkQ2KDecode(b *testing.B) {
	if !useAVX512 {
		b.Skip("no AVX-512")
	}
	r := rand.New(rand.NewPCG(53, 54))
	const cols = 4096
	nb := cols / qkK
	rb := Q2_K.RowBytes(cols)
	w := make([]byte, 16*rb)
	for i := 0; i < 16; i++ {
		QuantizeRow(w[i*rb:(i+1)*rb], Q2_K, randRow(r, cols, 0.1))
	}
	y := q8KActs(r, nb, "quantized", false)
	out := make([]float32, 16)
	b.Run("x16t1", func(b *testing.B) {
		b.SetBytes(int64(16 * rb))
		for b.Loop() {
			dotQ2KAVX512x16t1(&w[0], rb, (*byte)(unsafe.Pointer(&y[0])), 0, nb, &out[0], 0)
		}
	})
	b.Run("avx2 row", func(b *testing.B) {
		b.SetBytes(int64(16 * rb))
		for b.Loop() {
			for i := 0; i < 16; i++ {
				out[i] = dotQ2KRow(w[i*rb:(i+1)*rb], y)
			}
		}
	})
}

// TestQx1FourRows: dotQ4_1AVX2r4 and dotQ5_1AVX2r4 (four rows against one token,
// MatMul's decoding path for Q4_1 and Q5_1) give every row the reference's bits,
// for rows at an odd stride, random, extreme and quantized blocks, and write only
// their four outputs.
func TestQx1FourRows(t *testing.T) {
	requireSIMD(t, "avx2")
	r := rand.New(rand.NewPCG(79, 80))
	const guard = -12345.5
	for _, c := range []struct {
		typ       Type
		k         func(x *byte, rb int, y *byte, n int, out *float32)
		reference func(row []byte, y []q8_1Block) float32
	}{
		{Q4_1, dotQ4_1AVX2r4, dotQ4_1RowGeneric},
		{Q5_1, dotQ5_1AVX2r4, dotQ5_1RowGeneric},
	} {
		for _, nb := range []int{1, 3, 24} {
			for _, wm := range []string{"quantized", "random", "0xff", "0x00"} {
				for _, am := range []string{"quantized", "random", "min", "max"} {
					rb := nb*c.typ.BlockBytes() + 5
					w := make([]byte, 4*rb)
					for i := 0; i < 4; i++ {
						copy(w[i*rb:], weightRow(r, c.typ, nb, wm, false))
					}
					y := q8_1Acts(r, nb, am, false)
					out := []float32{guard, 0, 0, 0, 0, guard}
					c.k(&w[0], rb, (*byte)(unsafe.Pointer(&y[0])), nb, &out[1])
					if out[0] != guard || out[5] != guard {
						t.Fatalf("%v nb %d: wrote outside its outputs: %v", c.typ, nb, out)
					}
					for i := 0; i < 4; i++ {
						want := c.reference(w[i*rb:i*rb+nb*c.typ.BlockBytes()], y)
						if math.Float32bits(out[1+i]) != math.Float32bits(want) {
							t.Fatalf("%v nb %d weights %s acts %s: row %d = %v, reference %v", c.typ, nb, wm, am, i, out[1+i], want)
						}
					}
				}
			}
		}
	}
}

// BenchmarkQ4KFewTokens: MatMul of 64 Q4_K rows × 2048 columns against 2-15
// tokens (a verification step's positions), one thread, through q4KRows4's
// 4-row × 4-token kernel (avx512) and the VNNI kernels of each token count
// (avx512vbmi): where vnniMinTokens should be.
func BenchmarkQ4KFewTokens(b *testing.B) {
	if !useVNNI16 {
		b.Skip("no AVX-512 VBMI")
	}
	defer SetThreads(SetThreads(1))
	r := rand.New(rand.NewPCG(61, 62))
	const rows, cols = 64, 2048
	w := Matrix{Type: Q4_K, Rows: rows, Cols: cols, Data: make([]byte, rows*Q4_K.RowBytes(cols))}
	for i := 0; i < rows; i++ {
		QuantizeRow(w.Row(i), Q4_K, randRow(r, cols, 0.1))
	}
	x := randRow(r, 16*cols, 1)
	dst := make([]float32, 16*rows)
	for _, n := range []int{2, 3, 4, 5, 6, 8, 9, 12, 15} {
		for _, level := range []string{"avx512", "avx512vbmi"} {
			b.Run(fmt.Sprintf("t%d/%s", n, level), func(b *testing.B) {
				defer setSIMD(level)()
				b.SetBytes(int64(len(w.Data)))
				c0 := cpuSeconds()
				for b.Loop() {
					MatMul(dst, w, x, n)
				}
				b.ReportMetric((cpuSeconds()-c0)*1e6/float64(b.N), "cpu-us/op")
			})
		}
	}
}

// BenchmarkQ4KVNNIPacked compares, per token count, the VNNI kernels of one
// Q4_K row (64 rows of 2048 columns a call) with per-token reductions (v) and
// with two tokens packed per vector (p), one thread, CPU time per call.
func BenchmarkQ4KVNNIPacked(b *testing.B) {
	if !useVNNI16 {
		b.Skip("no AVX-512 VBMI")
	}
	r := rand.New(rand.NewPCG(43, 44))
	const rows, cols = 64, 2048
	nb := cols / qkK
	w := make([]byte, rows*nb*Q4_K.BlockBytes())
	for i := 0; i < rows; i++ {
		QuantizeRow(w[i*nb*Q4_K.BlockBytes():(i+1)*nb*Q4_K.BlockBytes()], Q4_K, randRow(r, cols, 0.1))
	}
	y := q8KActs(r, 16*nb, "quantized", false)
	perm := make([]int8, 16*nb*qkK)
	for i := range 16 * nb {
		permuteQ8K(perm[i*qkK:(i+1)*qkK], &y[i].qs)
	}
	ydT := make([]float32, nb*16)
	bsT := make([]int32, 4*nb*16)
	transposeBsums(bsT, y, nb, 16, 16)
	out := make([]float32, 16*rows)
	for _, n := range []int{5, 8, 9, 12, 16} {
		for _, form := range []string{"p"} {
			k := q4KVNNIp[n]
			b.Run(fmt.Sprintf("t%d/%s", n, form), func(b *testing.B) {
				c0 := cpuSeconds()
				for b.Loop() {
					for i := 0; i < rows; i++ {
						k(&w[i*nb*Q4_K.BlockBytes()], (*byte)(unsafe.Pointer(&perm[0])), nb*qkK, &ydT[0], 64, &bsT[0], 64, nb, &out[i], rows)
					}
				}
				b.ReportMetric((cpuSeconds()-c0)*1e6/float64(b.N), "cpu-us/op")
			})
		}
	}
}
