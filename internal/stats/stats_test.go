package stats

import "testing"

// TestMedian: odd and even counts, none, and the input left in its order.
func TestMedian(t *testing.T) {
	x := []float64{5, 1, 4, 2}
	for _, c := range []struct {
		in   []float64
		want float64
	}{{[]float64{3, 1, 2}, 2}, {x, 3}, {nil, 0}, {[]float64{-1}, -1}} {
		if got := Median(c.in); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	if x[0] != 5 || x[1] != 1 {
		t.Errorf("Median sorted its input: %v", x)
	}
}
