package loadtest

import (
	"cmp"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Latencies are recorded in HDR histograms (github.com/HdrHistogram/hdrhistogram-go,
// the reference Go port): fixed memory however many samples, 3 significant digits
// from 1µs to one hour, and percentiles that merge exactly across tenants.
const (
	histMinUS = 1
	histMaxUS = int64(time.Hour / time.Microsecond)
	histSig   = 3
)

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(histMinUS, histMaxUS, histSig) }

func recordUS(h *hdrhistogram.Histogram, d time.Duration) {
	us := d.Microseconds()
	if us < histMinUS {
		us = histMinUS
	}
	if us > histMaxUS {
		us = histMaxUS
	}
	_ = h.RecordValue(us) // in range by construction
}

// Percentiles in milliseconds. N is the number of samples (0: the others are 0).
type Percentiles struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Mean float64 `json:"mean"`
	Max  float64 `json:"max"`
	N    int64   `json:"n"`
}

func percentiles(h *hdrhistogram.Histogram) Percentiles {
	if h.TotalCount() == 0 {
		return Percentiles{}
	}
	ms := func(us int64) float64 { return round3(float64(us) / 1000) }
	return Percentiles{
		P50:  ms(h.ValueAtQuantile(50)),
		P90:  ms(h.ValueAtQuantile(90)),
		P99:  ms(h.ValueAtQuantile(99)),
		Mean: round3(h.Mean() / 1000),
		Max:  ms(h.Max()),
		N:    h.TotalCount(),
	}
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// Metrics are the aggregates of one tenant or of all of them.
type Metrics struct {
	Requests int            `json:"requests"`
	OK       int            `json:"ok"`
	Errors   map[string]int `json:"errors"` // HTTP status or class → count; every non-2xx counts

	TTFT Percentiles `json:"ttft_ms"`
	ITL  Percentiles `json:"itl_ms"`
	E2E  Percentiles `json:"e2e_ms"`

	RPS        float64 `json:"rps"`          // successful requests per second
	TokensPerS float64 `json:"tokens_per_s"` // completion tokens of successes per second

	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	// CachedTokens are the prompt tokens the server says came from its prefix cache
	// (usage.prompt_tokens_details.cached_tokens; 0 when it does not say).
	CachedTokens int64 `json:"cached_tokens"`

	// Good requests succeeded within every goodput limit; GoodputRPS is their rate.
	Good       int     `json:"good"`
	GoodputRPS float64 `json:"goodput_rps"`

	RateLimited     int `json:"rate_limited"`     // 429 other than insufficient_quota
	QuotaExhausted  int `json:"quota_exhausted"`  // 429 insufficient_quota (budget exhausted)
	PaymentRequired int `json:"payment_required"` // 402

	// Retried counts requests sent twice because the server had closed the reused
	// keep-alive connection before answering (each then counts once, by its retry).
	Retried int `json:"retried,omitempty"`

	Tiers  map[string]int `json:"tiers,omitempty"`  // X-LMLite-Tier of successes → count
	Models map[string]int `json:"models,omitempty"` // model served to successes → count
	// Asked says what became of the requests that sent tier options: per options
	// sent (TierChoice.Label), the tier that served (X-LMLite-Tier; "ok" without
	// one) or the errors key → count.
	Asked map[string]map[string]int `json:"asked,omitempty"`
	// AskedLatency is the latency of the successes per tier options sent (the
	// rows of Asked): what each set of options cost in time, whichever tier served.
	AskedLatency map[string]AskLatency `json:"asked_latency,omitempty"`
}

// AskLatency is the latency of the successes of one set of tier options.
type AskLatency struct {
	TTFT Percentiles `json:"ttft_ms"` // streams only
	E2E  Percentiles `json:"e2e_ms"`
}

// acc accumulates one Metrics.
type acc struct {
	m              Metrics
	ttft, itl, e2e *hdrhistogram.Histogram
	asked          map[string]*askHists // per tier options sent
}

type askHists struct{ ttft, e2e *hdrhistogram.Histogram }

func newAcc() *acc {
	return &acc{m: Metrics{Errors: map[string]int{}, Tiers: map[string]int{}, Models: map[string]int{}, Asked: map[string]map[string]int{}},
		ttft: newHist(), itl: newHist(), e2e: newHist(), asked: map[string]*askHists{}}
}

func (a *acc) add(r *Result, good bool) {
	m := &a.m
	m.Requests++
	if r.Retried {
		m.Retried++
	}
	if r.Ask != "" {
		out := r.ErrorKey()
		if out == "" {
			out = cmp.Or(r.Tier, "ok")
		}
		if m.Asked[r.Ask] == nil {
			m.Asked[r.Ask] = map[string]int{}
		}
		m.Asked[r.Ask][out]++
	}
	if k := r.ErrorKey(); k != "" {
		m.Errors[k]++
		switch {
		case r.Status == 429 && r.Code == "insufficient_quota":
			m.QuotaExhausted++
		case r.Status == 429:
			m.RateLimited++
		case r.Status == 402:
			m.PaymentRequired++
		}
		return
	}
	m.OK++
	if good {
		m.Good++
	}
	m.PromptTokens += int64(r.PromptTokens)
	m.CachedTokens += int64(r.CachedTokens)
	m.CompletionTokens += int64(r.CompletionTokens)
	if r.Tier != "" {
		m.Tiers[r.Tier]++
	}
	if r.Model != "" {
		m.Models[r.Model]++
	}
	recordUS(a.e2e, r.E2E)
	if r.Ask != "" {
		h := a.asked[r.Ask]
		if h == nil {
			h = &askHists{ttft: newHist(), e2e: newHist()}
			a.asked[r.Ask] = h
		}
		recordUS(h.e2e, r.E2E)
		if len(r.Tokens) > 0 {
			recordUS(h.ttft, r.TTFT)
		}
	}
	if len(r.Tokens) > 0 {
		recordUS(a.ttft, r.TTFT)
		for i := 1; i < len(r.Tokens); i++ {
			recordUS(a.itl, r.Tokens[i]-r.Tokens[i-1])
		}
	}
}

func (a *acc) metrics(window time.Duration) Metrics {
	m := a.m
	m.TTFT, m.ITL, m.E2E = percentiles(a.ttft), percentiles(a.itl), percentiles(a.e2e)
	if len(a.asked) > 0 {
		m.AskedLatency = map[string]AskLatency{}
		for k, h := range a.asked {
			m.AskedLatency[k] = AskLatency{TTFT: percentiles(h.ttft), E2E: percentiles(h.e2e)}
		}
	}
	if s := window.Seconds(); s > 0 {
		m.RPS = round3(float64(m.OK) / s)
		m.TokensPerS = round3(float64(m.CompletionTokens) / s)
		m.GoodputRPS = round3(float64(m.Good) / s)
	}
	return m
}

// sample is the compact record of one measured request kept for the timeline.
type sample struct {
	start, e2e, ttft time.Duration
	tenant           int
	errKey           string
	tokens           int
}

// Collector aggregates results as they arrive. It is not safe for concurrent use:
// the runner feeds it from one goroutine.
type Collector struct {
	tenants []string
	weights []float64
	slo     GoodputSLO
	start   time.Duration // measurement start (end of warm-up), from the run's start

	lag      *hdrhistogram.Histogram // send lag of measured open-loop requests
	all      *acc
	per      []*acc
	samples  []sample
	firstErr map[string]string // error key → the first such error's code and message
	last     time.Duration     // latest end of a measured request
	warmup   int               // warm-up results seen (not measured)
}

// NewCollector returns a collector for the named tenants (with their weights),
// measuring from start and judging goodput by slo.
func NewCollector(tenants []string, weights []float64, start time.Duration, slo GoodputSLO) *Collector {
	c := &Collector{tenants: tenants, weights: weights, slo: slo, start: start, all: newAcc(), lag: newHist(), firstErr: map[string]string{}}
	for range tenants {
		c.per = append(c.per, newAcc())
	}
	return c
}

// Add takes one result; warm-up results are only counted.
func (c *Collector) Add(r *Result) {
	if r.Warmup {
		c.warmup++
		return
	}
	if r.Tenant < 0 || r.Tenant >= len(c.per) {
		return
	}
	if r.Lag > 0 {
		recordUS(c.lag, r.Lag)
	}
	good := r.OK() && c.slo.met(r)
	c.all.add(r, good)
	c.per[r.Tenant].add(r, good)
	if k := r.ErrorKey(); k != "" && c.firstErr[k] == "" {
		c.firstErr[k] = strings.TrimSpace(r.Code + " " + truncate(r.Detail, 300))
	}
	c.samples = append(c.samples, sample{start: r.Start, e2e: r.E2E, ttft: r.TTFT, tenant: r.Tenant, errKey: r.ErrorKey(), tokens: r.CompletionTokens})
	if end := r.Start + r.E2E; end > c.last {
		c.last = end
	}
}

// met tells whether an OK result is within every limit.
func (s GoodputSLO) met(r *Result) bool {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	if s.E2Ems > 0 && ms(r.E2E) > s.E2Ems {
		return false
	}
	if s.TTFTms > 0 && len(r.Tokens) > 0 && ms(r.TTFT) > s.TTFTms {
		return false
	}
	if s.ITLms > 0 && len(r.Tokens) > 1 && ms(r.Tokens[len(r.Tokens)-1]-r.Tokens[0])/float64(len(r.Tokens)-1) > s.ITLms {
		return false
	}
	return true
}

// Measured returns how many measured results were added.
func (c *Collector) Measured() int { return c.all.m.Requests }

// Window is the measured time: from the end of warm-up to the last measured
// request's end.
func (c *Collector) Window() time.Duration {
	if c.last <= c.start {
		return 0
	}
	return c.last - c.start
}

// Report builds the report; meta fills its descriptive fields.
func (c *Collector) Report(meta Meta) *Report {
	w := c.Window()
	rep := &Report{Meta: meta, Overall: c.all.metrics(w), Tenants: map[string]Metrics{}}
	rep.Meta.WindowS = round3(w.Seconds())
	rep.Meta.WarmupRequests = c.warmup
	rep.Meta.Goodput = c.slo
	rep.Meta.SendLag = percentiles(c.lag)
	if len(c.firstErr) > 0 {
		rep.Meta.ErrorSamples = c.firstErr
	}
	demand := make([]float64, len(c.per))
	served := make([]float64, len(c.per))
	for i, a := range c.per {
		rep.Tenants[c.tenants[i]] = a.metrics(w)
		// Requests the tenant's own quota or budget refused are not its claim on
		// the server: they show in rate_limited, quota_exhausted and payment_required.
		demand[i] = float64(a.m.Requests - a.m.RateLimited - a.m.QuotaExhausted - a.m.PaymentRequired)
		served[i] = float64(a.m.OK)
	}
	rep.Fairness = fairness(c.tenants, c.weights, demand, served)
	rep.Timeline = c.timeline()
	return rep
}

// Fairness compares what each tenant was served with its weighted max-min fair
// share of what was served in all, given what each asked for: a tenant that asked
// for less than its weighted share is entitled to all it asked, and the rest is
// split by weight among the others. What a tenant asked for leaves out the
// requests its own quota or budget refused (429, 402): enforcing a limit is not
// unfair to the tenant that exceeded it. Jain is Jain's index of served/fair over the
// tenants that asked for anything: 1 when each got its fair share, down to 1/n when
// one got everything.
type Fairness struct {
	Basis   string                    `json:"basis"`
	Jain    *float64                  `json:"jain"` // null when nothing was served
	Tenants map[string]TenantFairness `json:"tenants"`
}

// TenantFairness is one tenant's part in Fairness.
type TenantFairness struct {
	Weight    float64 `json:"weight"`
	Demand    float64 `json:"demand"`     // requests sent, less those its quota or budget refused
	Served    float64 `json:"served"`     // requests that succeeded
	Share     float64 `json:"share"`      // served / all served
	FairShare float64 `json:"fair_share"` // fair / all served
	Ratio     float64 `json:"ratio"`      // served / fair (1 is fair)
}

func fairness(names []string, weights, demand, served []float64) Fairness {
	f := Fairness{Basis: "successful requests vs weighted max-min fair share of the requests sent (less those refused by the tenant's own quota or budget)", Tenants: map[string]TenantFairness{}}
	total := 0.0
	for _, s := range served {
		total += s
	}
	fair := MaxMinFair(total, demand, weights)
	var xs []float64
	for i, n := range names {
		t := TenantFairness{Weight: weights[i], Demand: demand[i], Served: served[i]}
		if total > 0 {
			t.Share = round3(served[i] / total)
			t.FairShare = round3(fair[i] / total)
		}
		if fair[i] > 0 {
			t.Ratio = round3(served[i] / fair[i])
			xs = append(xs, served[i]/fair[i])
		}
		f.Tenants[n] = t
	}
	if len(xs) > 0 {
		j := round3(Jain(xs))
		f.Jain = &j
	}
	return f
}

// MaxMinFair splits capacity between claimants by weighted max-min fairness
// (water-filling): no one gets more than its demand, and what the satisfied leave
// is split among the rest in proportion to their weights. Weights must be > 0.
func MaxMinFair(capacity float64, demand, weight []float64) []float64 {
	out := make([]float64, len(demand))
	active := make([]int, 0, len(demand))
	for i, d := range demand {
		if d > 0 {
			active = append(active, i)
		}
	}
	left := capacity
	for len(active) > 0 && left > 1e-12 {
		wsum := 0.0
		for _, i := range active {
			wsum += weight[i]
		}
		// The level (share per unit weight) at which the first claimant is satisfied.
		level := left / wsum
		var still []int
		given := 0.0
		for _, i := range active {
			if need := demand[i] - out[i]; need <= level*weight[i] {
				out[i] = demand[i]
				given += need
			} else {
				still = append(still, i)
			}
		}
		if len(still) == len(active) { // nobody satisfied: split the rest by weight
			for _, i := range active {
				out[i] += level * weight[i]
			}
			return out
		}
		left -= given
		active = still
	}
	return out
}

// Jain returns Jain's fairness index (Σx)²/(n·Σx²) of xs: 1 when all are equal,
// 1/n when one has everything. It is 1 for an empty or all-zero input.
func Jain(xs []float64) float64 {
	var s, s2 float64
	for _, x := range xs {
		s += x
		s2 += x * x
	}
	if s2 == 0 {
		return 1
	}
	return s * s / (float64(len(xs)) * s2)
}

// TimePoint is one bucket of the timeline (requests by their start time).
type TimePoint struct {
	T          float64        `json:"t"` // bucket start, seconds after warm-up
	Requests   int            `json:"requests"`
	RPS        float64        `json:"rps"`
	TokensPerS float64        `json:"tokens_per_s"`
	E2EP50     float64        `json:"e2e_p50_ms"`
	E2EP99     float64        `json:"e2e_p99_ms"`
	TTFTP50    float64        `json:"ttft_p50_ms"`
	TTFTP99    float64        `json:"ttft_p99_ms"`
	Errors     map[string]int `json:"errors,omitempty"`
}

// maxBuckets bounds the timeline's length.
const maxBuckets = 120

func (c *Collector) timeline() []TimePoint {
	w := c.Window()
	if len(c.samples) == 0 || w <= 0 {
		return nil
	}
	width := time.Second
	if w > maxBuckets*time.Second {
		width = (w/maxBuckets + time.Second - 1).Truncate(time.Second)
	} else if w < 10*time.Second {
		width = max(w/10, 10*time.Millisecond).Truncate(time.Millisecond)
	}
	n := int(w/width) + 1
	type bucket struct {
		e2e, ttft []float64
		ok, tok   int
		tp        TimePoint
	}
	bs := make([]bucket, n)
	for _, s := range c.samples {
		i := int((s.start - c.start) / width)
		if i < 0 {
			i = 0
		}
		if i >= n {
			i = n - 1
		}
		b := &bs[i]
		b.tp.Requests++
		if s.errKey != "" {
			if b.tp.Errors == nil {
				b.tp.Errors = map[string]int{}
			}
			b.tp.Errors[s.errKey]++
			continue
		}
		b.ok++
		b.tok += s.tokens
		b.e2e = append(b.e2e, float64(s.e2e)/float64(time.Millisecond))
		if s.ttft > 0 {
			b.ttft = append(b.ttft, float64(s.ttft)/float64(time.Millisecond))
		}
	}
	out := make([]TimePoint, n)
	for i := range bs {
		b := &bs[i]
		tp := b.tp
		tp.T = round3(float64(i) * width.Seconds())
		tp.RPS = round3(float64(b.ok) / width.Seconds())
		tp.TokensPerS = round3(float64(b.tok) / width.Seconds())
		tp.E2EP50, tp.E2EP99 = exactQuantile(b.e2e, 0.5), exactQuantile(b.e2e, 0.99)
		tp.TTFTP50, tp.TTFTP99 = exactQuantile(b.ttft, 0.5), exactQuantile(b.ttft, 0.99)
		out[i] = tp
	}
	return out
}

// exactQuantile is the nearest-rank quantile q of xs (sorted in place); 0 when empty.
func exactQuantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sort.Float64s(xs)
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	i = min(max(i, 0), len(xs)-1)
	return round3(xs[i])
}

// errorKeys returns the keys of m sorted numerically then by name.
func errorKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		a, ea := strconv.Atoi(ks[i])
		b, eb := strconv.Atoi(ks[j])
		if (ea == nil) != (eb == nil) {
			return ea == nil
		}
		if ea == nil {
			return a < b
		}
		return ks[i] < ks[j]
	})
	return ks
}

// truncate shortens s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
