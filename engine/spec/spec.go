package spec

// Config is a model's speculative decoding (ModelConfig.Speculative, the YAML's
// speculative:). The zero value is off.
type Config struct {
	// NGram drafts from the sequence's own prompt and output (prompt lookup).
	NGram bool `yaml:"ngram"`
	// MaxDraft is the most tokens drafted for one verification step; 0: DefaultMaxDraft.
	MaxDraft int `yaml:"max_draft"`
}

// DefaultMaxDraft is Config.MaxDraft's default.
const DefaultMaxDraft = 8

// On reports whether any draft source is on.
func (c Config) On() bool { return c.NGram }

// Max is the configured draft limit with its default.
func (c Config) Max() int {
	if c.MaxDraft > 0 {
		return c.MaxDraft
	}
	return DefaultMaxDraft
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

// Adapt is one sequence's draft length controller: it grows the draft after steps
// whose drafts were all accepted, shrinks it after misses, and after repeated steps
// where nothing was accepted pauses drafting (a verification step that accepts
// nothing costs the drafted positions' compute for no token), for a pause that
// doubles with each further miss, then probes again with one token. The zero value
// is ready (it starts at StartDraft).
type Adapt struct {
	K      int // tokens to draft in the next step (0: StartDraft)
	Misses int // consecutive steps that accepted no draft
	Pause  int // decode steps left without drafting
}

// StartDraft is the first draft length of a sequence.
const StartDraft = 4

// missesToPause is how many consecutive rejected drafts pause drafting.
const missesToPause = 2

// maxPause is the longest pause, in decode steps.
const maxPause = 64

// Want is how many tokens to draft in the next decode step (0: none, paused), at
// most max.
func (a *Adapt) Want(max int) int {
	if a.Pause > 0 {
		return 0
	}
	k := a.K
	if k == 0 {
		k = StartDraft
	}
	return min(k, max)
}

// Skip records a decode step taken without a verification (paused, or nothing
// to draft): a pause runs down by one.
func (a *Adapt) Skip() {
	if a.Pause > 0 {
		a.Pause--
	}
}

// Verified records a verification step that drafted tokens and accepted accepted of
// them (in order; accepted <= drafted), within max.
func (a *Adapt) Verified(drafted, accepted, max int) {
	if drafted <= 0 {
		return
	}
	k := a.K
	if k == 0 {
		k = StartDraft
	}
	switch {
	case accepted == drafted:
		// All hit: the next guess may be longer (only when this one was full length:
		// a draft cut short by the lookup or the budget says nothing about longer).
		if drafted >= k {
			k *= 2
		}
		a.Misses = 0
	case accepted > 0:
		k = accepted + 1
		a.Misses = 0
	default:
		k = max1(k / 2)
		a.Misses++
		if a.Misses >= missesToPause {
			a.Pause = min(maxPause, 4<<min(a.Misses-missesToPause, 8))
			k = 1
		}
	}
	a.K = min(max1(k), max)
}

func max1(k int) int { return max(k, 1) }
