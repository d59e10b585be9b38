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

// TestGreedyIsTheChain: the greedy shortcut (temperature 0, no penalties) picks what
// the whole chain picks, over rows with ties, NaN and -Inf, for no mask, full,
// dense, sparse, empty and short masks.
func TestGreedyIsTheChain(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := range 2000 {
		n := 1 + rng.IntN(300)
		logits := make([]float32, n)
		for i := range logits {
			switch r := rng.IntN(20); {
			case r == 0:
				logits[i] = float32(math.NaN())
			case r == 1 || trial%7 == 0:
				logits[i] = float32(math.Inf(-1))
			default:
				logits[i] = float32(rng.IntN(8)) // ties
			}
		}
		var allow []uint64
		switch trial % 6 {
		case 1:
			allow = slices.Repeat([]uint64{^uint64(0)}, (n+63)/64)
		case 2, 3:
			allow = make([]uint64, (n+63)/64)
			for i := range n {
				if rng.IntN(10) < 2*(trial%6) {
					allow[i>>6] |= 1 << (i & 63)
				}
			}
		case 4:
			allow = make([]uint64, (n+63)/64)
		case 5:
			allow = []uint64{rng.Uint64()} // shorter than the row
		}
		if got, want := greedy(logits, allow), New(Params{}).chain(logits, nil, allow); got != want {
			t.Fatalf("trial %d: greedy %d, the chain %d (logits %v, allow %x)", trial, got, want, logits, allow)
		}
	}
}

// BenchmarkGreedyMasked is one greedy step over Qwen's vocabulary under a dense and a
// full mask, the shortcut and the whole chain.
func BenchmarkGreedyMasked(b *testing.B) {
	logits := make([]float32, 151669)
	for i := range logits {
		logits[i] = float32((i*7919)%1009) / 100
	}
	allow := slices.Repeat([]uint64{0xfff0ffff0fffffff}, (len(logits)+63)/64)
	for _, full := range []bool{false, true} {
		if full {
			allow = slices.Repeat([]uint64{^uint64(0)}, len(allow))
		}
		b.Run(map[bool]string{false: "dense", true: "full"}[full], func(b *testing.B) {
			s := New(Params{})
			b.ReportAllocs()
			for b.Loop() {
				s.SampleMasked(logits, nil, allow)
			}
		})
		b.Run(map[bool]string{false: "dense-chain", true: "full-chain"}[full], func(b *testing.B) {
			s := New(Params{})
			for b.Loop() {
				s.chain(logits, nil, allow)
			}
		})
	}
}
