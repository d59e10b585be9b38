// Package usage keeps lmlite's usage rollups: per tenant, model and tier, the
// requests, tokens, money, refusals by reason and latency histograms of every
// minute, hour and day, written once per request when it settles (or is refused) and
// read by the usage API and the dashboards without ever scanning the ledger.
//
// Minute buckets are kept 48 hours, hour buckets 90 days, day buckets for ever
// (Retention). Latencies are counted in fixed histogram bins (Bins), so the
// percentiles of any set of buckets are the percentiles of their merged histogram.
//
// Rollups is the consumer's interface. Memory is the embedded implementation's index:
// the durable rollups live in the ledger's bbolt database, written by PutBolt in the
// transaction that stores the ledger's entries (bolt.go), and LoadBolt fills a Memory
// from them when the server starts; from there the ledger's store adds each entry to
// it as the entry is logged (tenancy.Store.FollowRollups): the ledger is the one feed
// of usage (refusals before admission included). Redis (redis.go) is the
// implementation several processes share: each publishes its own ledger's entries,
// idempotently per ledger seq, and queries read the sum.
package usage

import (
	"cmp"
	"strings"
	"time"

	"github.com/lmlite/lmlite/money"
)

// Reason is why a request was refused.
type Reason uint8

const (
	NotRefused  Reason = iota
	Rate               // requests/s or tokens/min quota
	Concurrency        // concurrent requests quota
	Budget             // daily or monthly money
	Policy             // the plan forbids the model or tier, or a routing limit excludes every tier
	BadRequest         // the request is malformed or over a model's limits
	numReasons
)

// Reasons lists the refusal reasons, in order.
var Reasons = [...]Reason{Rate, Concurrency, Budget, Policy, BadRequest}

// ParseReason is the Reason named s (String); NotRefused for any other s.
func ParseReason(s string) Reason {
	for _, r := range Reasons {
		if r.String() == s {
			return r
		}
	}
	return NotRefused
}

func (r Reason) String() string {
	switch r {
	case Rate:
		return "rate"
	case Concurrency:
		return "concurrency"
	case Budget:
		return "budget"
	case Policy:
		return "policy"
	case BadRequest:
		return "bad_request"
	}
	return ""
}

// Event is one request as the rollups count it: a settled request (an entry of the
// ledger: Requests, tokens and Cost as the ledger holds them), or a refusal before
// admission (Admitted false, Refused set), or both (a request admitted, then refused).
type Event struct {
	Time                time.Time
	RequestID           string // counts once per id where the rollups are shared (Redis); "": no check
	Tenant, Model, Tier string
	Adapter             string // the LoRA adapter applied on Model; "": none
	Admitted            bool   // settled: a ledger entry
	Status              int
	Refused             Reason
	// Count is how many refusals a refusal before admission stands for: the ledger
	// writes those of one tenant, key, model and reason as one entry per flush
	// (tenancy.Entry.Count). 0 means 1 (entries written before it existed).
	Count         int
	InputTokens   int
	OutputTokens  int
	CachedTokens  int // input tokens served from the prefix cache
	Cost          money.Money
	Latency, TTFT time.Duration // 0: not measured
	ColdStart     time.Duration // the wait for the model's load or its worker's start; 0: none
	GrammarTime   time.Duration // the time its output's grammar masks took (structured outputs); 0: none
}

// Width is a bucket width.
type Width uint8

const (
	Minute Width = iota
	Hour
	Day
	numWidths
)

// Duration is the width's length.
func (w Width) Duration() time.Duration {
	switch w {
	case Minute:
		return time.Minute
	case Hour:
		return time.Hour
	}
	return 24 * time.Hour
}

// Retention is how long buckets of width w are kept; 0: for ever.
func (w Width) Retention() time.Duration {
	switch w {
	case Minute:
		return 48 * time.Hour
	case Hour:
		return 90 * 24 * time.Hour
	}
	return 0
}

// ParseWidth parses "1m", "1h" or "1d".
func ParseWidth(s string) (Width, bool) {
	switch s {
	case "1m":
		return Minute, true
	case "1h":
		return Hour, true
	case "1d":
		return Day, true
	}
	return 0, false
}

func (w Width) String() string { return [...]string{"1m", "1h", "1d"}[w] }

// index is the bucket of t: whole widths since the Unix epoch (UTC).
func (w Width) index(t time.Time) int64 {
	return floorDiv(t.Unix(), int64(w.Duration()/time.Second))
}

// Start is the start of the bucket holding t.
func (w Width) Start(t time.Time) time.Time {
	return time.Unix(w.index(t)*int64(w.Duration()/time.Second), 0).UTC()
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// Bins are the upper bounds of the latency histogram bins (the last is +Inf).
var Bins = [...]time.Duration{
	5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second,
	2500 * time.Millisecond, 5 * time.Second, 10 * time.Second, 30 * time.Second,
	time.Minute, 1<<63 - 1,
}

// Hist counts durations in Bins.
type Hist [len(Bins)]uint32

// Observe counts d.
func (h *Hist) Observe(d time.Duration) {
	for i, b := range Bins {
		if d <= b {
			h[i]++
			return
		}
	}
}

// Merge adds o's counts.
func (h *Hist) Merge(o *Hist) {
	for i := range h {
		h[i] += o[i]
	}
}

// Count is the number of durations counted.
func (h *Hist) Count() uint64 {
	var n uint64
	for _, c := range h {
		n += uint64(c)
	}
	return n
}

// Quantile is the upper bound of the bin holding the q-quantile (0 < q ≤ 1), the
// second-to-last bound for the open last bin; 0 when empty.
func (h *Hist) Quantile(q float64) time.Duration {
	n := h.Count()
	if n == 0 {
		return 0
	}
	rank := uint64(q*float64(n) + 0.999999)
	rank = max(1, min(rank, n))
	var c uint64
	for i, v := range h {
		c += uint64(v)
		if c >= rank {
			if i == len(Bins)-1 {
				return Bins[i-1]
			}
			return Bins[i]
		}
	}
	return Bins[len(Bins)-2]
}

// Counts are a rollup cell's totals.
type Counts struct {
	Requests     int64 // settled (admitted) requests: ledger entries
	Errors       int64 // settled requests answered with a status ≥ 400
	InputTokens  int64
	OutputTokens int64
	CachedTokens int64
	Cost         money.Money
	Refusals     [numReasons]int64 // by Reason; [NotRefused] unused
	// ColdStarts are the settled requests that waited for their model's load or
	// their worker process's start; ColdStartTime is the sum of their waits.
	ColdStarts    int64
	ColdStartTime time.Duration
	// GrammarTime is the time the settled requests' grammar masks took to compute
	// (structured outputs: engine.Usage.GrammarTime), summed.
	GrammarTime time.Duration
	Latency     Hist
	TTFT        Hist
}

// Refused is the count of refusals for r.
func (c *Counts) Refused(r Reason) int64 { return c.Refusals[r] }

// RefusedTotal is the count of refusals of every reason.
func (c *Counts) RefusedTotal() int64 {
	var n int64
	for _, r := range Reasons {
		n += c.Refusals[r]
	}
	return n
}

// add counts e.
func (c *Counts) add(e *Event) {
	if e.Admitted {
		c.Requests++
		if e.Status >= 400 {
			c.Errors++
		}
		c.InputTokens += int64(e.InputTokens)
		c.OutputTokens += int64(e.OutputTokens)
		c.CachedTokens += int64(e.CachedTokens)
		c.Cost += e.Cost
		if e.Latency > 0 && (e.Status < 400 || e.Status == 499) {
			c.Latency.Observe(e.Latency)
		}
		if e.TTFT > 0 {
			c.TTFT.Observe(e.TTFT)
		}
		if e.ColdStart > 0 {
			c.ColdStarts++
			c.ColdStartTime += e.ColdStart
		}
		c.GrammarTime += e.GrammarTime
	}
	if e.Refused != NotRefused && e.Refused < numReasons {
		n := int64(1)
		if !e.Admitted && e.Count > 1 {
			n = int64(e.Count)
		}
		c.Refusals[e.Refused] += n
	}
}

// Merge adds o.
func (c *Counts) Merge(o *Counts) {
	c.Requests += o.Requests
	c.Errors += o.Errors
	c.InputTokens += o.InputTokens
	c.OutputTokens += o.OutputTokens
	c.CachedTokens += o.CachedTokens
	c.Cost += o.Cost
	c.ColdStarts += o.ColdStarts
	c.ColdStartTime += o.ColdStartTime
	c.GrammarTime += o.GrammarTime
	for i := range c.Refusals {
		c.Refusals[i] += o.Refusals[i]
	}
	c.Latency.Merge(&o.Latency)
	c.TTFT.Merge(&o.TTFT)
}

// Group is what a result is grouped by: the fields not grouped by are empty.
type Group struct {
	Tenant, Model, Tier string
	Adapter             string // grouped by adapter: "" for the bare model
}

// A series is kept under its model's name, or its model's and adapter's joined by
// adapterSep (a byte no id holds), so that rollups kept before adapters read as the
// bare model's and grouping by model alone sums a model's adapters into it.
const adapterSep = "\x01"

// seriesModel is the series name of model with adapter applied ("": none).
func seriesModel(model, adapter string) string {
	if adapter == "" {
		return model
	}
	return model + adapterSep + adapter
}

// splitSeries is seriesModel's inverse.
func splitSeries(s string) (model, adapter string) {
	model, adapter, _ = strings.Cut(s, adapterSep)
	return model, adapter
}

// group is the group of a series' counts for q.
func (q *Query) group(tenant, series, tier string) Group {
	var g Group
	model, adapter := splitSeries(series)
	if q.ByTenant {
		g.Tenant = tenant
	}
	if q.ByModel {
		g.Model = model
	}
	if q.ByAdapter {
		g.Adapter = adapter
	}
	if q.ByTier {
		g.Tier = tier
	}
	return g
}

// compareGroups orders results: by tenant, model, adapter, tier.
func compareGroups(a, b Group) int {
	return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Model, b.Model), cmp.Compare(a.Adapter, b.Adapter), cmp.Compare(a.Tier, b.Tier))
}

// Query asks for the buckets of Width from the one holding Start up to End
// (exclusive), for Tenants (nil: every tenant), grouped by the fields asked.
type Query struct {
	Tenants                   []string
	Start, End                time.Time
	Width                     Width
	ByTenant, ByModel, ByTier bool
	ByAdapter                 bool // the LoRA adapter beside the model ("": the bare model)
}

// Result is one group's counts in a bucket.
type Result struct {
	Group
	Counts
}

// Bucket is one bucket of a query's answer: every bucket of the range is present,
// with no results when nothing happened in it. Results are sorted by group.
type Bucket struct {
	Start, End time.Time
	Results    []Result
}

// Rollups is where settlements and refusals are queried. Both implementations the
// server uses follow the ledger (tenancy.Store.FollowRollups, Redis), which is the one feed of usage:
// nothing else adds to them.
type Rollups interface {
	Query(q Query) ([]Bucket, error)
	// Tenants lists the tenants with any rollup.
	Tenants() []string
}
