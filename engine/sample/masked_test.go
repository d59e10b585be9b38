package sample

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSampleMasked: only allowed tokens come out, whatever the chain; the draw
// uses the same randomness as unmasked sampling (a mask allowing all gives Sample's
// tokens); a mask of tokens with -Inf logits gives the lowest allowed one.
func TestSampleMasked(t *testing.T) {
	logits := make([]float32, 300)
	for i := range logits {
		logits[i] = float32((i*7919)%101) / 10
	}
	allow := make([]uint64, 5)
	for _, id := range []int{3, 64, 65, 130, 299} {
		allow[id>>6] |= 1 << (id & 63)
	}
	all := []uint64{^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)}
	for _, p := range []Params{{}, {Temperature: 1}, {Temperature: 0.7, TopK: 2, TopP: 0.9, MinP: 0.1, RepeatPenalty: 1.3}, {Temperature: 3, TopK: 1}} {
		for seed := range uint64(30) {
			p.Seed = seed
			s := New(p)
			id := s.SampleMasked(logits, []int32{64, 65}, allow)
			if allow[id>>6]&(1<<(id&63)) == 0 {
				t.Fatalf("%+v: token %d is not allowed", p, id)
			}
			a, b := New(p), New(p)
			for range 5 {
				if x, y := a.Sample(logits, nil), b.SampleMasked(logits, nil, all); x != y {
					t.Fatalf("%+v: full mask gave %d, Sample %d", p, y, x)
				}
			}
		}
	}
	// The sparse path (few tokens allowed) picks what the chain picks over a row with
	// the other tokens at -Inf.
	filled := slices.Clone(logits)
	for i := range filled {
		if allow[i>>6]&(1<<(i&63)) == 0 {
			filled[i] = float32(math.Inf(-1))
		}
	}
	for _, p := range []Params{{}, {Temperature: 1}, {Temperature: 0.7, TopK: 2, TopP: 0.9, MinP: 0.1, RepeatPenalty: 1.3, FrequencyPenalty: 0.5}} {
		for seed := range uint64(30) {
			p.Seed = seed
			a, b := New(p), New(p)
			for range 3 {
				if x, y := a.SampleMasked(logits, []int32{64, 3, 3}, allow), b.Sample(filled, []int32{64, 3, 3}); x != y {
					t.Fatalf("%+v: sparse path %d, -Inf row %d", p, x, y)
				}
			}
		}
	}
	inf := slices.Repeat([]float32{float32(math.Inf(-1))}, 300)
	inf[7] = 5
	if id := New(Params{Temperature: 1}).SampleMasked(inf, nil, allow); id != 3 {
		t.Errorf("all allowed logits -Inf: got %d, want the lowest allowed 3", id)
	}
	s := New(Params{Temperature: 0.8, TopP: 0.9, Seed: 1})
	s.SampleMasked(logits, nil, allow)
	if a := testing.AllocsPerRun(20, func() { s.SampleMasked(logits, nil, allow) }); a != 0 {
		t.Errorf("%v allocations per SampleMasked", a)
	}
}

// TestTopLogprobs checks LogSumExp and TopLogprobs against a direct computation
// (a full sort in float64).
func TestTopLogprobs(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 5, 20, 1000} {
		logits := make([]float32, n)
		for i := range logits {
			logits[i] = float32(rng.IntN(40)) / 4 // with ties
		}
		if n > 3 {
			logits[2] = float32(math.NaN())
		}
		lse := LogSumExp(logits)
		sum := 0.0
		for _, l := range logits {
			if l == l {
				sum += math.Exp(float64(l))
			}
		}
		if math.Abs(lse-math.Log(sum)) > 1e-9 {
			t.Errorf("n=%d: lse %v, want %v", n, lse, math.Log(sum))
		}
		ids := make([]int, n)
		for i := range ids {
			ids[i] = i
		}
		key := func(i int) float64 {
			if logits[i] != logits[i] {
				return math.Inf(-1)
			}
			return float64(logits[i])
		}
		slices.SortStableFunc(ids, func(a, b int) int {
			if key(a) > key(b) {
				return -1
			}
			if key(a) < key(b) {
				return 1
			}
			return a - b
		})
		top := make([]Logprob, 20)
		TopLogprobs(logits, lse, top)
		for i := range top {
			if i >= n {
				if top[i].ID != -1 {
					t.Errorf("n=%d: entry %d beyond the vocabulary is %+v", n, i, top[i])
				}
				continue
			}
			want := Logprob{int32(ids[i]), float32(key(ids[i]) - lse)}
			if top[i] != want {
				t.Errorf("n=%d: top[%d] = %+v, want %+v", n, i, top[i], want)
			}
		}
		if a := testing.AllocsPerRun(10, func() { TopLogprobs(logits, lse, top) }); a != 0 {
			t.Errorf("%v allocations", a)
		}
	}
}
