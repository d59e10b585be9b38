package sample

import (
	"math"
	"slices"
	"testing"
)

func logProbs(p ...float64) []float32 {
	out := make([]float32, len(p))
	for i, x := range p {
		out[i] = float32(math.Log(x))
	}
	return out
}

func TestGreedy(t *testing.T) {
	tests := []struct {
		name   string
		p      Params
		logits []float32
		hist   []int32
		want   int32
	}{
		{"argmax", Params{}, []float32{0.1, 3, -1, 2.9}, nil, 1},
		{"tie takes the lowest id", Params{}, []float32{1, 5, 5, 0}, nil, 1},
		{"negative temperature", Params{Temperature: -1, Seed: 9}, []float32{0.1, 3, -1}, nil, 1},
		{"NaN counts as -Inf", Params{}, []float32{float32(math.NaN()), -5, -6}, nil, 1},
		{"all -Inf", Params{}, []float32{float32(math.Inf(-1)), float32(math.Inf(-1))}, nil, 0},
		{"repeat penalty moves greedy", Params{RepeatPenalty: 2}, []float32{1, 3, 2}, []int32{1}, 2},
		{"presence penalty moves greedy", Params{PresencePenalty: 1.5}, []float32{1, 3, 2}, []int32{1, 1}, 2},
		{"penalty window excludes old tokens", Params{RepeatPenalty: 10, RepeatLastN: 1}, []float32{1, 3, 2}, []int32{1, 0}, 1},
		{"history out of range ignored", Params{RepeatPenalty: 2}, []float32{1, 3}, []int32{-1, 7}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := New(tc.p).Sample(tc.logits, tc.hist); got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
	if got := New(Params{}).Sample(nil, nil); got != -1 {
		t.Errorf("empty logits: got %d, want -1", got)
	}
}

func TestPenalties(t *testing.T) {
	tests := []struct {
		name string
		p    Params
		hist []int32
		want []float32
	}{
		{"off", Params{}, []int32{0, 1}, []float32{2, -2, 1, 0}},
		{"repeat divides positive, multiplies negative", Params{RepeatPenalty: 2}, []int32{0, 1, 1}, []float32{1, -4, 1, 0}},
		{"repeat on zero logit", Params{RepeatPenalty: 2}, []int32{3}, []float32{2, -2, 1, 0}},
		{"frequency per occurrence", Params{FrequencyPenalty: 0.5}, []int32{0, 1, 1}, []float32{1.5, -3, 1, 0}},
		{"presence once", Params{PresencePenalty: 0.25}, []int32{0, 1, 1}, []float32{1.75, -2.25, 1, 0}},
		{"all three", Params{RepeatPenalty: 2, FrequencyPenalty: 0.5, PresencePenalty: 0.25}, []int32{0, 1, 1}, []float32{0.25, -5.25, 1, 0}},
		{"last N", Params{FrequencyPenalty: 1, RepeatLastN: 2}, []int32{0, 0, 2, 2, 1, 2}, []float32{2, -3, 0, 0}},
		{"all history", Params{FrequencyPenalty: 1, RepeatLastN: -1}, []int32{0, 0, 2, 2, 1, 2}, []float32{0, -3, -2, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := New(tc.p)
			logits := []float32{2, -2, 1, 0}
			c := make([]candidate, len(logits))
			for i, l := range logits {
				c[i] = candidate{int32(i), l}
			}
			s.penalize(c, tc.hist)
			for i := range c {
				if math.Abs(float64(c[i].logit-tc.want[i])) > 1e-6 {
					t.Fatalf("logits %v, want %v", c, tc.want)
				}
			}
		})
	}
	// The default window is 64 tokens.
	s := New(Params{FrequencyPenalty: 1})
	hist := append(slices.Repeat([]int32{0}, 10), slices.Repeat([]int32{1}, 64)...)
	c := []candidate{{0, 0}, {1, 0}}
	s.penalize(c, hist)
	if c[0].logit != 0 || c[1].logit != -64 {
		t.Errorf("default window: %v", c)
	}
}

func ids(c []candidate) []int32 {
	out := make([]int32, len(c))
	for i, x := range c {
		out[i] = x.id
	}
	slices.Sort(out)
	return out
}

func cands(logits []float32) []candidate {
	c := make([]candidate, len(logits))
	for i, l := range logits {
		c[i] = candidate{int32(i), l}
	}
	return c
}

func TestTopP(t *testing.T) {
	// Probabilities 0.5, 0.3, 0.15, 0.05 in scrambled id order.
	logits := logProbs(0.15, 0.5, 0.05, 0.3)
	tests := []struct {
		p    float64
		want []int32
	}{
		{0.1, []int32{1}},
		{0.5, []int32{1}},
		{0.51, []int32{1, 3}},
		{0.8, []int32{1, 3}},
		{0.81, []int32{0, 1, 3}},
		{0.95, []int32{0, 1, 3}},
		{0.99, []int32{0, 1, 2, 3}},
	}
	for _, tc := range tests {
		for _, sorted := range []bool{false, true} {
			c := cands(logits)
			if sorted {
				sortDesc(c)
			}
			if got := ids(topP(c, tc.p, sorted)); !slices.Equal(got, tc.want) {
				t.Errorf("top-p %v (sorted %v): kept %v, want %v", tc.p, sorted, got, tc.want)
			}
		}
	}
}

// TestTopPPartial checks that the partial sort of large vocabularies keeps exactly
// what a full sort keeps, both when the best tokens hold the mass and when not.
func TestTopPPartial(t *testing.T) {
	for _, tc := range []struct {
		name  string
		slope float64
	}{{"peaked", 0.05}, {"middle", 0.002}, {"flat", 0.0001}} {
		t.Run(tc.name, func(t *testing.T) {
			n := 5000
			logits := make([]float32, n)
			for i := range logits {
				// A scrambled order of decreasing logits.
				j := (i * 7919) % n
				logits[j] = float32(-tc.slope * float64(i))
			}
			for _, p := range []float64{0.3, 0.9, 0.999} {
				full := cands(logits)
				sortDesc(full)
				want := ids(topP(full, p, true))
				got := ids(topP(cands(logits), p, false))
				if !slices.Equal(got, want) {
					t.Errorf("p=%v: partial kept %d tokens, full sort %d", p, len(got), len(want))
				}
			}
		})
	}
}

func TestMinP(t *testing.T) {
	logits := logProbs(0.15, 0.5, 0.05, 0.3)
	tests := []struct {
		p    float64
		want []int32
	}{
		{0.05, []int32{0, 1, 2, 3}},
		{0.2, []int32{0, 1, 3}},
		{0.31, []int32{1, 3}},
		{0.7, []int32{1}},
		{1.5, []int32{1}},
	}
	for _, tc := range tests {
		if got := ids(minP(cands(logits), tc.p)); !slices.Equal(got, tc.want) {
			t.Errorf("min-p %v: kept %v, want %v", tc.p, got, tc.want)
		}
	}
}

func TestSelectTop(t *testing.T) {
	n := 1000
	logits := make([]float32, n)
	for i := range logits {
		logits[i] = float32((i * 7919) % 997) // with ties
	}
	full := cands(logits)
	sortDesc(full)
	for _, k := range []int{1, 2, 3, 10, 500, 999} {
		c := cands(logits)
		selectTop(c, k)
		got := c[:k]
		sortDesc(got)
		if !slices.Equal(got, full[:k]) {
			t.Errorf("k=%d: selection differs from the sorted prefix", k)
		}
	}
}

// TestSampledSets checks the whole chain: what a filter allows is what comes out.
func TestSampledSets(t *testing.T) {
	logits := logProbs(0.15, 0.5, 0.05, 0.3)
	tests := []struct {
		name string
		p    Params
		want []int32
	}{
		{"temperature only", Params{Temperature: 1}, []int32{0, 1, 2, 3}},
		{"top-k 2", Params{Temperature: 1, TopK: 2}, []int32{1, 3}},
		{"top-k 1 is greedy", Params{Temperature: 5, TopK: 1}, []int32{1}},
		{"top-p 0.75", Params{Temperature: 1, TopP: 0.75}, []int32{1, 3}},
		{"min-p 0.2", Params{Temperature: 1, MinP: 0.2}, []int32{0, 1, 3}},
		{"top-k 3 then min-p 0.4", Params{Temperature: 1, TopK: 3, MinP: 0.4}, []int32{1, 3}},
		{"high temperature after top-p", Params{Temperature: 100, TopP: 0.6}, []int32{1, 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seen := map[int32]bool{}
			for seed := range uint64(200) {
				p := tc.p
				p.Seed = seed
				seen[New(p).Sample(logits, nil)] = true
			}
			var got []int32
			for id := range seen {
				got = append(got, id)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("sampled %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSeed(t *testing.T) {
	logits := make([]float32, 100)
	for i := range logits {
		logits[i] = float32(i%10) * 0.1
	}
	run := func(seed uint64) []int32 {
		s := New(Params{Temperature: 1, TopP: 0.95, Seed: seed})
		out := make([]int32, 50)
		var hist []int32
		for i := range out {
			out[i] = s.Sample(logits, hist)
			hist = append(hist, out[i])
		}
		return out
	}
	a, b := run(42), run(42)
	if !slices.Equal(a, b) {
		t.Errorf("same seed differs:\n%v\n%v", a, b)
	}
	if c := run(43); slices.Equal(a, c) {
		t.Errorf("seeds 42 and 43 gave the same tokens %v", a)
	}
	// Two samplers interleaved do not disturb each other.
	s1, s2 := New(Params{Temperature: 1, Seed: 42, TopP: 0.95}), New(Params{Temperature: 1, Seed: 7})
	var hist []int32
	for i := range a {
		got := s1.Sample(logits, hist)
		s2.Sample(logits, nil)
		if got != a[i] {
			t.Fatalf("interleaved sampler diverged at %d", i)
		}
		hist = append(hist, got)
	}
}

// TestDistribution checks that temperature sampling follows softmax(logits/T).
func TestDistribution(t *testing.T) {
	probs := []float64{0.1, 0.2, 0.3, 0.4}
	logits := logProbs(probs...)
	for _, temp := range []float32{1, 0.5, 2} {
		want := make([]float64, len(probs))
		sum := 0.0
		for i, p := range probs {
			want[i] = math.Pow(p, 1/float64(temp))
			sum += want[i]
		}
		s := New(Params{Temperature: temp, Seed: 1})
		const n = 100_000
		counts := make([]float64, len(probs))
		for range n {
			counts[s.Sample(logits, nil)]++
		}
		for i := range want {
			want[i] /= sum
			got := counts[i] / n
			// Standard error is at most 0.0016; allow 5 of them.
			if math.Abs(got-want[i]) > 0.008 {
				t.Errorf("T=%v token %d: frequency %.4f, want %.4f", temp, i, got, want[i])
			}
		}
	}
}

func TestAllocs(t *testing.T) {
	logits := make([]float32, 32000)
	for i := range logits {
		logits[i] = float32((i*7919)%1000) / 100
	}
	hist := []int32{1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 1, 2, 3}
	for _, p := range []Params{
		{},
		{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05, RepeatPenalty: 1.1, PresencePenalty: 0.1, FrequencyPenalty: 0.1, Seed: 3},
		{Temperature: 0.8, TopP: 0.9, RepeatPenalty: 1.1, Seed: 3},
		{Temperature: 1},
	} {
		s := New(p)
		s.Sample(logits, hist) // grow the buffers
		if a := testing.AllocsPerRun(20, func() { s.Sample(logits, hist) }); a != 0 {
			t.Errorf("%+v: %v allocations per Sample", p, a)
		}
	}
}

func FuzzSample(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 200, 9}, uint64(1), float32(0.7), 3, float32(0.9), float32(0.05), float32(1.1))
	f.Add([]byte{}, uint64(0), float32(0), 0, float32(0), float32(0), float32(0))
	f.Fuzz(func(t *testing.T, raw []byte, seed uint64, temp float32, topK int, topP, minP, rep float32) {
		logits := make([]float32, len(raw)/2)
		for i := range logits {
			logits[i] = float32(int8(raw[2*i])) / 8
			if raw[2*i+1] == 255 {
				logits[i] = float32(math.NaN())
			} else if raw[2*i+1] == 254 {
				logits[i] = float32(math.Inf(int(raw[2*i]%2)*2 - 1))
			}
		}
		hist := make([]int32, len(raw))
		for i, b := range raw {
			hist[i] = int32(b) - 3
		}
		s := New(Params{Temperature: temp, TopK: topK, TopP: topP, MinP: minP, RepeatPenalty: rep, Seed: seed, FrequencyPenalty: 0.1})
		got := s.Sample(logits, hist)
		if len(logits) == 0 {
			if got != -1 {
				t.Fatalf("empty logits gave %d", got)
			}
			return
		}
		if got < 0 || int(got) >= len(logits) {
			t.Fatalf("token %d out of range [0,%d)", got, len(logits))
		}
	})
}

// TestTopKOneIsGreedy: with top-k 1 any temperature and seed gives the greedy token,
// penalties included.
func TestTopKOneIsGreedy(t *testing.T) {
	logits := make([]float32, 1000)
	hist := []int32{3, 3, 17, 999}
	for seed := range uint64(50) {
		for i := range logits {
			logits[i] = float32((int(seed)*31+i*7919)%1009) / 50
		}
		greedy := New(Params{RepeatPenalty: 1.3, FrequencyPenalty: 0.2}).Sample(logits, hist)
		got := New(Params{Temperature: 1.5, TopK: 1, RepeatPenalty: 1.3, FrequencyPenalty: 0.2, Seed: seed}).Sample(logits, hist)
		if got != greedy {
			t.Fatalf("seed %d: top-k 1 gave %d, greedy %d", seed, got, greedy)
		}
	}
}

// TestReleasedBuffersDoNotChangeTokens: a sampler that takes the buffers another
// released (grown on other logits, with a longer history, and a masked draw) picks
// the same tokens as a sampler that grew its own, for every chain.
func TestReleasedBuffersDoNotChangeTokens(t *testing.T) {
	logits := make([]float32, 5000)
	for i := range logits {
		logits[i] = float32((i*7919)%1000) / 300
	}
	other := make([]float32, 7000)
	for i := range other {
		other[i] = float32((i*104729)%997) / 50
	}
	run := func(s *Sampler) []int32 {
		var hist []int32
		out := make([]int32, 40)
		for i := range out {
			out[i] = s.Sample(logits, hist)
			hist = append(hist, out[i])
		}
		return out
	}
	for _, p := range []Params{
		{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05, RepeatPenalty: 1.1, PresencePenalty: 0.1, FrequencyPenalty: 0.1, Seed: 3},
		{Temperature: 1, Seed: 9},
		{Temperature: 0.7, TopP: 0.5, RepeatPenalty: 1.3, RepeatLastN: -1, Seed: 5},
		{RepeatPenalty: 1.2}, // greedy after penalties: the chain without a draw
	} {
		for spares.Get() != nil { // no spare: the reference grows its own
		}
		want := run(New(p))
		d := New(Params{Temperature: 1.5, RepeatPenalty: 1.5, RepeatLastN: -1, Seed: 77})
		hist := make([]int32, 3000)
		for i := range hist {
			hist[i] = int32(i * 3 % 7000)
		}
		for range 5 {
			d.Sample(other, hist)
		}
		allow := make([]uint64, (len(other)+63)/64)
		allow[3] = 0xf0f0
		d.SampleMasked(other, hist, allow)
		dirty := &d.cand[:1][0]
		d.Release()
		if d.cand != nil || d.w != nil || d.win != nil {
			t.Fatalf("Release kept buffers")
		}
		s := New(p)
		got := run(s)
		if !slices.Equal(got, want) {
			t.Errorf("%+v: with a released sampler's buffers\n%v\nwant\n%v", p, got, want)
		}
		if !raceEnabled && &s.cand[:1][0] != dirty { // the race detector drops sync.Pool items at random
			t.Errorf("%+v: the new sampler did not take the released buffers", p)
		}
	}
}

// TestReleaseSavesTheBuffers: a request's sampler that takes the buffers of one
// released before allocates nothing to sample its first token beyond what New and
// Release do themselves (without Release: its candidates, window and weights).
func TestReleaseSavesTheBuffers(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector drops sync.Pool items at random")
	}
	logits := make([]float32, 32000)
	for i := range logits {
		logits[i] = float32((i*7919)%1000) / 100
	}
	hist := []int32{1, 2, 3, 5, 8, 13}
	p := Params{Temperature: 0.8, TopP: 0.95, RepeatPenalty: 1.1, Seed: 3}
	own := testing.AllocsPerRun(20, func() { New(p).Sample(logits, hist) })
	bare := testing.AllocsPerRun(20, func() { New(p).Release() })
	s := New(p)
	s.Sample(logits, hist)
	s.Release()
	reused := testing.AllocsPerRun(20, func() {
		s := New(p)
		s.Sample(logits, hist)
		s.Release()
	})
	if reused > bare+1 { // +1: Release's own record of the buffers
		t.Errorf("a sampler on released buffers allocates %v times for its first token; New and Release alone %v", reused, bare)
	}
	if own <= reused {
		t.Errorf("without Release %v allocations, with it %v: Release saves nothing", own, reused)
	}
}
