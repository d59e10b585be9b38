package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestExpf(t *testing.T) {
	worst := 0.0
	for x := -87.3; x <= 88.7; x += 0.000731 {
		xf := float32(x)
		got := float64(expf(xf))
		want := math.Exp(float64(xf))
		ulp := float64(math.Nextafter32(float32(want), float32(math.Inf(1)))) - float64(float32(want))
		if e := math.Abs(got-want) / ulp; e > worst {
			worst = e
		}
	}
	if worst > 2 {
		t.Fatalf("expf is %.2f ulp from exp at worst", worst)
	}
	t.Logf("worst error %.2f ulp", worst)
	for _, c := range []struct{ x, want float32 }{{0, 1}, {-100, 0}, {-87.5, 0}, {100, float32(math.Inf(1))}} {
		if got := expf(c.x); got != c.want {
			t.Errorf("expf(%v) = %v, want %v", c.x, got, c.want)
		}
	}
	if nan := expf(float32(math.NaN())); nan == nan {
		t.Error("expf(NaN) is not NaN")
	}
}

// TestAttnExpfIsCorrectlyRounded: attnExpf gives float32(e**x) rounded once, as
// libm's expf that llama.cpp's flash attention calls (issue 32), over the scores'
// whole range: random x in [-110, 0] (subnormal and zero results included), the
// clamps and the special values. Cephes' expf (expf) differs on about 1 in 6.
func TestAttnExpfIsCorrectlyRounded(t *testing.T) {
	r := rand.New(rand.NewPCG(32, 1))
	xs := []float32{0, float32(math.Copysign(0, -1)), -1e-30, -87.33654, -87.5, -103.97, -103.98, -104, -105, 88.7, 100, 101,
		float32(math.Inf(-1)), float32(math.Inf(1))}
	for i := 0; i < 200000; i++ {
		xs = append(xs, -110*r.Float32(), -r.Float32())
	}
	cephes := 0
	for _, x := range xs {
		want := float32(math.Exp(float64(x)))
		if got := attnExpf(x); math.Float32bits(got) != math.Float32bits(want) {
			t.Errorf("attnExpf(%v) = %v (%#x), want %v (%#x)", x, got, math.Float32bits(got), want, math.Float32bits(want))
		}
		if expf(x) != want {
			cephes++
		}
	}
	if nan := attnExpf(float32(math.NaN())); nan == nan {
		t.Error("attnExpf(NaN) is not NaN")
	}
	t.Logf("Cephes' expf differs from the correctly rounded result on %d of %d", cephes, len(xs))
}
