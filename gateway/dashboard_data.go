package gateway

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/tenancy"
	"github.com/lmlite/lmlite/usage"
)

// dashPage is what the dashboard templates render.
type dashPage struct {
	Admin        bool
	Tenant       string
	CSRF         string
	Flash        string
	NewKey       string
	NewKeyTenant string
	Updated      string

	// tenant view
	Limits     limitsJSON
	Spend      chart     // today by hour, against the daily budget
	SpendMonth chart     // this month by day, against the monthly budget
	Rows       []dashRow // last 24 h by model, adapter and tier
	Total      dashRow
	Refusals   []refusalRow
	CacheShare float64
	Batches    []batchRow // the tenant's latest batch jobs (nil: the Batch API is off)

	// operator view
	Tenants       []tenantRow
	RefusalsToday []refusalRow // every tenant's, by reason
	Models        []modelRow
	Adapters      []adapterRow // today's requests on each LoRA adapter
	Keys          []tenancy.KeyInfo
	TenantIDs     []string
}

type dashRow struct {
	Model, Tier string
	Adapter     string // the LoRA adapter applied on Model ("": the bare model)
	// Unrouted: the row of requests refused after admission but before a model was
	// chosen (a malformed body), which have no model or tier.
	Unrouted                        bool
	Requests, Input, Output, Cached int64
	CostUSD                         float64
	Latency, TTFT                   quantiles
}

// adapterRow is one LoRA adapter in the operator's view: its base, owner (""
// shared), state and today's requests on it (every tenant's).
type adapterRow struct {
	ID, Base, Owner, State  string
	Requests, Input, Output int64
	CostUSD                 float64
}

type batchRow struct {
	ID, Status, Paused  string
	Done, Failed, Total int
	NotRun              int     // of Failed: drained unrun (cancelled, expired, capped)
	Percent             float64 // the share of lines that ran
	SpentUSD, CapUSD    float64
}

type refusalRow struct {
	Reason string
	Count  int64
}

type tenantRow struct {
	ID, Plan           string
	Requests, Refusals int64
	ByReason           []refusalRow // Refusals by reason, the reasons with any
	SpentTodayUSD      float64
	DailyBudgetUSD     float64
}

type modelRow struct {
	ID, Kind, State, Error string
	MemoryBytes            int64
	Replicas, Queue, Run   int
	MeanBatch              float64
	HotUsed, HotCached     int64
	WarmBlocks             int64
	HitRate                float64
	Loadable               bool // an embedded model the engine can load and unload
	// CanLoad and CanUnload: the buttons that apply to the model's state (Load on an
	// unloaded or failed model, Unload on a ready one).
	CanLoad, CanUnload bool
	// Adapters are the LoRA adapters over the model with their state ("ft-0
	// (loaded), ft-1 (unloaded)"); "": none.
	Adapters string
}

// chart is a server-side SVG line chart: numbers only, in a 600×200 view box. Its
// y axis runs from 0 to MaxUSD, a round number just above the spend (so a small
// spend still climbs the chart), or above the budget when the budget is near enough
// to show on the same axis.
type chart struct {
	Points string  // the polyline
	Limit  float64 // y of the budget line; < 0: none (no budget, or OffChart)
	// OffChart is set when the budget is far above the spend: the axis fits the
	// spend and the budget is named in words instead of drawn.
	OffChart  bool
	BudgetUSD float64
	MaxUSD    float64
	XLabels   []label
	YTicks    []label // X holds the tick's y
	Empty     bool
}

type label struct {
	X      float64
	Text   string
	Anchor string // SVG text-anchor: start, or end for a label at the right edge
}

const chartW, chartH = 600.0, 200.0

// budgetOnAxis is how far above the spend's round ceiling a budget may be and still
// set the axis: past it the spend would again be a flat line at the bottom.
const budgetOnAxis = 2.0

// niceCeil is the least round number ≥ v (v > 0): 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6
// or 8 times a power of ten.
func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if c := m * p; c >= v*(1-1e-12) {
			return c
		}
	}
	return 10 * p
}

// spendChart is the spend of bs, cumulative, against a budget (0: none); the line
// stops at the bucket holding now. Every every-th bucket is labelled in layout.
func spendChart(bs []usage.Bucket, budgetUSD float64, now time.Time, layout string, every int) chart {
	c := chart{BudgetUSD: budgetUSD, Limit: -1}
	var cum []float64
	var sum float64
	for _, b := range bs {
		if b.Start.After(now) {
			break
		}
		for _, r := range b.Results {
			sum += r.Cost.Dollars()
		}
		cum = append(cum, sum)
	}
	c.Empty = sum == 0
	switch {
	case sum > 0:
		c.MaxUSD = niceCeil(sum)
		if budgetUSD > 0 && budgetUSD <= budgetOnAxis*c.MaxUSD {
			c.MaxUSD = niceCeil(max(sum, budgetUSD))
		}
	case budgetUSD > 0:
		c.MaxUSD = niceCeil(budgetUSD)
	default:
		c.MaxUSD = 1
	}
	y := func(v float64) float64 { return chartH - v/c.MaxUSD*(chartH-10) }
	var sb strings.Builder
	step := chartW / float64(max(1, len(bs)))
	for i, v := range cum {
		fmt.Fprintf(&sb, "%.1f,%.1f ", float64(i+1)*step, y(v))
	}
	c.Points = "0," + strconv.FormatFloat(chartH, 'f', 1, 64) + " " + sb.String()
	switch {
	case budgetUSD > 0 && budgetUSD <= c.MaxUSD:
		c.Limit = y(budgetUSD)
	case budgetUSD > 0:
		c.OffChart = true
	}
	for _, f := range []float64{0.5, 1} {
		c.YTicks = append(c.YTicks, label{y(f * c.MaxUSD), usdText(f * c.MaxUSD), "end"})
	}
	for i := 0; i < len(bs); i += every {
		if x := float64(i) * step; x < chartW-50 { // a label nearer the edge would be cut
			c.XLabels = append(c.XLabels, label{x, bs[i].Start.Format(layout), "start"})
		}
	}
	return c
}

// dashData gathers the page of the session: rollups, limits, models and keys. A
// tenant's session reads its own tenant's rollups only.
func (s *Server) dashData(se *session, now time.Time, flash string) dashPage {
	now = now.UTC()
	d := dashPage{Admin: se.admin, Tenant: se.tenant, CSRF: se.csrf, Flash: flash, Updated: now.Format("15:04:05 UTC")}
	dayStart := usage.Day.Start(now)
	if se.admin {
		s.operatorData(&d, now, dayStart)
		return d
	}
	pol, ok := s.book.Resolve(se.tenant)
	if !ok {
		return d
	}
	if l, err := s.limitsOf(pol, now); err == nil {
		d.Limits = l
	}
	one := []string{se.tenant}
	if bs, err := s.usage.Query(usage.Query{Tenants: one, Start: dayStart, End: dayStart.Add(24 * time.Hour), Width: usage.Hour}); err == nil {
		d.Spend = spendChart(bs, pol.DailyBudget.Dollars(), now, "15:04", 6)
	}
	monthStart := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	if bs, err := s.usage.Query(usage.Query{Tenants: one, Start: monthStart, End: monthStart.AddDate(0, 1, 0), Width: usage.Day}); err == nil {
		d.SpendMonth = spendChart(bs, pol.MonthlyBudget.Dollars(), now, "Jan 2", 7)
	}
	bs, err := s.usage.Query(usage.Query{Tenants: one, Start: now.Add(-23 * time.Hour), End: now.Add(time.Hour), Width: usage.Hour, ByModel: true, ByAdapter: true, ByTier: true})
	if err != nil {
		return d
	}
	// The tenant's own usage only: the adapters it used (shared or its own).
	rows := map[[3]string]*usage.Counts{}
	var total usage.Counts
	for _, b := range bs {
		for _, r := range b.Results {
			k := [3]string{r.Model, r.Tier, r.Adapter}
			if rows[k] == nil {
				rows[k] = &usage.Counts{}
			}
			rows[k].Merge(&r.Counts)
			total.Merge(&r.Counts)
		}
	}
	for k, c := range rows {
		if c.Requests == 0 {
			continue // refusals before admission: the refusals table counts them
		}
		r := rowOf(k[0], k[1], c)
		r.Adapter, r.Unrouted = k[2], k[0] == ""
		d.Rows = append(d.Rows, r)
	}
	slices.SortFunc(d.Rows, func(a, b dashRow) int {
		if a.Unrouted != b.Unrouted { // the unrouted row last
			if a.Unrouted {
				return 1
			}
			return -1
		}
		return strings.Compare(a.Model+"\x00"+a.Adapter+"\x00"+a.Tier, b.Model+"\x00"+b.Adapter+"\x00"+b.Tier)
	})
	d.Total = rowOf("", "", &total)
	if total.InputTokens > 0 {
		d.CacheShare = float64(total.CachedTokens) / float64(total.InputTokens)
	}
	for _, r := range usage.Reasons {
		d.Refusals = append(d.Refusals, refusalRow{r.String(), total.Refused(r)})
	}
	if s.batches != nil {
		if jobs, _, err := s.batches.m.Store().Jobs(se.tenant, "", 20); err == nil {
			for _, j := range jobs {
				r := batchRow{ID: j.ID, Status: string(j.Status), Paused: j.PausedReason, Done: j.Counts.Completed,
					Failed: j.Counts.Failed, NotRun: j.NotRun, Total: j.Counts.Total, SpentUSD: j.Spent.Dollars(), CapUSD: j.Cap.Dollars()}
				if r.Total > 0 {
					r.Percent = float64(r.Done+r.Failed-r.NotRun) / float64(r.Total)
				}
				d.Batches = append(d.Batches, r)
			}
		}
	}
	return d
}

func rowOf(model, tier string, c *usage.Counts) dashRow {
	return dashRow{Model: model, Tier: tier, Requests: c.Requests, Input: c.InputTokens, Output: c.OutputTokens,
		Cached: c.CachedTokens, CostUSD: c.Cost.Dollars(), Latency: quantilesOf(&c.Latency), TTFT: quantilesOf(&c.TTFT)}
}

func (s *Server) operatorData(d *dashPage, now, dayStart time.Time) {
	today := map[string]usage.Counts{}
	if bs, err := s.usage.Query(usage.Query{Start: dayStart, End: dayStart.Add(24 * time.Hour), Width: usage.Day, ByTenant: true}); err == nil {
		for _, r := range bs[0].Results {
			today[r.Tenant] = r.Counts
		}
	}
	d.TenantIDs = s.book.Tenants()
	var all usage.Counts
	for _, id := range d.TenantIDs {
		pol, _ := s.book.Resolve(id)
		c := today[id]
		row := tenantRow{ID: id, Plan: pol.Plan, Requests: c.Requests, Refusals: c.RefusedTotal(),
			SpentTodayUSD: c.Cost.Dollars(), DailyBudgetUSD: pol.DailyBudget.Dollars()}
		for _, r := range usage.Reasons {
			if n := c.Refused(r); n > 0 {
				row.ByReason = append(row.ByReason, refusalRow{r.String(), n})
			}
		}
		d.Tenants = append(d.Tenants, row)
		all.Merge(&c)
	}
	for _, r := range usage.Reasons {
		d.RefusalsToday = append(d.RefusalsToday, refusalRow{r.String(), all.Refused(r)})
	}
	_, canLoad := s.eng.(ModelLoader)
	for _, st := range s.modelStatuses() {
		m := modelRow{ID: st.ID, Kind: "embedded", State: string(st.State), Error: st.Err, MemoryBytes: st.MemoryBytes,
			Replicas: st.Replicas, Queue: st.QueueDepth, Run: st.Running,
			HotUsed: st.KV.HotUsed, HotCached: st.KV.HotCached, WarmBlocks: st.KV.WarmBlocks}
		if st.Steps > 0 {
			m.MeanBatch = float64(st.StepSeqs) / float64(st.Steps)
		}
		if n := st.KV.HitTokens + st.KV.MissTokens; n > 0 {
			m.HitRate = float64(st.KV.HitTokens) / float64(n)
		}
		if mm := s.models[st.ID]; mm != nil && mm.upstream != nil {
			m.Kind = "upstream"
		} else {
			m.Loadable = canLoad && s.eng != nil
			m.CanLoad, m.CanUnload = loadButtons(st.State)
		}
		m.Adapters = s.adapterSummary(st.ID)
		d.Models = append(d.Models, m)
	}
	d.Adapters = s.adapterRows(dayStart)
	for _, k := range s.ten.Store().Keys() {
		k.Hash = nil
		d.Keys = append(d.Keys, k)
	}
	slices.SortFunc(d.Keys, func(a, b tenancy.KeyInfo) int { return strings.Compare(a.Tenant+a.ID, b.Tenant+b.ID) })
}

// loadButtons says which of Load and Unload apply to a model in state st: Load to
// one not loaded (unloaded, or failed to load), Unload to one ready; neither while it
// is loading.
func loadButtons(st engine.ModelState) (load, unload bool) {
	switch st {
	case engine.StateUnloaded, engine.StateFailed:
		return true, false
	case engine.StateReady:
		return false, true
	}
	return false, false
}

func formatFloat(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }

// usdText is the dashboard's money: dollars to the micro-dollar, trailing zeros
// dropped, thousands separated ($1,234.5).
func usdText(v float64) string {
	s := strings.TrimRight(strings.TrimRight(formatFloat(v, 6), "0"), ".")
	whole, frac, _ := strings.Cut(s, ".")
	neg := strings.HasPrefix(whole, "-")
	whole = strings.TrimPrefix(whole, "-")
	out := thousands(whole)
	if frac != "" {
		out += "." + frac
	}
	if neg {
		return "-$" + out
	}
	return "$" + out
}

// numText is the integer v (an int or int64) with thousands separated by commas
// (1,234,567).
func numText(v any) string {
	var n int64
	switch v := v.(type) {
	case int:
		n = int64(v)
	case int64:
		n = v
	default:
		return fmt.Sprint(v)
	}
	if n < 0 {
		return "-" + thousands(strconv.FormatUint(uint64(-n), 10))
	}
	return thousands(strconv.FormatInt(n, 10))
}

// fixedText is v with prec decimals and its whole part's thousands separated.
func fixedText(v float64, prec int) string {
	s := formatFloat(v, prec)
	sign := ""
	if s[0] == '-' {
		sign, s = "-", s[1:]
	}
	whole, frac, ok := strings.Cut(s, ".")
	if ok {
		return sign + thousands(whole) + "." + frac
	}
	return sign + thousands(whole)
}

// thousands puts a comma between each group of three digits of the digit string d.
func thousands(d string) string {
	if len(d) <= 3 {
		return d
	}
	var b strings.Builder
	head := len(d) % 3
	if head > 0 {
		b.WriteString(d[:head])
	}
	for i := head; i < len(d); i += 3 {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(d[i : i+3])
	}
	return b.String()
}

// adapterRows is the operator's adapters with today's requests on each (every
// tenant's), in config order; nil when none is configured.
func (s *Server) adapterRows(dayStart time.Time) []adapterRow {
	if len(s.adapterIDs) == 0 {
		return nil
	}
	used := map[string]usage.Counts{}
	if bs, err := s.usage.Query(usage.Query{Start: dayStart, End: dayStart.Add(24 * time.Hour), Width: usage.Day, ByModel: true, ByAdapter: true}); err == nil {
		for _, r := range bs[0].Results {
			if a := s.adapters[r.Adapter]; a != nil && a.base.id == r.Model {
				c := used[r.Adapter]
				c.Merge(&r.Counts)
				used[r.Adapter] = c
			}
		}
	}
	states := s.adapterStates()
	rows := make([]adapterRow, 0, len(s.adapterIDs))
	for _, id := range s.adapterIDs {
		a, c := s.adapters[id], used[id]
		rows = append(rows, adapterRow{ID: id, Base: a.base.id, Owner: a.tenant, State: states[id],
			Requests: c.Requests, Input: c.InputTokens, Output: c.OutputTokens, CostUSD: c.Cost.Dollars()})
	}
	return rows
}
