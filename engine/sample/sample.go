package sample

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync"
)

// Params are one request's sampling parameters, field for field engine.Sampling.
// The zero value is greedy decoding without penalties.
type Params struct {
	Temperature      float32 // <= 0: greedy
	TopK             int     // <= 0: off
	TopP             float32 // <= 0 or >= 1: off
	MinP             float32 // <= 0: off
	RepeatPenalty    float32 // 0 or 1: off
	PresencePenalty  float32
	FrequencyPenalty float32
	RepeatLastN      int    // tokens the penalties look back over; 0: 64; < 0: all of the history
	Seed             uint64 // the same seed gives the same tokens
	IgnoreEOS        bool   // not the sampler's: the engine removes the end-of-generation tokens before sampling
	// LogitBias is added to the logits of its tokens before anything else (penalties,
	// the mask, filters, temperature), as OpenAI's logit_bias: -100 all but bans a
	// token, +100 all but forces it. It depends on the token alone, never on the
	// batch. Ids outside the row are ignored.
	LogitBias []Bias
}

// Bias is one token's logit bias.
type Bias struct {
	ID   int32
	Bias float32
}

// DefaultRepeatLastN is the window of the penalties when Params.RepeatLastN is 0.
const DefaultRepeatLastN = 64

// Sampler picks tokens for one sequence. It owns its random state (seeded from
// Params.Seed) and reuses its buffers, so Sample does not allocate once the buffers
// have grown to the vocabulary. A Sampler is not safe for concurrent use: give each
// sequence its own.
type Sampler struct {
	p   Params
	rng *rand.Rand

	cand []candidate // the candidates of the current step
	n    int         // the vocabulary of the current step
	win  []int32     // the penalty window, sorted
	w    []float64   // the draw's unnormalised probabilities
	kept []float32   // the biased tokens' logits, restored after the step
}

type candidate struct {
	id    int32
	logit float32
}

// spares holds the buffers of released samplers (*buffers): a request's sampler
// grows them to the vocabulary on its first token, and a server starts a sampler
// for every request (a batch job, ~200 a second), so without reuse these were a
// third of the bytes a busy server allocated, and the garbage collections they
// caused slowed every request's steps.
var spares sync.Pool

type buffers struct {
	cand []candidate
	win  []int32
	w    []float64
}

// Release hands the sampler's buffers to the next sampler (its sequence has ended).
// The sampler stays usable: it takes buffers again when it next samples. Every
// buffer is written before it is read, so what a released buffer held never shows.
func (s *Sampler) Release() {
	if s.cand == nil && s.w == nil && s.win == nil {
		return
	}
	spares.Put(&buffers{cand: s.cand[:0], win: s.win[:0], w: s.w[:0]})
	s.cand, s.win, s.w = nil, nil, nil
}

func (s *Sampler) takeSpare() {
	if b, ok := spares.Get().(*buffers); ok {
		s.cand, s.win, s.w = b.cand, b.win, b.w
	}
}

// New returns a Sampler for p.
func New(p Params) *Sampler {
	return &Sampler{p: p, rng: rand.New(rand.NewPCG(p.Seed, p.Seed^0x9e3779b97f4a7c15))}
}

// Params returns the sampler's parameters.
func (s *Sampler) Params() Params { return s.p }

// Sample picks the next token from the logits of the last position, given the
// sequence's tokens so far (prompt and output: history is read, never kept). The
// chain is llama.cpp's default: penalties, top-k, top-p, min-p, temperature, then a
// draw from the distribution; with Temperature <= 0 it takes the most likely token
// after the penalties. NaN logits count as -Inf. It returns -1 for empty logits.
func (s *Sampler) Sample(logits []float32, history []int32) int32 {
	return s.SampleMasked(logits, history, nil)
}

// SampleMasked is Sample over the tokens of allow only (a bit set: bit id%64 of
// word id/64; nil allows all): the others count as -Inf from the start, as a
// grammar's mask asks. The draw consumes the same randomness as Sample, so a
// sequence's tokens depend only on its own logits, mask and seed. If allow leaves
// no token with a finite logit, it returns the lowest allowed id (or -1 if allow is
// empty).
func (s *Sampler) SampleMasked(logits []float32, history []int32, allow []uint64) int32 {
	if len(logits) == 0 {
		return -1
	}
	if len(s.p.LogitBias) > 0 {
		// Bias the row for this step and give it back as it came: the caller's
		// logprobs are the model's.
		s.kept = s.kept[:0]
		for _, b := range s.p.LogitBias {
			if b.ID >= 0 && int(b.ID) < len(logits) {
				s.kept = append(s.kept, logits[b.ID])
				logits[b.ID] += b.Bias
			}
		}
		id := s.sampleMasked(logits, history, allow)
		k := 0
		for _, b := range s.p.LogitBias {
			if b.ID >= 0 && int(b.ID) < len(logits) {
				logits[b.ID] = s.kept[k]
				k++
			}
		}
		return id
	}
	return s.sampleMasked(logits, history, allow)
}

func (s *Sampler) sampleMasked(logits []float32, history []int32, allow []uint64) int32 {
	if s.p.Temperature <= 0 && !s.penalizes() {
		return greedy(logits, allow)
	}
	return s.chain(logits, history, allow)
}

// penalizes reports whether the sampler has a penalty to apply.
func (s *Sampler) penalizes() bool {
	rep := s.p.RepeatPenalty
	return (rep != 0 && rep != 1) || s.p.PresencePenalty != 0 || s.p.FrequencyPenalty != 0
}

// greedy is the chain's answer at temperature 0 without penalties, without copying
// the row into candidates: the allowed token (allow nil: any) with the highest
// logit, NaN counting as -Inf, ties to the lower id; the lowest allowed id when
// every allowed logit is -Inf; -1 when allow has no token of the row.
func greedy(logits []float32, allow []uint64) int32 {
	best, bestL := -1, float32(math.Inf(-1))
	if allow == nil {
		for i, l := range logits {
			if l > bestL || best < 0 { // NaN > x is false: NaN counts as -Inf
				if l != l {
					l = float32(math.Inf(-1))
				}
				best, bestL = i, l
			}
		}
		return int32(best)
	}
	for w, x := range allow {
		base := w * 64
		if x == ^uint64(0) && base+64 <= len(logits) {
			// A word of allowed tokens (most of a free-text grammar state's): scan it.
			for k, l := range logits[base : base+64] {
				if l > bestL || best < 0 {
					if l != l {
						l = float32(math.Inf(-1))
					}
					best, bestL = base+k, l
				}
			}
			continue
		}
		for ; x != 0; x &= x - 1 {
			i := base + bits.TrailingZeros64(x)
			if i >= len(logits) {
				return int32(best)
			}
			if l := logits[i]; l > bestL || best < 0 {
				if l != l {
					l = float32(math.Inf(-1))
				}
				best, bestL = i, l
			}
		}
	}
	return int32(best)
}

// chain is SampleMasked through the whole chain: penalties, filters, temperature
// and the draw.
func (s *Sampler) chain(logits []float32, history []int32, allow []uint64) int32 {
	n := len(logits)
	s.n = n
	if s.cand == nil && s.w == nil && s.win == nil {
		s.takeSpare()
	}
	if cap(s.cand) < n {
		s.cand = make([]candidate, n)
	}
	c := s.cand[:n]
	if allow != nil && sparse(allow, n) {
		// Few tokens allowed (a grammar between values): the chain runs over them
		// alone, in id order, as it would over the -Inf-filled row.
		c = c[:0]
		for w, x := range allow {
			for ; x != 0; x &= x - 1 {
				i := w*64 + bits.TrailingZeros64(x)
				if i >= n {
					break
				}
				l := logits[i]
				if l != l {
					l = float32(math.Inf(-1))
				}
				c = append(c, candidate{id: int32(i), logit: l})
			}
		}
		if len(c) == 0 {
			return -1
		}
		id := s.sample(c, history)
		if id < 0 || allow[id>>6]&(1<<(id&63)) == 0 {
			return c[0].id // every allowed logit was -Inf (or NaN)
		}
		return id
	}
	if cap(s.cand) < n {
		s.cand = make([]candidate, n)
	}
	c = s.cand[:n]
	for i, l := range logits {
		if l != l { // NaN
			l = float32(math.Inf(-1))
		}
		c[i] = candidate{id: int32(i), logit: l}
	}
	if allow != nil {
		first := int32(-1)
		for i := range c {
			if w := i >> 6; w >= len(allow) || allow[w]&(1<<(i&63)) == 0 {
				c[i].logit = float32(math.Inf(-1))
			} else if first < 0 {
				first = int32(i)
			}
		}
		id := s.sample(c, history)
		if id < 0 || int(id>>6) >= len(allow) || allow[id>>6]&(1<<(id&63)) == 0 {
			return first // every allowed logit was -Inf (or NaN)
		}
		return id
	}
	return s.sample(c, history)
}

// sample runs the chain over the candidates c (in id order).
func (s *Sampler) sample(c []candidate, history []int32) int32 {
	s.penalize(c, history)

	if s.p.Temperature <= 0 {
		return argmax(c)
	}
	sorted := false
	if k := s.p.TopK; k > 0 && k < len(c) {
		selectTop(c, k)
		c = c[:k]
		sortDesc(c)
		sorted = true
	}
	if p := s.p.TopP; p > 0 && p < 1 {
		c = topP(c, float64(p), sorted)
		sorted = true
	}
	if p := s.p.MinP; p > 0 {
		c = minP(c, float64(p))
	}
	inv := 1 / s.p.Temperature
	for i := range c {
		c[i].logit *= inv
	}
	return s.draw(c)
}

// penalize applies the repetition penalty (llama.cpp: divide a positive logit,
// multiply a negative one) and the presence and frequency penalties (OpenAI: subtract
// presence once and frequency once per occurrence) to the tokens of the last
// RepeatLastN entries of history. c is in id order.
func (s *Sampler) penalize(c []candidate, history []int32) {
	rep, pres, freq := s.p.RepeatPenalty, s.p.PresencePenalty, s.p.FrequencyPenalty
	if (rep == 0 || rep == 1) && pres == 0 && freq == 0 {
		return
	}
	n := s.p.RepeatLastN
	if n == 0 {
		n = DefaultRepeatLastN
	}
	if n > 0 && len(history) > n {
		history = history[len(history)-n:]
	}
	s.win = append(s.win[:0], history...)
	slices.Sort(s.win)
	for i := 0; i < len(s.win); {
		id := s.win[i]
		j := i + 1
		for j < len(s.win) && s.win[j] == id {
			j++
		}
		count := j - i
		i = j
		k := int(id)
		if len(c) < s.n {
			// A sparse candidate list (in id order): find id in it.
			var found bool
			k, found = slices.BinarySearchFunc(c, id, func(x candidate, id int32) int { return int(x.id - id) })
			if !found {
				continue
			}
		}
		if k < 0 || k >= len(c) {
			continue
		}
		l := c[k].logit
		if rep != 0 && rep != 1 {
			if l <= 0 {
				l *= rep
			} else {
				l /= rep
			}
		}
		l -= float32(count)*freq + pres
		c[k].logit = l
	}
}

// less orders candidates by logit, highest first, then by id: a total order, so
// every step is deterministic.
func less(a, b candidate) bool {
	if a.logit != b.logit {
		return a.logit > b.logit
	}
	return a.id < b.id
}

func argmax(c []candidate) int32 {
	best := c[0]
	for _, x := range c[1:] {
		if less(x, best) {
			best = x
		}
	}
	return best.id
}

func sortDesc(c []candidate) {
	slices.SortFunc(c, func(a, b candidate) int {
		if less(a, b) {
			return -1
		}
		if less(b, a) {
			return 1
		}
		return 0
	})
}

// selectTop reorders c so that its first k entries are the k best (in no order):
// quickselect with a median-of-three pivot, O(len(c)) on average.
func selectTop(c []candidate, k int) {
	lo, hi := 0, len(c)-1
	for lo < hi {
		mid := lo + (hi-lo)/2
		// Median of three into c[mid].
		if less(c[mid], c[lo]) {
			c[mid], c[lo] = c[lo], c[mid]
		}
		if less(c[hi], c[lo]) {
			c[hi], c[lo] = c[lo], c[hi]
		}
		if less(c[hi], c[mid]) {
			c[hi], c[mid] = c[mid], c[hi]
		}
		pivot := c[mid]
		c[mid], c[hi] = c[hi], c[mid]
		store := lo
		for i := lo; i < hi; i++ {
			if less(c[i], pivot) {
				c[i], c[store] = c[store], c[i]
				store++
			}
		}
		c[store], c[hi] = c[hi], c[store]
		switch {
		case store == k-1 || store == k:
			return
		case store < k:
			lo = store + 1
		default:
			hi = store - 1
		}
	}
}

// softmaxSum returns the largest logit and the sum of exp(logit - max) over c.
func softmaxSum(c []candidate) (maxL float32, sum float64) {
	maxL = float32(math.Inf(-1))
	for _, x := range c {
		maxL = max(maxL, x.logit)
	}
	if math.IsInf(float64(maxL), -1) {
		return maxL, 0
	}
	for _, x := range c {
		sum += math.Exp(float64(x.logit - maxL))
	}
	return maxL, sum
}

// topPartial is how many candidates topP sorts first, hoping they hold the mass.
const topPartial = 256

// topP keeps the smallest prefix of the best candidates whose probability reaches p
// (at least one), as llama.cpp's top-p. It returns c sorted, best first.
func topP(c []candidate, p float64, sorted bool) []candidate {
	maxL, sum := softmaxSum(c)
	if sum == 0 || math.IsInf(sum, 0) || sum != sum {
		if !sorted {
			sortDesc(c)
		}
		return c[:1]
	}
	cut := func(c []candidate) ([]candidate, bool) {
		cum := 0.0
		for i, x := range c {
			cum += math.Exp(float64(x.logit-maxL)) / sum
			if cum >= p {
				return c[:i+1], true
			}
		}
		return c, false
	}
	if !sorted {
		// Most of the mass usually sits in few tokens: sort only the best ones,
		// four times more while they fall short of p, then everything.
		for k := topPartial; k < len(c)/2; k *= 4 {
			selectTop(c, k)
			sortDesc(c[:k])
			if kept, ok := cut(c[:k]); ok {
				return kept
			}
		}
	}
	if !sorted {
		sortDesc(c)
	}
	kept, _ := cut(c)
	return kept
}

// minP keeps the candidates whose probability is at least p times the best one's,
// as llama.cpp's min-p (on logits: logit >= max + ln p). Order is kept.
func minP(c []candidate, p float64) []candidate {
	maxL := float32(math.Inf(-1))
	for _, x := range c {
		maxL = max(maxL, x.logit)
	}
	thr := float64(maxL) + math.Log(p)
	out := c[:0]
	for _, x := range c {
		if float64(x.logit) >= thr {
			out = append(out, x)
		}
	}
	if len(out) == 0 { // p > 1 cuts everything: keep the best
		best := 0
		for i := range c {
			if less(c[i], c[best]) {
				best = i
			}
		}
		c[0] = c[best]
		return c[:1]
	}
	return out
}

// draw picks a candidate with probability softmax(logit).
func (s *Sampler) draw(c []candidate) int32 {
	maxL := float32(math.Inf(-1))
	for _, x := range c {
		maxL = max(maxL, x.logit)
	}
	if math.IsInf(float64(maxL), 0) {
		return argmax(c)
	}
	if cap(s.w) < len(c) {
		s.w = make([]float64, len(c))
	}
	w := s.w[:len(c)]
	sum := 0.0
	for i, x := range c {
		w[i] = math.Exp(float64(x.logit - maxL))
		sum += w[i]
	}
	r := s.rng.Float64() * sum
	cum := 0.0
	for i, x := range c {
		cum += w[i]
		if r < cum {
			return x.id
		}
	}
	// Rounding left r at the very top: take the last candidate with mass.
	for i := len(c) - 1; i >= 0; i-- {
		if w[i] > 0 {
			return c[i].id
		}
	}
	return argmax(c)
}

// sparse reports whether allow holds fewer than a quarter of n tokens: then the
// chain runs over the allowed tokens alone.
func sparse(allow []uint64, n int) bool {
	count := 0
	for _, x := range allow {
		count += bits.OnesCount64(x)
	}
	return count < n/4
}
