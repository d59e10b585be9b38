package spec

// Config is a model's speculative decoding (ModelConfig.Speculative, the YAML's
// speculative:). The zero value is off.
type Config struct {
	// NGram drafts from the sequence's own prompt and output (prompt lookup).
	NGram bool `yaml:"ngram"`
	// MaxDraft is the most tokens drafted for one verification step; 0: DefaultMaxDraft.
	MaxDraft int `yaml:"max_draft"`
	// DraftCost is what one drafted position adds to a decode step, as a share of
	// the step (the model's and the machine's: BenchmarkVerifyStep measures it);
	// the draft length controller (Adapt) drafts only where the expected accepted
	// tokens pay for it. 0: DefaultDraftCost. With Measure, only the prior.
	DraftCost float64 `yaml:"draft_cost"`
	// Measure has each replica measure a drafted position's cost online from its
	// own decode steps (Steps), with DraftCost as the prior until the steps tell a
	// slope, so that drafting stops where it does not pay on this model and machine.
	// cmd/lmlite sets it unless the file gives draft_cost.
	Measure bool `yaml:"-"`
	// IgnorePrediction turns off drafting from requests' predictions
	// (Request.Prediction, OpenAI's Predicted Outputs), which are on for every model
	// otherwise, whatever NGram says: a prediction only changes the speed.
	IgnorePrediction bool `yaml:"ignore_prediction"`
	// Pool drafts from the tenant's recent outputs (Pool: per tenant, bounded; a
	// tenant's text never drafts for another), after prompt lookup.
	Pool bool `yaml:"pool"`
	// DraftModel is the id of another configured model with the same vocabulary
	// (checked when the engine starts) whose greedy tokens draft for this one, after
	// every other source; its drafts run batched, one draft step per drafted
	// position. "": none.
	DraftModel string `yaml:"draft_model"`
}

// DefaultMaxDraft is Config.MaxDraft's default.
const DefaultMaxDraft = 8

// On reports whether any draft source is on.
func (c Config) On() bool { return c.NGram || c.Pool || c.DraftModel != "" }

// Max is the configured draft limit with its default.
func (c Config) Max() int {
	if c.MaxDraft > 0 {
		return c.MaxDraft
	}
	return DefaultMaxDraft
}

// Cost is the configured draft cost with its default.
func (c Config) Cost() float64 {
	if c.DraftCost > 0 {
		return c.DraftCost
	}
	return DefaultDraftCost
}

// StepCost is the cost of drafting in a step of base tokens (the decoding
// sequences'): with Measure, a drafted position's share measured from the
// replica's steps s (Steps.Cost); otherwise, or until s tells a slope, Cost(), a
// share of a one-token step, taken to a step of base tokens along the line it
// implies (b/(a+b) = Cost(): Cost()/(1 + Cost()·(base-1))).
func (c Config) StepCost(s *Steps, base int) Cost {
	d := c.Cost()
	d /= 1 + d*float64(max1(base)-1)
	if c.Measure && s != nil {
		d = s.Cost(base, d)
	}
	return Cost{Draft: d, Base: base}
}

// The n-gram lengths Lookup tries, longest first.
const (
	MaxNGram = 4
	MinNGram = 2
)

// Lookup is prompt lookup: it finds the most recent earlier occurrence of the last n
// tokens of seq (n from MaxNGram down to MinNGram, the first length that matches
// wins) and appends to dst up to k of the tokens that followed it, the guess that
// the sequence goes on as it did then. It returns dst unchanged when nothing
// matches. It reads seq only (the sequence's own prompt and output: no other
// sequence's text ever drafts for it).
func Lookup(dst, seq []int32, k int) []int32 {
	if k <= 0 {
		return dst
	}
	for n := min(MaxNGram, len(seq)-1); n >= MinNGram; n-- {
		key := seq[len(seq)-n:]
		// Candidates end before the suffix itself: start i, i+n <= len(seq)-1.
		for i := len(seq) - n - 1; i >= 0; i-- {
			if seq[i] != key[0] || !equal(seq[i:i+n], key) {
				continue
			}
			follow := seq[i+n:]
			return append(dst, follow[:min(k, len(follow))]...)
		}
	}
	return dst
}

func equal(a, b []int32) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// DefaultDraftCost is Config.DraftCost's default: a drafted position's cost as a
// share of a one-token decode step, as BenchmarkVerifyStep measured it on the 125m
// random q4_k_m model on a loaded 2-core machine (a step of 1+k positions cost
// 1.27, 1.30, 1.56, 2.08 and 2.7 one-token steps for k = 1, 2, 4, 8, 16):
// docs/PERFORMANCE.md. A model whose steps are bound by reading the weights pays
// less per position; a tiny one bound by computing, more.
const DefaultDraftCost = 0.15

// Best is the draft length that maximizes the expected tokens a step gives per
// unit of its cost, when each drafted token is accepted with probability p given
// that the ones before it were (a step of k drafts gives 1 + p + … + p^k tokens and
// costs 1 + cost·k one-token steps), among 1…max; 0 when no length gives more than
// a plain decode (one token per step).
func Best(p, cost float64, max int) int { return BestFor(p, Cost{Draft: cost}, max) }

// Cost is what drafting adds to the next step: Draft is one drafted position's time
// as a share of the step without drafts, which computes Base tokens (the decoding
// sequences'; 0 or 1: the sequence alone).
type Cost struct {
	Draft float64
	Base  int
}

// BestFor is Best for a step shared with others: it maximizes the step's tokens per
// unit of its time, (Base-1 + 1 + p + … + p^k) ÷ (1 + Draft·k), among 1…max, so
// that a draft pays only when its expected accepted tokens exceed the time it adds
// to every sequence of the step (the aggregate throughput never falls); 0 when no
// length beats plain decoding (Base tokens per step).
func BestFor(p float64, c Cost, max int) int {
	others := float64(max1(c.Base) - 1)
	best, bestGain := 0, others+1
	exp, pk := 1.0, 1.0
	for k := 1; k <= max; k++ {
		pk *= p
		exp += pk
		if g := (others + exp) / (1 + c.Draft*float64(k)); g > bestGain*(1+1e-12) {
			best, bestGain = k, g
		}
	}
	return best
}

// Steps estimates a replica's decode step time as a line in the tokens the step
// computes, a + b·n, by least squares over its recent decode steps (exponentially
// weighted: each observation keeps stepsDecay of the earlier ones' weight), so
// that Cost reports what a drafted position really costs on this model and machine
// and load: a large model's steps are bound by reading the weights (a small b), a
// tiny one's by computing (b near a). The zero value knows nothing.
type Steps struct {
	w, n, nn, t, nt float64 // decayed sums: weight, n, n², seconds, n·seconds
}

// stepsDecay is the weight the earlier observations keep at each new one.
const stepsDecay = 0.98

// stepsClip bounds an observation against the line's prediction (Observe).
const stepsClip = 1.1

// Observe records a decode step of n tokens that took secs seconds. Once there is
// a line, a step is counted at most stepsClip times what the line predicts: on a
// shared machine a step preempted by other processes takes many times its work
// (never less), and more often the longer the step, which would tilt the line.
// A slower machine still raises the line, by up to a tenth of a step a step; only
// the line's shape, not its height, sets Cost.
func (s *Steps) Observe(n int, secs float64) {
	if n <= 0 || !(secs > 0) {
		return
	}
	x := float64(n)
	if a, b, ok := s.Line(); ok {
		secs = min(secs, stepsClip*(a+b*x))
	}
	s.w = s.w*stepsDecay + 1
	s.n = s.n*stepsDecay + x
	s.nn = s.nn*stepsDecay + x*x
	s.t = s.t*stepsDecay + secs
	s.nt = s.nt*stepsDecay + x*secs
}

// Line is the fitted step time a + b·n (seconds); ok is false while the steps tell
// no slope (too few, or nearly all of one size).
func (s *Steps) Line() (a, b float64, ok bool) {
	if s.w < 4 {
		return 0, 0, false
	}
	mn, mt := s.n/s.w, s.t/s.w
	vn := s.nn/s.w - mn*mn
	if vn < 0.05 {
		return 0, 0, false
	}
	b = max(0, (s.nt/s.w-mn*mt)/vn) // a negative slope is noise: positions never save time
	a = mt - b*mn
	if a+b <= 0 {
		return 0, 0, false
	}
	return a, b, true
}

// Cost is a drafted position's cost as a share of a step of base tokens, b ÷ (a +
// b·base), from the fitted line; prior while there is none.
func (s *Steps) Cost(base int, prior float64) float64 {
	a, b, ok := s.Line()
	if !ok {
		return prior
	}
	t := a + b*float64(max1(base))
	if t <= 0 {
		return prior
	}
	return b / t
}

// Adapt is one sequence's draft length controller. It estimates the chance p that
// a drafted token is accepted (given the ones before it were) from the sequence's
// recent verifications, and drafts Best(p) tokens: the draft grows while drafts hit
// and shrinks on misses. Where no length pays, it stops drafting for a pause that
// doubles with each further such verification (up to maxPause decode steps), then
// probes with one token. The zero value starts at the prior p = 1/2.
type Adapt struct {
	Hits, Tries float64 // decayed counts: drafted tokens accepted, and verified (accepted, or the first rejected)
	Misses      int     // consecutive verifications after which no length paid
	Pause       int     // decode steps left without drafting
}

// decay is the weight an older verification keeps at each new one (recent
// behaviour counts most: a story that starts repeating is drafted for soon).
const decay = 0.6

// maxPause is the longest pause, in decode steps.
const maxPause = 64

// p is the estimated acceptance chance: the counts with a prior of a quarter hit
// in half a try (1/2 at first, and light enough that steady misses bring p to
// 0.25/(0.5+1/(1-decay)) = 1/12, under the default DraftCost, so drafting stops).
func (a *Adapt) p() float64 { return (a.Hits + 0.25) / (a.Tries + 0.5) }

// Want is how many tokens to draft in the next decode step, at most max, for the
// step's cost c: 0 while paused; at least 1 otherwise (a probe after a pause).
func (a *Adapt) Want(max int, c Cost) int {
	if a.Pause > 0 || max <= 0 {
		return 0
	}
	return min(max, max1(BestFor(a.p(), c, max)))
}

// Skip records a decode step taken without a verification (paused, or nothing
// to draft): a pause runs down by one.
func (a *Adapt) Skip() {
	if a.Pause > 0 {
		a.Pause--
	}
}

// Verified records a verification of drafted tokens of which accepted were
// accepted (in order; accepted <= drafted), for the draft limit max and the cost
// of the next step c.
func (a *Adapt) Verified(drafted, accepted, max int, c Cost) {
	if drafted <= 0 {
		return
	}
	a.Hits = a.Hits*decay + float64(accepted)
	a.Tries = a.Tries*decay + float64(accepted)
	if accepted < drafted {
		a.Tries++ // the first rejected token; the ones after it were never in question
	}
	if BestFor(a.p(), c, max) > 0 {
		a.Misses = 0
		return
	}
	a.Misses++
	a.Pause = min(maxPause, 4<<min(a.Misses-1, 8))
}

func max1(k int) int { return max(k, 1) }
