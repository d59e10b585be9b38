//go:build !purego

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// q4KX16Kernels are the packed Q4_K kernels by token count.
var q4KX16KernelsT = [10]func(x *byte, y *byte, ys int, nb int, out *float32, os int){
	1: dotQ4KX16AVX512t1, 2: dotQ4KX16AVX512t2, 3: dotQ4KX16AVX512t3, 4: dotQ4KX16AVX512t4, 5: dotQ4KX16AVX512t5,
	6: dotQ4KX16AVX512t6, 7: dotQ4KX16AVX512t7, 8: dotQ4KX16AVX512t8, 9: dotQ4KX16AVX512t9,
}

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
			for T := 1; T <= 9; T++ {
				name := fmt.Sprintf("%d tokens, nb %d, acts %s", T, nb, am)
				const t0, os = 1, 19
				out := make([]float32, (T+1)*os)
				for i := range out {
					out[i] = guard
				}
				q4KX16KernelsT[T](&m.Data[0], (*byte)(unsafe.Pointer(&y[t0*nb])), nb*int(unsafe.Sizeof(y[0])), nb, &out[1], os)
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
	out := make([]float32, 9*16)
	for _, T := range []int{1, 5, 8, 9} {
		b.Run(fmt.Sprintf("t=%d", T), func(b *testing.B) {
			k := q4KX16KernelsT[T]
			c0 := cpuSeconds()
			for b.Loop() {
				k(&m.Data[0], (*byte)(unsafe.Pointer(&y[0])), nb*int(unsafe.Sizeof(y[0])), nb, &out[0], 16)
			}
			b.ReportMetric((cpuSeconds()-c0)*1e9/float64(b.N*nb*T), "cpu-ns/block-token")
		})
	}
}
