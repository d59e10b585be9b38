// Package tiers routes a request to a model of a TierSet: Fast, Balanced, Deep and Max
// tiers, selection modes, and latency predictions from live measurements.
//
// A Set maps each tier to candidate models with a quality score and prices. Select is
// a pure function of the set, the request's constraints and a snapshot of each model's
// live statistics: in the modes balanced, deep and max it aims for the named tier and
// steps down one tier at a time (to Fast at the lowest) while the request's latency or
// cost budget, the tenant's remaining money, load or failures rule a tier out; in mode
// fixed it serves exactly the named tier or refuses with the reason. Select returns the
// trace of the tiers it passed over, so that tests (testdata/*.txt) and logs show why.
// The caller gives each candidate's exact worst case up front (Request.Need: the
// prompt tokenized by that model, its output limit), so the decision is final when
// made: a candidate the request does not fit is passed over as unfit, and the cost it
// reports is the one to reserve. Money (budget), the engine's refusals (failed) and
// limits (unfit) are separate reasons.
//
// A Predictor keeps those live statistics (time to first token, time per output token,
// queue depth, recent failures) for each model; its methods take an explicit now.
package tiers

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lmlite/lmlite/money"
)

// Tier is one level of a TierSet, from Fast (cheapest, quickest) to Max (best).
type Tier int8

const (
	Fast Tier = iota
	Balanced
	Deep
	Max

	// NumTiers is the number of tiers.
	NumTiers = 4
)

var tierNames = [NumTiers]string{"fast", "balanced", "deep", "max"}

// String returns the tier's name on the wire ("fast", ...).
func (t Tier) String() string {
	if t < 0 || int(t) >= NumTiers {
		return "tier(" + strconv.Itoa(int(t)) + ")"
	}
	return tierNames[t]
}

// ErrBadTier and ErrBadMode report an unknown tier or mode name.
var (
	ErrBadTier = errors.New("tiers: unknown tier")
	ErrBadMode = errors.New("tiers: unknown tier mode")
)

// ParseTier parses a tier name (lower case, as on the wire).
func ParseTier(s string) (Tier, error) {
	for i, n := range tierNames {
		if s == n {
			return Tier(i), nil
		}
	}
	return 0, fmt.Errorf("%w %q (want fast, balanced, deep or max)", ErrBadTier, s)
}

// Mode is a selection mode.
type Mode int8

const (
	// ModeBalanced, ModeDeep and ModeMax aim for that tier and step down when it does not fit.
	ModeBalanced Mode = iota
	ModeDeep
	ModeMax
	// ModeFixed serves exactly the requested tier or refuses.
	ModeFixed
)

var modeNames = [...]string{"balanced", "deep", "max", "fixed"}

// String returns the mode's name on the wire.
func (m Mode) String() string {
	if m < 0 || int(m) >= len(modeNames) {
		return "mode(" + strconv.Itoa(int(m)) + ")"
	}
	return modeNames[m]
}

// ParseMode parses a mode name (lower case, as on the wire).
func ParseMode(s string) (Mode, error) {
	for i, n := range modeNames {
		if s == n {
			return Mode(i), nil
		}
	}
	return 0, fmt.Errorf("%w %q (want balanced, deep, max or fixed)", ErrBadMode, s)
}

// Top is the highest tier a mode aims for; for ModeFixed it is meaningless (Max).
func (m Mode) Top() Tier {
	switch m {
	case ModeBalanced:
		return Balanced
	case ModeDeep:
		return Deep
	default:
		return Max
	}
}

// Candidate is one model of a tier.
type Candidate struct {
	Model   string
	Quality float64 // higher is better; the router prefers the best that fits
	Price   money.Price
}

// Set is a TierSet: the candidates of each tier. The zero value has no models.
type Set struct {
	Tiers [NumTiers][]Candidate
}

// Stats is a snapshot of one model's live measurements.
type Stats struct {
	TTFT     time.Duration // time to first token (moving average); 0: unknown
	TPOT     time.Duration // time per output token (moving average); 0: unknown
	Queue    int           // requests in flight or queued now
	Slots    int           // requests it serves at once; 0: 1
	MaxQueue int           // queue depth at which it counts as overloaded; 0: no limit
	Failing  bool          // failed recently
}

// PredictLatency is the predicted end-to-end latency of a request with outTokens output
// tokens: its own service time, plus the waiting for the requests ahead of it, which
// run Slots at a time.
func PredictLatency(s Stats, outTokens int) time.Duration {
	service := s.TTFT + time.Duration(outTokens)*s.TPOT
	slots := max(s.Slots, 1)
	waves := s.Queue / slots // full rounds ahead of us
	return service + time.Duration(waves)*service
}

// Reason says why a tier or model was passed over.
type Reason int8

const (
	ReasonNone      Reason = iota
	ReasonEmpty            // the tier has no models
	ReasonForbidden        // the tenant's policy forbids the tier or model
	ReasonUnfit            // the request does not fit the model (over its length limit)
	ReasonCost             // worst-case cost over the request's max_cost_usd
	ReasonBudget           // worst-case cost over the tenant's remaining money
	ReasonLatency          // predicted latency over the request's max_latency_ms
	ReasonLoad             // overloaded
	ReasonFailed           // failed recently, or excluded after a failure
)

var reasonNames = [...]string{"none", "empty", "forbidden", "unfit", "cost", "budget", "latency", "load", "failed"}

func (r Reason) String() string {
	if r < 0 || int(r) >= len(reasonNames) {
		return "reason(" + strconv.Itoa(int(r)) + ")"
	}
	return reasonNames[r]
}

// Skip is one step of a decision's trace: a tier or candidate passed over.
type Skip struct {
	Tier   Tier
	Model  string // "" when the whole tier was skipped
	Reason Reason
}

// Request is what Select needs to know about one request.
type Request struct {
	Mode Mode
	Tier Tier // the tier for ModeFixed

	MaxLatency time.Duration // 0: no limit
	MaxCost    money.Money   // 0: no limit
	Remaining  money.Money   // the tenant's remaining money; < 0: unlimited

	// MaxTokens is the output tokens latency is predicted for. Without Need, the worst
	// case is PromptTokens and MaxTokens on every model.
	PromptTokens int
	MaxTokens    int
	// Need, when not nil, is the request's worst case on each model, known up front
	// (its prompt tokenized by that model's tokenizer, its output limit): Select costs
	// a candidate with it and passes over the candidates it does not fit. It must be a
	// function of the model alone (the caller memoizes it).
	Need func(model string) Need

	// Forbidden tiers and models (policy); nil AllowModel allows all.
	AllowTier  [NumTiers]bool
	AllowModel func(model string) bool
	// Hidden, when not nil, says which candidates do not exist for the request's
	// tenant (another tenant's private LoRA adapter): they are passed over without a
	// trace, so no answer names them, and a tier of hidden candidates alone is empty.
	Hidden func(model string) bool
	// Exclude holds tiers the engine refused for this request already (a bit per
	// tier); they are passed over as ReasonFailed.
	Exclude uint8
}

// Need is a request's worst case on one model.
type Need struct {
	PromptTokens int
	MaxTokens    int  // output tokens the budget must cover
	Unfit        bool // the request does not fit the model (ReasonUnfit)
}

// Decision is the outcome of Select.
type Decision struct {
	Tier      Tier
	Candidate Candidate
	Predicted time.Duration // predicted latency
	Cost      money.Money   // worst-case cost
	Trace     []Skip        // what was passed over, in order
}

// NoFitError is returned when no tier may serve the request: Reason is why the last
// tier tried (the fixed tier, or Fast) did not fit.
type NoFitError struct {
	Tier   Tier
	Reason Reason
	Trace  []Skip
}

func (e *NoFitError) Error() string {
	return fmt.Sprintf("tiers: no model of tier %s fits the request (%s)", e.Tier, e.Reason.describe())
}

func (r Reason) describe() string {
	switch r {
	case ReasonEmpty:
		return "the tier has no models"
	case ReasonForbidden:
		return "the tenant's policy forbids it"
	case ReasonUnfit:
		return "the request is over the model's limits"
	case ReasonCost:
		return "worst-case cost over max_cost_usd"
	case ReasonBudget:
		return "worst-case cost over the remaining budget"
	case ReasonLatency:
		return "predicted latency over max_latency_ms"
	case ReasonLoad:
		return "overloaded"
	case ReasonFailed:
		return "failing"
	}
	return r.String()
}

// reasonRank orders reasons when a tier's candidates fail differently: the reported
// reason is the one of the candidate that came closest (the highest rank).
var reasonRank = [...]int{ReasonNone: 0, ReasonEmpty: 0, ReasonForbidden: 1, ReasonUnfit: 2, ReasonFailed: 3, ReasonBudget: 4, ReasonCost: 5, ReasonLatency: 6, ReasonLoad: 7}

// Select picks the tier and model that serve req. stats returns the live statistics of
// a model (the zero Stats when nothing is known). It is a pure function.
func Select(set *Set, req Request, stats func(model string) Stats) (Decision, error) {
	var trace []Skip
	top, bottom := req.span()
	var last Reason
	for t := top; t >= bottom; t-- {
		var d Decision
		var why Reason
		d, why, trace = selectTier(set, t, &req, stats, trace)
		if why == ReasonNone {
			d.Trace = trace
			return d, nil
		}
		trace = addSkip(trace, Skip{Tier: t, Reason: why})
		last = why
	}
	return Decision{}, &NoFitError{Tier: bottom, Reason: last, Trace: trace}
}

// Refuses reports whether Select(set, *req, stats) refuses whatever the models'
// statistics and req.Need say, given that stats says Failing of every model failing
// names: each candidate Select would weigh (a tier it tries, allowed and not excluded;
// the candidate not hidden, its model allowed) is failing, which Select checks before
// it reads the need or the rest of the statistics. Its refusal (its trace, its reason)
// is then the same whatever the statistics. Refuses walks the tiers and candidates as
// Select does (span, tierGate, gate: one definition of the order and the filters) and
// allocates nothing; a caller that knows the refusal is coming can make it lazily.
func Refuses(set *Set, req *Request, failing func(model string) bool) bool {
	top, bottom := req.span()
	for t := top; t >= bottom; t-- {
		if req.tierGate(t) != ReasonNone {
			continue
		}
		for i := range set.Tiers[t] {
			m := set.Tiers[t][i].Model
			if failing(m) { // first: at a chain's end every candidate is; failing and gate are pure, so the order leaves the answer as it is
				continue
			}
			if visible, why := req.gate(m); visible && why == ReasonNone {
				return false
			}
		}
	}
	return true
}

// span is the tiers Select tries for req, from top down to bottom.
func (req *Request) span() (top, bottom Tier) {
	if req.Mode == ModeFixed {
		return req.Tier, req.Tier
	}
	return req.Mode.Top(), Fast
}

// tierGate is why Select passes over tier t before its candidates (the policy
// forbids it, or it is excluded), or ReasonNone.
func (req *Request) tierGate(t Tier) Reason {
	if !req.AllowTier[t] {
		return ReasonForbidden
	}
	if req.Exclude&(1<<uint(t)) != 0 {
		return ReasonFailed
	}
	return ReasonNone
}

// gate says whether a candidate running model exists for the request (not hidden)
// and, if it does, whether the policy forbids it (ReasonForbidden) before Select
// reads its statistics.
func (req *Request) gate(model string) (visible bool, why Reason) {
	if req.Hidden != nil && req.Hidden(model) {
		return false, ReasonNone
	}
	if req.AllowModel != nil && !req.AllowModel(model) {
		return true, ReasonForbidden
	}
	return true, ReasonNone
}

// addSkip appends s to trace, which takes the room of a few tiers' skips at its first
// (one allocation where appending skip by skip took one per doubling).
func addSkip(trace []Skip, s Skip) []Skip {
	if trace == nil {
		trace = make([]Skip, 0, 2*NumTiers)
	}
	return append(trace, s)
}

// selectTier picks the best candidate of tier t, or says why none fits; the
// candidates it skipped are appended to trace.
func selectTier(set *Set, t Tier, req *Request, stats func(string) Stats, trace []Skip) (Decision, Reason, []Skip) {
	if why := req.tierGate(t); why != ReasonNone {
		return Decision{}, why, trace
	}
	cands := set.Tiers[t]
	var best Decision
	found, seen := false, false
	worst := ReasonNone
	for i := range cands {
		c := &cands[i]
		visible, why := req.gate(c.Model)
		if !visible {
			continue
		}
		seen = true
		var pred time.Duration
		var cost money.Money
		if why == ReasonNone {
			why, pred, cost = fit(c, req, stats(c.Model))
		}
		if why != ReasonNone {
			trace = addSkip(trace, Skip{Tier: t, Model: c.Model, Reason: why})
			if reasonRank[why] > reasonRank[worst] {
				worst = why
			}
			continue
		}
		if !found || c.Quality > best.Candidate.Quality ||
			(c.Quality == best.Candidate.Quality && pred < best.Predicted) {
			best = Decision{Tier: t, Candidate: *c, Predicted: pred, Cost: cost}
			found = true
		}
	}
	if !seen {
		return Decision{}, ReasonEmpty, trace
	}
	if !found {
		return Decision{}, worst, trace
	}
	return best, ReasonNone, trace
}

// fit checks one candidate the policy allows (gate) against the request.
func fit(c *Candidate, req *Request, s Stats) (Reason, time.Duration, money.Money) {
	if s.Failing {
		return ReasonFailed, 0, 0
	}
	need := Need{PromptTokens: req.PromptTokens, MaxTokens: req.MaxTokens}
	if req.Need != nil {
		if need = req.Need(c.Model); need.Unfit {
			return ReasonUnfit, 0, 0
		}
	}
	cost := c.Price.Cost(need.PromptTokens, need.MaxTokens)
	if req.Remaining >= 0 && cost > req.Remaining {
		return ReasonBudget, 0, cost
	}
	if req.MaxCost > 0 && cost > req.MaxCost {
		return ReasonCost, 0, cost
	}
	if s.MaxQueue > 0 && s.Queue >= s.MaxQueue {
		return ReasonLoad, 0, cost
	}
	pred := PredictLatency(s, req.MaxTokens)
	if req.MaxLatency > 0 && pred > req.MaxLatency {
		return ReasonLatency, pred, cost
	}
	return ReasonNone, pred, cost
}

// AllTiers is an AllowTier value that allows every tier.
var AllTiers = [NumTiers]bool{true, true, true, true}

// FormatTrace renders a trace for logs and tests: "max:empty balanced/m1:latency ...".
func FormatTrace(tr []Skip) string {
	var b strings.Builder
	for i, s := range tr {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(s.Tier.String())
		if s.Model != "" {
			b.WriteByte('/')
			b.WriteString(s.Model)
		}
		b.WriteByte(':')
		b.WriteString(s.Reason.String())
	}
	return b.String()
}
