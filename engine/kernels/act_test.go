package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// actRow returns n floats of the given kind, starting off floats into their array.
func actRow(r *rand.Rand, n, off int, kind string) []float32 {
	x := make([]float32, n+off+3)[off : off+n]
	for i := range x {
		switch kind {
		case "normal":
			x[i] = float32(r.NormFloat64())
		case "wide": // every binade from tiny to huge, both signs
			x[i] = float32(math.Ldexp(r.Float64()+0.5, r.IntN(80)-40)) * sign(float32(r.NormFloat64()))
		case "ties": // the largest magnitude several times, with both signs
			x[i] = float32(r.IntN(7)-3) * 0.75
		case "zero":
			x[i] = 0
		case "halfway": // halfway between binary16 (and bfloat16) neighbours
			h := F32ToF16(float32(r.NormFloat64() * 100))
			x[i] = (F16ToF32(h) + F16ToF32(h+1)) / 2
			if r.IntN(2) == 0 {
				x[i] = math.Float32frombits(math.Float32bits(x[i])&^0xffff | 0x8000)
			}
		}
	}
	return x
}

var actKinds = []string{"normal", "wide", "ties", "zero", "halfway"}

// TestQuantRowsMatchReference: the activation quantizers give the reference's
// blocks byte for byte and write only their blocks.
func TestQuantRowsMatchReference(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	for _, nb := range []int{1, 2, 3, 5} {
		for off := 0; off < 3; off++ {
			for _, kind := range actKinds {
				name := fmt.Sprintf("nb %d off %d %s", nb, off, kind)
				x := actRow(r, nb*qkK, off, kind)
				if kind == "normal" && nb > 1 {
					clear(x[qkK : 2*qkK]) // a zero block between others
				}
				want := make([]q8KBlock, nb)
				quantRowsQ8KGeneric(want, x)
				buf := make([]q8KBlock, nb+2)
				for i := range buf {
					buf[i].d, buf[i].qs[0], buf[i].bsums[15] = -5, 9, 9
				}
				guard := buf[0]
				quantRowsQ8K(buf[1:nb+1], x)
				if buf[0] != guard || buf[nb+1] != guard {
					t.Fatalf("Q8_K %s: wrote outside the blocks", name)
				}
				for b := range want {
					if buf[1+b] != want[b] {
						t.Fatalf("Q8_K %s: block %d differs:\n got %v\nwant %v", name, b, buf[1+b], want[b])
					}
				}
				x = actRow(r, nb*8*qk0, off, kind)
				want0 := make([]q8Block, nb*8)
				quantRowsQ8_0Generic(want0, x, 3+4*(nb%2))
				buf0 := make([]q8Block, nb*8+2)
				for i := range buf0 {
					buf0[i].d, buf0[i].qs[0] = -5, 9
				}
				guard0 := buf0[0]
				quantRowsQ8_0(buf0[1:nb*8+1], x, 3+4*(nb%2))
				if buf0[0] != guard0 || buf0[nb*8+1] != guard0 {
					t.Fatalf("Q8_0 %s: wrote outside the blocks", name)
				}
				for b := range want0 {
					if math.Float32bits(buf0[1+b].d) != math.Float32bits(want0[b].d) || buf0[1+b].qs != want0[b].qs || buf0[1+b].c != want0[b].c {
						t.Fatalf("Q8_0 %s: block %d differs:\n got %v\nwant %v", name, b, buf0[1+b], want0[b])
					}
				}
			}
		}
	}
}

// TestRoundingAndSwiGLUMatchReference: binary16 and bfloat16 rounding and the
// conversion to binary16 bits (with infinities, NaNs and overflow) and SwiGLU give
// the reference's bits for every length around the vector width, at any alignment,
// in place too.
func TestRoundingAndSwiGLUMatchReference(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	specials := []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 65520, -65519, 1e-8, -6e-8, 3e38,
		math.Float32frombits(0x7f800001), math.Float32frombits(0xffc00001), 0, float32(math.Copysign(0, -1))}
	for n := 0; n <= 41; n++ {
		for off := 0; off < 3; off++ {
			for _, kind := range actKinds {
				x := actRow(r, n, off, kind)
				for i := range x {
					if r.IntN(8) == 0 {
						x[i] = specials[r.IntN(len(specials))]
					}
				}
				for _, c := range []struct {
					name      string
					fast, ref func(dst, src []float32)
				}{{"RoundF16", roundF16s, roundF16sGeneric}, {"RoundBF16", roundBF16s, roundBF16sGeneric}} {
					want := make([]float32, n)
					c.ref(want, x)
					buf := make([]float32, n+2)
					buf[0], buf[n+1] = -3, -3
					c.fast(buf[1:n+1], x)
					if buf[0] != -3 || buf[n+1] != -3 {
						t.Fatalf("%s n %d: wrote outside dst", c.name, n)
					}
					for i := range want {
						if math.Float32bits(buf[1+i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s n %d off %d %s: %v (%#x) gives %#x, want %#x", c.name, n, off, kind, x[i], math.Float32bits(x[i]), math.Float32bits(buf[1+i]), math.Float32bits(want[i]))
						}
					}
				}
				// The same conversion stored as binary16 bits, as keys and values are.
				want16 := make([]uint16, n)
				toF16sGeneric(want16, x)
				buf16 := make([]uint16, n+2)
				buf16[0], buf16[n+1] = 0xdead, 0xdead
				F32sToF16s(buf16[1:n+1], x)
				if buf16[0] != 0xdead || buf16[n+1] != 0xdead {
					t.Fatalf("F32sToF16s n %d: wrote outside dst", n)
				}
				for i := range want16 {
					if buf16[1+i] != want16[i] {
						t.Fatalf("F32sToF16s n %d off %d %s: %v (%#x) gives %#x, want %#x", n, off, kind, x[i], math.Float32bits(x[i]), buf16[1+i], want16[i])
					}
				}
				// SwiGLU on finite gates; up may be anything.
				gate := actRow(r, n, (off+1)%3, "wide")
				for i := range gate {
					if r.IntN(4) == 0 {
						gate[i] = float32(r.NormFloat64() * 100)
					}
				}
				want := make([]float32, n)
				swigluGeneric(want, gate, x)
				got := append([]float32(nil), gate...)
				SwiGLU(got, got, x) // in place, as the model runs it
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
						t.Fatalf("SwiGLU n %d: gate %v up %v gives %v, want %v", n, gate[i], x[i], got[i], want[i])
					}
				}
			}
		}
	}
}

func BenchmarkActivations(b *testing.B) {
	r := rand.New(rand.NewPCG(35, 36))
	x := actRow(r, 4096, 0, "normal")
	g := actRow(r, 4096, 0, "normal")
	y8 := make([]q8Block, 4096/qk0)
	yk := make([]q8KBlock, 4096/qkK)
	f := make([]float32, 4096)
	for _, level := range simdLevels() {
		for _, c := range []struct {
			name string
			f    func()
		}{
			{"Q8_0", func() { quantRowsQ8_0(y8, x, 7) }},
			{"Q8_K", func() { quantRowsQ8K(yk, x) }},
			{"F16", func() { roundF16s(f, x) }},
			{"SwiGLU", func() { SwiGLU(f, g, x) }},
		} {
			b.Run(c.name+"/"+level, func(b *testing.B) {
				defer setSIMD(level)()
				b.SetBytes(int64(4 * len(x)))
				for b.Loop() {
					c.f()
				}
			})
		}
	}
}
