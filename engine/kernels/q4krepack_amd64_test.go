//go:build !purego

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestQ4KX16KernelsMatchReference: the packed kernels of 1 … 9 tokens give
// every (row, token) dotQ4KRowGeneric's bits on the plain rows, on quantized,
// random and extreme weights and activations, writing nothing else.
func TestQ4KX16KernelsMatchReference(t *testing.T) {
	if !useAVX512 {
		t.Skip("no AVX-512 VNNI")
	}
	r := rand.New(rand.NewPCG(33, 9))
	const guard = -12345.5
	for _, nb := range []int{1, 2, 3, 8} {
		m := q4KMatrix(r, 16, nb)
		rb := nb * 144
		plain := append([]byte(nil), m.Data...)
		PackQ4K(&m)
		for _, am := range []string{"quantized", "random", "min", "max"} {
			const yn = 11
			y := q8KActs(r, yn*nb, am, false)
			bsT := make([]int32, 4*nb*yn)
			transposeBsums(bsT, y, nb, yn, yn)
			for T := 1; T <= 9; T++ {
				name := fmt.Sprintf("%d tokens, nb %d, acts %s", T, nb, am)
				const t0, os = 1, 19
				out := make([]float32, (T+1)*os)
				for i := range out {
					out[i] = guard
				}
				q4KX16(T, &m.Data[0], (*byte)(unsafe.Pointer(&y[t0*nb])), nb*int(unsafe.Sizeof(y[0])), &bsT[t0], 4*yn, nb, &out[1], os)
				for i, v := range out {
					tk, row := (i-1)/os, (i-1)%os
					if i == 0 || row >= 16 || tk >= T {
						if v != guard {
							t.Fatalf("%s: wrote out[%d]", name, i)
						}
						continue
					}
					want := dotQ4KRowGeneric(plain[row*rb:(row+1)*rb], y[(t0+tk)*nb:(t0+tk+1)*nb])
					if math.Float32bits(v) != math.Float32bits(want) {
						t.Fatalf("%s: row %d token %d: %v, reference %v", name, row, tk, v, want)
					}
				}
			}
		}
	}
}

// BenchmarkQ4KX16Kernels: the packed kernels of 1 and 5-9 tokens on one group
// of 16 rows × 2048 columns (in L2), cpu-ns per block of 16 rows and token
// (64 VPDPBUSD each: their bound at one a cycle is 64 cycles).
func BenchmarkQ4KX16Kernels(b *testing.B) {
	if !useAVX512 {
		b.Skip("no AVX-512 VNNI")
	}
	r := rand.New(rand.NewPCG(33, 7))
	const nb = 8
	m := q4KMatrix(r, 16, nb)
	PackQ4K(&m)
	y := q8KActs(r, 9*nb, "quantized", false)
	bsT := make([]int32, 4*nb*9)
	transposeBsums(bsT, y, nb, 9, 9)
	out := make([]float32, 9*16)
	for _, T := range []int{1, 5, 8, 9} {
		b.Run(fmt.Sprintf("t=%d", T), func(b *testing.B) {
			c0 := cpuSeconds()
			for b.Loop() {
				q4KX16(T, &m.Data[0], (*byte)(unsafe.Pointer(&y[0])), nb*int(unsafe.Sizeof(y[0])), &bsT[0], 4*9, nb, &out[0], 16)
			}
			b.ReportMetric((cpuSeconds()-c0)*1e9/float64(b.N*nb*T), "cpu-ns/block-token")
		})
	}
}

// TestMatMulPackedQ4KLevels: MatMul on a packed Q4_K matrix gives, on every
// assembly level (the packed kernels, and the levels that unpack each row), the
// bits of the plain matrix on the generic level, for token counts around the
// kernels' chunks.
func TestMatMulPackedQ4KLevels(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 53))
	const rows, cols = 53, 768
	plain := q4KMatrix(r, rows, cols/qkK)
	packed := plain
	packed.Data = append([]byte(nil), plain.Data...)
	PackQ4K(&packed)
	for _, nTok := range []int{1, 3, 5, 9, 16, 37} {
		x := randRow(r, nTok*cols, 1)
		restore := setSIMD("generic")
		want := make([]float32, nTok*rows)
		MatMul(want, plain, x, nTok)
		restore()
		for _, level := range simdLevels() {
			restore := setSIMD(level)
			got := make([]float32, nTok*rows)
			MatMul(got, packed, x, nTok)
			restore()
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%d tokens, %s: token %d row %d = %v, plain generic %v", nTok, level, i/rows, i%rows, got[i], want[i])
				}
			}
		}
	}
}
