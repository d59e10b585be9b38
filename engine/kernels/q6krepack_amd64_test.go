//go:build !purego

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// q6KGroup returns 16 Q6_K rows of nb blocks (quantized, random and extreme
// bytes by turns), row after row.
func q6KGroup(r *rand.Rand, nb int) []byte {
	modes := []string{"quantized", "random", "0xff", "0x00"}
	var data []byte
	for i := 0; i < 16; i++ {
		data = append(data, weightRow(r, Q6_K, nb, modes[i%len(modes)], false)...)
	}
	return data
}

// TestQ6KX16LayoutKeepsRows: packQ6KX16 moves bytes only (every row's blocks
// come back from unpackQ6KX16Block) and the packed reference has each row's
// dotQ6KRowGeneric bits.
func TestQ6KX16LayoutKeepsRows(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 61))
	for _, nb := range []int{1, 3} {
		plain := q6KGroup(r, nb)
		grp := make([]byte, len(plain))
		packQ6KX16(grp, plain, nb)
		y := q8KActs(r, nb, "quantized", false)
		for row := 0; row < 16; row++ {
			var blk [210]byte
			for b := 0; b < nb; b++ {
				unpackQ6KX16Block(&blk, grp, b, row)
				if string(blk[:]) != string(plain[(row*nb+b)*210:(row*nb+b+1)*210]) {
					t.Fatalf("nb %d: row %d block %d changed", nb, row, b)
				}
			}
			got, want := dotQ6KX16Generic(grp, row, y), dotQ6KRowGeneric(plain[row*nb*210:(row+1)*nb*210], y)
			if math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("nb %d row %d: %v, plain %v", nb, row, got, want)
			}
		}
	}
}

// TestQ6KX16KernelMatchesReference: the packed Q6_K kernel of 9 tokens gives
// every (row, token) dotQ6KRowGeneric's bits on the plain rows, on quantized,
// random and extreme weights and activations, writing nothing else.
func TestQ6KX16KernelMatchesReference(t *testing.T) {
	if !useAVX512 {
		t.Skip("no AVX-512 VNNI")
	}
	r := rand.New(rand.NewPCG(33, 62))
	const guard = -12345.5
	for _, nb := range []int{1, 2, 3, 8} {
		plain := q6KGroup(r, nb)
		grp := make([]byte, len(plain))
		packQ6KX16(grp, plain, nb)
		rb := nb * 210
		for _, am := range []string{"quantized", "random", "min", "max"} {
			const T, yn, t0, os = 9, 11, 1, 19
			y := q8KActs(r, yn*nb, am, false)
			name := fmt.Sprintf("nb %d, acts %s", nb, am)
			out := make([]float32, (T+1)*os)
			for i := range out {
				out[i] = guard
			}
			dotQ6KX16AVX512t9(&grp[0], (*byte)(unsafe.Pointer(&y[t0*nb])), nb*int(unsafe.Sizeof(y[0])), nb, &out[1], os)
			for i, v := range out {
				tk, row := (i-1)/os, (i-1)%os
				if i == 0 || row >= 16 || tk >= T {
					if v != guard {
						t.Fatalf("%s: wrote out[%d]", name, i)
					}
					continue
				}
				want := dotQ6KRowGeneric(plain[row*rb:(row+1)*rb], y[(t0+tk)*nb:(t0+tk+1)*nb])
				if math.Float32bits(v) != math.Float32bits(want) {
					t.Fatalf("%s: row %d token %d: %v, reference %v", name, row, tk, v, want)
				}
			}
		}
	}
}

// BenchmarkQ6KX16Kernel: 16 Q6_K rows × 2048 columns (in L1/L2) against 9
// tokens, through the packed kernel (x16) and row by row through
// dotQ6KAVX512x9 (x9, what MatMul runs today); cpu-ns per block of 16 rows and
// token.
func BenchmarkQ6KX16Kernel(b *testing.B) {
	if !useAVX512 {
		b.Skip("no AVX-512 VNNI")
	}
	r := rand.New(rand.NewPCG(33, 63))
	const nb, T = 8, 9
	plain := make([]byte, 0, 16*nb*210)
	for i := 0; i < 16; i++ {
		plain = append(plain, weightRow(r, Q6_K, nb, "quantized", false)...)
	}
	grp := make([]byte, len(plain))
	packQ6KX16(grp, plain, nb)
	y := q8KActs(r, T*nb, "quantized", false)
	ys := nb * int(unsafe.Sizeof(y[0]))
	out := make([]float32, T*16)
	for _, form := range []string{"x16", "x9"} {
		b.Run(form, func(b *testing.B) {
			c0 := cpuSeconds()
			for b.Loop() {
				if form == "x16" {
					dotQ6KX16AVX512t9(&grp[0], (*byte)(unsafe.Pointer(&y[0])), ys, nb, &out[0], 16)
					continue
				}
				for row := 0; row < 16; row++ {
					dotQ6KAVX512x9(&plain[row*nb*210], (*byte)(unsafe.Pointer(&y[0])), nb, ys, &out[9*row])
				}
			}
			b.ReportMetric((cpuSeconds()-c0)*1e9/float64(b.N*nb*T), "cpu-ns/block-token")
		})
	}
}
