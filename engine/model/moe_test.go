package model

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/engine/kernels"
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

// TestMoESumsExpertsInTopKOrder: a token's experts' weighted outputs are added in its
// top-k order (the most probable expert first), as llama.cpp's build_moe_ffn adds its
// views ((e₀ + e₁) + e₂) + …, not in expert index order: checked bit for bit against
// that formula, each expert run alone, on a micro model using all 4 of its experts,
// with the tokens as one batch.
func TestMoESumsExpertsInTopKOrder(t *testing.T) {
	m, err := loadMicro(t, microModel(t, "qwen3moe", func(w *gguf.Writer) {
		w.AddKV("qwen3moe.expert_used_count", gguf.Uint32(microExperts))
	}))
	if err != nil {
		t.Fatal(err)
	}
	c := m.Config()
	E, K, dim, F := c.Experts, c.ExpertsUsed, c.Dim, c.ExpertFFN
	if K != E || K < 3 {
		t.Fatalf("the model uses %d of %d experts, want all of at least 3", K, E)
	}
	const n = 16
	r := rand.New(rand.NewPCG(3, 4))
	xn := make([]float32, n*dim)
	for i := range xn {
		xn[i] = float32(r.NormFloat64())
	}
	var w scratch
	w.grow(&m.cfg, n, 1)
	got := make([]float32, n*dim)
	w.moe(m, 0, got, slices.Clone(xn), n)

	e := m.layers[0].moe
	logits := make([]float32, E)
	sel, wts := make([]int32, K), make([]float32, K)
	a, b, d := make([]float32, F), make([]float32, F), make([]float32, dim)
	diff, reordered := 0, 0
	for i := 0; i < n; i++ {
		x := xn[i*dim : (i+1)*dim]
		kernels.MatMulVecDotF32(logits, e.router, x, 1)
		route(sel, wts, logits, c.NormTopK)
		if !slices.IsSorted(sel) {
			reordered++
		}
		want := make([]float32, dim)
		for k, s := range sel {
			kernels.MatMul(a, e.gate[s], x, 1)
			kernels.MatMul(b, e.up[s], x, 1)
			kernels.SwiGLU(a, a, b)
			kernels.MatMul(d, e.down[s], a, 1)
			for j, v := range d {
				if k == 0 {
					want[j] = wts[k] * v
				} else {
					want[j] += wts[k] * v
				}
			}
		}
		for j, v := range want {
			if math.Float32bits(got[i*dim+j]) != math.Float32bits(v) {
				diff++
			}
		}
	}
	if reordered == 0 {
		t.Fatal("every token's experts are in index order: the test cannot tell the orders apart")
	}
	if diff > 0 {
		t.Errorf("%d of %d outputs differ from the weighted experts summed in top-k order (%d of %d tokens' experts not in index order)", diff, n*dim, reordered, n)
	}
}
