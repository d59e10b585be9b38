//go:build !purego

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// fma32Once is a·b+c rounded once to float32 (VFMADD231PS's lane): the product is
// exact in float64; when the float64 sum lies exactly halfway between two
// float32s but is not the exact sum, it is moved one float64 step towards the
// exact sum first, so that the second rounding is the single one's.
func fma32Once(a, b, c float32) float32 {
	p := float64(a) * float64(b)
	s := p + float64(c)
	v := s - p
	e := (p - (s - v)) + (float64(c) - v) // s + e = p + c exactly (TwoSum)
	if e != 0 && math.Float64bits(s)&(1<<29-1) == 1<<28 {
		s = math.Nextafter(s, s+e)
	}
	return float32(s)
}

// dotFloatSIMDOrder is the float kernels' order in pure Go (simd_generic.go's
// comment): element i fused-multiply-added into lane i%8 of accumulator
// (i/8)%8 over the largest multiple of 64 elements, the next groups of 8 into
// accumulator 0, the accumulators summed pairwise, then sum8, then the last
// len%8 elements added in order. w holds the weights as float32s.
func dotFloatSIMDOrder(w, x []float32) float32 {
	var acc [8][8]float32
	n64, n8 := len(x)&^63, len(x)&^7
	for i := 0; i < n8; i++ {
		k := 0
		if i < n64 {
			k = (i / 8) % 8
		}
		acc[k][i%8] = fma32Once(w[i], x[i], acc[k][i%8])
	}
	for step := 1; step < 8; step *= 2 {
		for k := 0; k < 8; k += 2 * step {
			for l := range acc[k] {
				acc[k][l] += acc[k+step][l]
			}
		}
	}
	s := sum8(&acc[0])
	for i := n8; i < len(x); i++ {
		s += w[i] * x[i]
	}
	return s
}

// TestFloatTokenKernels: the multi-token F16 and BF16 kernels give every token
// the bits of the one-token kernel and of dotFloatSIMDOrder (their order in
// pure Go), at strides that are not the row length, and write only their
// outputs.
func TestFloatTokenKernels(t *testing.T) {
	requireSIMD(t, "avx512")
	r := rand.New(rand.NewPCG(71, 72))
	const guard = -12345.5
	for _, typ := range []Type{F16, BF16} {
		for _, n := range []int{64, 128, 768, 2048} {
			for _, T := range floatTileSizes {
				name := fmt.Sprintf("%v/%d/t%d", typ, n, T)
				row := make([]byte, typ.RowBytes(n))
				QuantizeRow(row, typ, randRow(r, n, 0.5))
				w := make([]float32, n)
				DequantizeRow(w, typ, row)
				const pad, os = 5, 3 // floats between activation rows; output stride
				ys := n + pad
				y := randRow(r, T*ys, 2)
				for i := range y {
					if typ == F16 {
						y[i] = RoundF16(y[i])
					} else {
						y[i] = RoundBF16(y[i])
					}
				}
				out := make([]float32, T*os+1)
				for i := range out {
					out[i] = guard
				}
				yp := (*float32)(unsafe.Pointer(&y[0]))
				floatTokenKernel(typ, T)(&row[0], yp, 4*ys, n, &out[0], 4*os)
				for i, v := range out {
					tk := i / os
					if i%os != 0 || tk >= T {
						if v != guard {
							t.Fatalf("%s: out[%d] = %v, written outside the outputs", name, i, v)
						}
						continue
					}
					yt := y[tk*ys : tk*ys+n]
					if want := dotFloatSIMDOrder(w, yt); math.Float32bits(v) != math.Float32bits(want) {
						t.Fatalf("%s: token %d = %v, the kernels' order in Go %v", name, tk, v, want)
					}
					var one float32
					if typ == F16 {
						one = dotF16Row(row, yt)
					} else {
						one = dotBF16Row(row, yt)
					}
					if math.Float32bits(v) != math.Float32bits(one) {
						t.Fatalf("%s: token %d = %v, one-token kernel %v", name, tk, v, one)
					}
				}
			}
		}
	}
}

// TestFloatRowKernelsSIMDOrder: the one-token F16, BF16 and F32 kernels (on
// this CPU's level) have dotFloatSIMDOrder's bits, with lengths that leave
// groups of 8 and single elements over.
func TestFloatRowKernelsSIMDOrder(t *testing.T) {
	requireSIMD(t, "avx2")
	r := rand.New(rand.NewPCG(73, 74))
	for _, typ := range []Type{F16, BF16, F32} {
		for _, n := range []int{8, 63, 64, 72, 133, 768, 2051} {
			row := make([]byte, typ.RowBytes(n))
			QuantizeRow(row, typ, randRow(r, n, 0.5))
			w := make([]float32, n)
			DequantizeRow(w, typ, row)
			x := randRow(r, n, 2)
			for i := range x {
				switch typ {
				case F16:
					x[i] = RoundF16(x[i])
				case BF16:
					x[i] = RoundBF16(x[i])
				}
			}
			var got float32
			switch typ {
			case F16:
				got = dotF16Row(row, x)
			case BF16:
				got = dotBF16Row(row, x)
			default:
				got = dotF32Row(row, x)
			}
			if want := dotFloatSIMDOrder(w, x); math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("%v/%d: %v, the kernels' order in Go %v", typ, n, got, want)
			}
		}
	}
}

// floatTileSizes are the token counts of the multi-token float kernels.
var floatTileSizes = []int{6, 4, 2}

func floatTokenKernel(typ Type, n int) func(x *byte, y *float32, ys, n int, out *float32, os int) {
	k := map[[2]int]func(x *byte, y *float32, ys, n int, out *float32, os int){
		{int(F16), 6}: dotF16AVX512t6, {int(F16), 4}: dotF16AVX512t4, {int(F16), 2}: dotF16AVX512t2,
		{int(BF16), 6}: dotBF16AVX512t6, {int(BF16), 4}: dotBF16AVX512t4, {int(BF16), 2}: dotBF16AVX512t2,
	}[[2]int{int(typ), n}]
	if k == nil {
		panic(fmt.Sprintf("no %v kernel for %d tokens", typ, n))
	}
	return k
}
