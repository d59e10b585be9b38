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
	{"Q6_K r8t1", Q6_K, 8, 1, dotQ6KAVX512r8t1, dotQ6KRowGeneric},
	{"Q6_K r1t16", Q6_K, 1, 16, dotQ6KAVX512r1t16, dotQ6KRowGeneric},
	{"Q6_K r1t8", Q6_K, 1, 8, dotQ6KAVX512r1t8, dotQ6KRowGeneric},
	{"Q6_K r1t4", Q6_K, 1, 4, dotQ6KAVX512r1t4, dotQ6KRowGeneric},
}

// TestTileKernels: every output of a tile kernel is the Go reference's bits, for
// rows and tokens at odd strides, extreme weights and activations, and nothing
// around the outputs is written.
func TestTileKernels(t *testing.T) {
	if !useAVX512 {
		t.Skip("no AVX-512")
	}
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

// TestTile0Kernels: the Q8_0 and Q4_0 tiles give the single-row kernel's bits
// for every row and token, odd block counts included, and write only their
// outputs; q8PairsAVX512 lays the activations out as q8Pair says.
func TestTile0Kernels(t *testing.T) {
	if !useAVX512 {
		t.Skip("no AVX-512")
	}
	if s := unsafe.Sizeof(q8Pair{}); s != 128 || unsafe.Offsetof(q8Pair{}.s) != 64 || unsafe.Offsetof(q8Pair{}.d) != 96 {
		t.Fatalf("q8Pair layout changed (size %d): regenerate _asm", s)
	}
	r := rand.New(rand.NewPCG(45, 46))
	const guard = -12345.5
	for _, c := range []struct {
		typ      Type
		rows     tile0Rows
		k16, k8  tile0Tokens
		k4       tile0Tokens
		one      func([]byte, []q8Block) float32
		blockLen int
	}{
		{Q8_0, dotQ8_0AVX512r8t1, dotQ8_0AVX512r1t16, dotQ8_0AVX512r1t8, dotQ8_0AVX512r1t4, dotQ8_0Row, 34},
		{Q4_0, dotQ4_0AVX512r8t1, dotQ4_0AVX512r1t16, dotQ4_0AVX512r1t8, dotQ4_0AVX512r1t4, dotQ4_0Row, 18},
	} {
		for _, nb := range []int{1, 2, 3, 7, 8, 9} {
			for _, wm := range []string{"quantized", "random", "0xff", "0x80"} {
				for _, am := range []string{"quantized", "random", "max", "min"} {
					name := fmt.Sprintf("%v nb %d weights %s acts %s", c.typ, nb, wm, am)
					rb := nb*c.blockLen + 5
					w := make([]byte, 8*rb)
					for i := 0; i < 8; i++ {
						copy(w[i*rb:], weightRow(r, c.typ, nb, wm, false))
					}
					row := func(i int) []byte { return w[i*rb : i*rb+nb*c.blockLen] }
					// Eight rows, one token.
					y := q8Acts(r, 16*nb, am, false)
					out := make([]float32, 10)
					for i := range out {
						out[i] = guard
					}
					c.rows(&w[0], rb, (*byte)(unsafe.Pointer(&y[0])), nb, &out[1])
					if out[0] != guard || out[9] != guard {
						t.Fatalf("%s: rows kernel wrote outside out", name)
					}
					for i := 0; i < 8; i++ {
						if want := c.one(row(i), y[:nb]); math.Float32bits(out[1+i]) != math.Float32bits(want) {
							t.Fatalf("%s: row %d: %v, single-row kernel %v", name, i, out[1+i], want)
						}
					}
					// One row, 16/8/4 tokens.
					np := (nb + 1) / 2
					pairs := make([]q8Pair, 16*np)
					for tk := 0; tk < 16; tk++ {
						q8PairsAVX512((*byte)(unsafe.Pointer(&y[tk*nb])), nb, (*byte)(unsafe.Pointer(&pairs[tk*np])))
					}
					for b := 0; b < nb; b++ {
						p, odd := pairs[b/2], b%2
						if p.d[odd] != y[b].d {
							t.Fatalf("%s: pair %d scale %v, want %v", name, b/2, p.d[odd], y[b].d)
						}
						for g := 0; g < 8; g++ {
							var s int16
							for i, q := range y[b].qs[4*g : 4*g+4] {
								s += int16(q)
								if p.qs[8*g+4*odd+i] != q {
									t.Fatalf("%s: pair %d does not hold block %d's group %d", name, b/2, b, g)
								}
							}
							if p.s[2*g+odd] != -8*s {
								t.Fatalf("%s: pair %d sum %d, want %d", name, b/2, p.s[2*g+odd], -8*s)
							}
						}
					}
					if nb%2 == 1 && (pairs[nb/2].d[1] != 0 || pairs[nb/2].qs[4] != 0 || pairs[nb/2].s[1] != 0) {
						t.Fatalf("%s: the last pair is not padded with zeros", name)
					}
					for _, k := range []struct {
						n int
						f tile0Tokens
					}{{16, c.k16}, {8, c.k8}, {4, c.k4}} {
						os := 3
						out := make([]float32, k.n*os+1)
						for i := range out {
							out[i] = guard
						}
						k.f(&w[2*rb], (*byte)(unsafe.Pointer(&pairs[0])), np*int(unsafe.Sizeof(q8Pair{})), nb, &out[1], os)
						for i, v := range out {
							if i == 0 || (i-1)%os != 0 {
								if v != guard {
									t.Fatalf("%s t%d: wrote out[%d]", name, k.n, i)
								}
								continue
							}
							tk := (i - 1) / os
							if want := c.one(row(2), y[tk*nb:(tk+1)*nb]); math.Float32bits(v) != math.Float32bits(want) {
								t.Fatalf("%s t%d: token %d: %v, single-row kernel %v", name, k.n, tk, v, want)
							}
						}
					}
				}
			}
		}
	}
}

func BenchmarkTile0Kernels(b *testing.B) {
	r := rand.New(rand.NewPCG(47, 48))
	const cols = 2048
	for _, c := range []struct {
		typ  Type
		rows tile0Rows
		k16  tile0Tokens
	}{{Q8_0, dotQ8_0AVX512r8t1, dotQ8_0AVX512r1t16}, {Q4_0, dotQ4_0AVX512r8t1, dotQ4_0AVX512r1t16}} {
		nb := cols / qk0
		rb := c.typ.RowBytes(cols)
		w := make([]byte, 8*rb)
		for i := 0; i < 8; i++ {
			QuantizeRow(w[i*rb:(i+1)*rb], c.typ, randRow(r, cols, 0.1))
		}
		var a acts
		a.prepare(Q8_0, randRow(r, 16*cols, 1), 16, cols)
		out := make([]float32, 16)
		b.Run(c.typ.String()+"/r8t1", func(b *testing.B) {
			b.SetBytes(int64(8 * rb))
			for b.Loop() {
				c.rows(&w[0], rb, (*byte)(unsafe.Pointer(&a.q8[0])), nb, &out[0])
			}
		})
		b.Run(c.typ.String()+"/r1t16", func(b *testing.B) {
			b.SetBytes(int64(16 * rb))
			for b.Loop() {
				c.k16(&w[0], (*byte)(unsafe.Pointer(&a.q8p[0])), (nb+1)/2*int(unsafe.Sizeof(q8Pair{})), nb, &out[0], 1)
			}
		})
	}
}
