package model

import (
	"math"
	"slices"
	"testing"
)

// TestRoute: the top-k is a total order (higher probability first, the lower index
// among equals), the weights are the chosen probabilities, renormalised when asked.
func TestRoute(t *testing.T) {
	for _, c := range []struct {
		name   string
		logits []float32
		k      int
		norm   bool
		want   []int32
	}{
		{"distinct", []float32{0.1, 2, -1, 1.5, 0.3}, 2, false, []int32{1, 3}},
		{"exact tie: lower index first", []float32{0, 1, 3, 1, 3}, 2, false, []int32{2, 4}},
		{"tie at the boundary: the lower index is in", []float32{0, 1, 3, 1, 1}, 2, true, []int32{2, 1}},
		{"all equal", []float32{5, 5, 5, 5}, 3, true, []int32{0, 1, 2}},
		{"k = n", []float32{-1, 0, -2}, 3, true, []int32{1, 0, 2}},
		{"negative infinities", []float32{float32(math.Inf(-1)), 0, float32(math.Inf(-1))}, 2, false, []int32{1, 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			logits := slices.Clone(c.logits)
			sel, wts := make([]int32, c.k), make([]float32, c.k)
			route(sel, wts, logits, c.norm)
			if !slices.Equal(sel, c.want) {
				t.Fatalf("experts %v, want %v", sel, c.want)
			}
			var sum float64
			for i, s := range sel {
				sum += float64(wts[i])
				if !c.norm && wts[i] != logits[s] {
					t.Errorf("weight %d = %v, want the probability %v", i, wts[i], logits[s])
				}
				if i > 0 && wts[i] > wts[i-1] {
					t.Errorf("weights %v not in descending order", wts)
				}
			}
			if c.norm && math.Abs(sum-1) > 1e-6 {
				t.Errorf("normalised weights %v sum to %v", wts, sum)
			}
		})
	}
}

// TestRouteAllocs: routing allocates nothing.
func TestRouteAllocs(t *testing.T) {
	logits := make([]float32, 64)
	sel, wts := make([]int32, 8), make([]float32, 8)
	if n := testing.AllocsPerRun(100, func() {
		for i := range logits {
			logits[i] = float32(i % 7)
		}
		route(sel, wts, logits, true)
	}); n != 0 {
		t.Fatalf("%v allocations per route", n)
	}
}
