package kernels

import (
	"math"
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
