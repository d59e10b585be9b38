package usage

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/lmlite/lmlite/money"
)

var t0 = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

func settled(at time.Time, tenant, model, tier string, in, out int, cost money.Money, lat time.Duration) Event {
	return Event{Time: at, Tenant: tenant, Model: model, Tier: tier, Admitted: true, Status: 200,
		InputTokens: in, OutputTokens: out, Cost: cost, Latency: lat, TTFT: lat / 2}
}

func TestBucketEdgesPutAnEventInTheBucketThatHoldsIt(t *testing.T) {
	m := NewMemory()
	m.Add(settled(t0.Add(59*time.Second+999*time.Millisecond), "a", "m", "fast", 1, 1, 10, time.Millisecond))
	m.Add(settled(t0.Add(time.Minute), "a", "m", "fast", 2, 2, 20, time.Millisecond))
	m.Add(settled(t0.Add(-time.Nanosecond), "a", "m", "fast", 4, 4, 40, time.Millisecond))
	bs, err := m.Query(Query{Start: t0, End: t0.Add(2 * time.Minute), Width: Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 2 || !bs[0].Start.Equal(t0) || !bs[1].End.Equal(t0.Add(2*time.Minute)) {
		t.Fatalf("buckets %+v", bs)
	}
	if got := bs[0].Results[0].InputTokens; got != 1 {
		t.Errorf("minute 0 input = %d, want 1", got)
	}
	if got := bs[1].Results[0].InputTokens; got != 2 {
		t.Errorf("minute 1 input = %d, want 2", got)
	}
	day, _ := m.Query(Query{Start: t0.Add(-time.Hour), End: t0.Add(time.Hour), Width: Day})
	if len(day) != 2 || day[0].Results[0].Cost != 40 || day[1].Results[0].Cost != 30 {
		t.Fatalf("days %+v", day)
	}
}

func TestGroupingSplitsByModelTierAndTenantOnlyWhenAsked(t *testing.T) {
	m := NewMemory()
	m.Add(settled(t0, "a", "m1", "fast", 1, 0, 1, 0))
	m.Add(settled(t0, "a", "m2", "fast", 10, 0, 10, 0))
	m.Add(settled(t0, "a", "m2", "smart", 100, 0, 100, 0))
	m.Add(settled(t0, "b", "m1", "fast", 1000, 0, 1000, 0))
	q := Query{Start: t0, End: t0.Add(time.Hour), Width: Hour}
	total := func(q Query) []string {
		bs, err := m.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, r := range bs[0].Results {
			s = append(s, fmt.Sprintf("%s/%s/%s=%d", r.Tenant, r.Model, r.Tier, r.InputTokens))
		}
		return s
	}
	for _, c := range []struct {
		q    func(*Query)
		want []string
	}{
		{func(q *Query) {}, []string{"//=1111"}},
		{func(q *Query) { q.Tenants = []string{"a"} }, []string{"//=111"}},
		{func(q *Query) { q.Tenants = []string{"a"}; q.ByModel = true }, []string{"/m1/=1", "/m2/=110"}},
		{func(q *Query) { q.Tenants = []string{"a"}; q.ByTier = true }, []string{"//fast=11", "//smart=100"}},
		{func(q *Query) { q.ByTenant, q.ByModel, q.ByTier = true, true, true },
			[]string{"a/m1/fast=1", "a/m2/fast=10", "a/m2/smart=100", "b/m1/fast=1000"}},
		{func(q *Query) { q.Tenants = []string{"nobody"} }, nil},
	} {
		qq := q
		c.q(&qq)
		if got := total(qq); !slices.Equal(got, c.want) {
			t.Errorf("%+v: %v, want %v", qq, got, c.want)
		}
	}
}

// An adapter's requests are a series of their own beside their model's: grouped by
// adapter they are apart (the bare model's adapter is ""), grouped by model alone
// they sum into the model, and not grouped they are in the total.
func TestAdapterSeriesSplitOnlyWhenGroupedByAdapter(t *testing.T) {
	m := NewMemory()
	m.Add(settled(t0, "a", "m1", "fast", 1, 0, 1, 0))
	ad := settled(t0, "a", "m1", "fast", 10, 0, 10, 0)
	ad.Adapter = "ft-0"
	m.Add(ad)
	ad.Adapter, ad.InputTokens = "ft:m1:a:x", 100
	m.Add(ad)
	for _, c := range []struct {
		byModel, byAdapter bool
		want               []string
	}{
		{false, false, []string{"/=111"}},
		{true, false, []string{"m1/=111"}},
		{true, true, []string{"m1/=1", "m1/ft-0=10", "m1/ft:m1:a:x=100"}},
		{false, true, []string{"/=1", "/ft-0=10", "/ft:m1:a:x=100"}},
	} {
		bs, err := m.Query(Query{Start: t0, End: t0.Add(time.Hour), Width: Hour, ByModel: c.byModel, ByAdapter: c.byAdapter})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range bs[0].Results {
			got = append(got, fmt.Sprintf("%s/%s=%d", r.Model, r.Adapter, r.InputTokens))
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("by model %v, by adapter %v: %v, want %v", c.byModel, c.byAdapter, got, c.want)
		}
	}
}

func TestRetentionDropsOldMinutesAndHoursButKeepsDays(t *testing.T) {
	m := NewMemory()
	m.Add(settled(t0, "a", "m", "", 1, 0, 1, 0))
	m.Add(settled(t0.Add(48*time.Hour+time.Minute), "a", "m", "", 1, 0, 1, 0)) // prunes minutes
	bs, _ := m.Query(Query{Start: t0, End: t0.Add(time.Minute), Width: Minute})
	if len(bs[0].Results) != 0 {
		t.Errorf("minute bucket older than 48 h kept: %+v", bs[0])
	}
	bs, _ = m.Query(Query{Start: t0, End: t0.Add(time.Hour), Width: Hour})
	if len(bs[0].Results) != 1 {
		t.Errorf("hour bucket younger than 90 days dropped")
	}
	m.Add(settled(t0.Add(91*24*time.Hour), "a", "m", "", 1, 0, 1, 0))
	bs, _ = m.Query(Query{Start: t0, End: t0.Add(time.Hour), Width: Hour})
	if len(bs[0].Results) != 0 {
		t.Errorf("hour bucket older than 90 days kept")
	}
	bs, _ = m.Query(Query{Start: t0, End: t0.Add(24 * time.Hour), Width: Day})
	if len(bs[0].Results) != 1 || bs[0].Results[0].Requests != 1 {
		t.Errorf("day bucket dropped: %+v", bs[0])
	}
}

func TestRefusalsCountByReasonAndNotAsRequests(t *testing.T) {
	m := NewMemory()
	m.Add(Event{Time: t0, Tenant: "a", Refused: Rate})
	m.Add(Event{Time: t0, Tenant: "a", Refused: Rate})
	m.Add(Event{Time: t0, Tenant: "a", Refused: Concurrency})
	m.Add(Event{Time: t0, Tenant: "a", Model: "m", Admitted: true, Status: 429, Refused: Budget})
	bs, _ := m.Query(Query{Start: t0, End: t0.Add(time.Minute), Width: Minute})
	c := bs[0].Results[0].Counts
	if c.Refused(Rate) != 2 || c.Refused(Concurrency) != 1 || c.Refused(Budget) != 1 || c.RefusedTotal() != 4 {
		t.Errorf("refusals %v", c.Refusals)
	}
	if c.Requests != 1 || c.Errors != 1 {
		t.Errorf("requests %d errors %d, want 1 1 (the admitted one)", c.Requests, c.Errors)
	}
}

func TestQuantilesOfMergedBucketsAreTheQuantilesOfAllObservations(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var whole Hist
	parts := make([]Hist, 7)
	var all []time.Duration
	for i := range 5000 {
		d := time.Duration(r.ExpFloat64() * float64(300*time.Millisecond))
		all = append(all, d)
		whole.Observe(d)
		parts[i%7].Observe(d)
	}
	var merged Hist
	for i := range parts {
		merged.Merge(&parts[i])
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	for _, q := range []float64{.5, .9, .95, .99} {
		if merged.Quantile(q) != whole.Quantile(q) {
			t.Errorf("q%.2f merged %v whole %v", q, merged.Quantile(q), whole.Quantile(q))
		}
		exact := all[int(q*float64(len(all)))-1]
		got := merged.Quantile(q)
		// The answer is the upper bound of the bin holding the exact quantile.
		i := 0
		for Bins[i] < exact {
			i++
		}
		if got != Bins[i] {
			t.Errorf("q%.2f = %v, exact %v is in the bin ending %v", q, got, exact, Bins[i])
		}
	}
	var empty Hist
	if empty.Quantile(.5) != 0 {
		t.Error("empty histogram has a quantile")
	}
}

// BenchmarkQuery30Days settles 1,000,000 requests over 1,000 tenants spread over 30
// days, then queries one tenant's 30 days by day and by hour, and every tenant's by
// day; it reports the p95 of each query kind (ms) beside ns/op.
func BenchmarkQuery30Days(b *testing.B) {
	const tenants, requests = 1000, 1_000_000
	m := NewMemory()
	end := t0.Add(30 * 24 * time.Hour)
	r := rand.New(rand.NewPCG(3, 4))
	models := []string{"tiny", "small", "big"}
	tiersOf := []string{"fast", "balanced", "smart"}
	names := make([]string, tenants)
	for i := range names {
		names[i] = fmt.Sprintf("tenant-%04d", i)
	}
	for i := range requests {
		at := t0.Add(time.Duration(int64(i) * int64(end.Sub(t0)) / requests))
		k := r.IntN(3)
		m.Add(settled(at, names[r.IntN(tenants)], models[k], tiersOf[k], 100+r.IntN(900), r.IntN(500),
			money.Money(r.IntN(1e6)), time.Duration(r.IntN(3000))*time.Millisecond))
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heapMB := float64(ms.HeapAlloc) / (1 << 20)
	b.ResetTimer()
	for _, c := range []struct {
		name string
		q    func(i int) Query
	}{
		{"tenant_by_day", func(i int) Query {
			return Query{Tenants: []string{names[i%tenants]}, Start: t0, End: end, Width: Day, ByModel: true, ByTier: true}
		}},
		{"tenant_by_hour", func(i int) Query {
			return Query{Tenants: []string{names[i%tenants]}, Start: t0, End: end, Width: Hour, ByModel: true}
		}},
		{"all_by_day", func(i int) Query { return Query{Start: t0, End: end, Width: Day, ByModel: true} }},
	} {
		b.Run(c.name, func(b *testing.B) {
			var lat []time.Duration
			i := 0
			for b.Loop() {
				s := time.Now()
				if _, err := m.Query(c.q(i)); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(s))
				i++
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)*95/100])/1e6, "p95-ms")
			b.ReportMetric(heapMB, "heap-MB")
		})
	}
}

// BenchmarkAdd is the cost a settlement pays to count itself, from parallel
// goroutines over 1,000 tenants, at 1,000 settlements per (simulated) second per
// goroutine.
func BenchmarkAdd(b *testing.B) {
	m := NewMemory()
	names := make([]string, 1000)
	for i := range names {
		names[i] = fmt.Sprintf("tenant-%04d", i)
	}
	b.RunParallel(func(pb *testing.PB) {
		r := rand.New(rand.NewPCG(rand.Uint64(), 1))
		i := 0
		for pb.Next() {
			i++
			m.Add(settled(t0.Add(time.Duration(i)*time.Millisecond), names[r.IntN(len(names))], "tiny", "fast", 100, 20, 1000, 40*time.Millisecond))
		}
	})
}

// Only settled requests that waited for a cold start count as cold starts, and their
// waits add up; a refusal before admission never counts.
func TestColdStartsCountTheSettledRequestsThatWaitedAndSumTheirWaits(t *testing.T) {
	m := NewMemory()
	warm := settled(t0, "a", "m", "fast", 1, 1, 1, time.Millisecond)
	cold1, cold2 := warm, warm
	cold1.ColdStart, cold2.ColdStart = 300*time.Millisecond, 1200*time.Millisecond
	m.Add(warm)
	m.Add(cold1)
	m.Add(cold2)
	m.Add(Event{Time: t0, Tenant: "a", Refused: Rate, ColdStart: time.Second}) // never admitted
	bs, err := m.Query(Query{Start: t0, End: t0.Add(time.Hour), Width: Hour})
	if err != nil {
		t.Fatal(err)
	}
	r := bs[0].Results[0]
	if r.Requests != 3 || r.ColdStarts != 2 || r.ColdStartTime != 1500*time.Millisecond {
		t.Errorf("requests %d, cold starts %d taking %s; want 3, 2 taking 1.5s", r.Requests, r.ColdStarts, r.ColdStartTime)
	}
}

// TestGrammarTimeSumsTheSettledRequests: the time settled requests' grammar masks
// took (structured outputs) adds up in the tenant's rollup; a refusal before
// admission never counts.
func TestGrammarTimeSumsTheSettledRequests(t *testing.T) {
	m := NewMemory()
	plain := settled(t0, "a", "m", "fast", 1, 1, 1, time.Millisecond)
	json1, json2 := plain, plain
	json1.GrammarTime, json2.GrammarTime = 30*time.Millisecond, 45*time.Millisecond
	m.Add(plain)
	m.Add(json1)
	m.Add(json2)
	m.Add(Event{Time: t0, Tenant: "a", Refused: Rate, GrammarTime: time.Second}) // never admitted
	bs, err := m.Query(Query{Start: t0, End: t0.Add(time.Hour), Width: Hour})
	if err != nil {
		t.Fatal(err)
	}
	if r := bs[0].Results[0]; r.Requests != 3 || r.GrammarTime != 75*time.Millisecond {
		t.Errorf("requests %d, grammar time %s; want 3, 75ms", r.Requests, r.GrammarTime)
	}
}
