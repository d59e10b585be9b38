package gateway

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

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
	Rows       []dashRow // last 24 h by model and tier
	Total      dashRow
	Refusals   []refusalRow
	CacheShare float64
	Batches    []batchRow // the tenant's latest batch jobs (nil: the Batch API is off)

	// operator view
	Tenants   []tenantRow
	Models    []modelRow
	Keys      []tenancy.KeyInfo
	TenantIDs []string
}

type dashRow struct {
	Model, Tier                     string
	Requests, Input, Output, Cached int64
	CostUSD                         float64
	Latency, TTFT                   quantiles
}

type batchRow struct {
	ID, Status, Paused  string
	Done, Failed, Total int
	Percent             float64
	SpentUSD, CapUSD    float64
}

type refusalRow struct {
	Reason string
	Count  int64
}

type tenantRow struct {
	ID, Plan           string
	Requests, Refusals int64
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
	Loadable               bool
}

// chart is a server-side SVG line chart: numbers only, in a 600×200 view box.
type chart struct {
	Points  string  // the polyline
	Limit   float64 // y of the budget line; < 0: none
	MaxUSD  float64
	XLabels []label
	Empty   bool
}

type label struct {
	X    float64
	Text string
}

const chartW, chartH = 600.0, 200.0

// spendChart is the spend of bs, cumulative, against a budget (0: none); the line
// stops at the bucket holding now. Every every-th bucket is labelled in layout.
func spendChart(bs []usage.Bucket, budgetUSD float64, now time.Time, layout string, every int) chart {
	var c chart
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
	c.MaxUSD = max(sum, budgetUSD)
	c.Empty = sum == 0
	if c.MaxUSD == 0 {
		c.MaxUSD = 1
	}
	y := func(v float64) float64 { return chartH - v/c.MaxUSD*(chartH-10) }
	var sb strings.Builder
	step := chartW / float64(max(1, len(bs)))
	for i, v := range cum {
		fmt.Fprintf(&sb, "%.1f,%.1f ", float64(i+1)*step, y(v))
	}
	c.Points = "0," + strconv.FormatFloat(chartH, 'f', 1, 64) + " " + sb.String()
	c.Limit = -1
	if budgetUSD > 0 {
		c.Limit = y(budgetUSD)
	}
	for i := 0; i < len(bs); i += every {
		c.XLabels = append(c.XLabels, label{float64(i) * step, bs[i].Start.Format(layout)})
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
	bs, err := s.usage.Query(usage.Query{Tenants: one, Start: now.Add(-23 * time.Hour), End: now.Add(time.Hour), Width: usage.Hour, ByModel: true, ByTier: true})
	if err != nil {
		return d
	}
	rows := map[[2]string]*usage.Counts{}
	var total usage.Counts
	for _, b := range bs {
		for _, r := range b.Results {
			k := [2]string{r.Model, r.Tier}
			if rows[k] == nil {
				rows[k] = &usage.Counts{}
			}
			rows[k].Merge(&r.Counts)
			total.Merge(&r.Counts)
		}
	}
	for k, c := range rows {
		if c.Requests == 0 {
			continue // refusals before a model was chosen
		}
		d.Rows = append(d.Rows, rowOf(k[0], k[1], c))
	}
	slices.SortFunc(d.Rows, func(a, b dashRow) int { return strings.Compare(a.Model+"\x00"+a.Tier, b.Model+"\x00"+b.Tier) })
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
					Failed: j.Counts.Failed, Total: j.Counts.Total, SpentUSD: j.Spent.Dollars(), CapUSD: j.Cap.Dollars()}
				if r.Total > 0 {
					r.Percent = float64(r.Done+r.Failed) / float64(r.Total)
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
	for _, id := range d.TenantIDs {
		pol, _ := s.book.Resolve(id)
		c := today[id]
		d.Tenants = append(d.Tenants, tenantRow{ID: id, Plan: pol.Plan, Requests: c.Requests, Refusals: c.RefusedTotal(),
			SpentTodayUSD: c.Cost.Dollars(), DailyBudgetUSD: pol.DailyBudget.Dollars()})
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
		}
		d.Models = append(d.Models, m)
	}
	for _, k := range s.ten.Store().Keys() {
		k.Hash = nil
		d.Keys = append(d.Keys, k)
	}
	slices.SortFunc(d.Keys, func(a, b tenancy.KeyInfo) int { return strings.Compare(a.Tenant+a.ID, b.Tenant+b.ID) })
}

func formatFloat(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }
