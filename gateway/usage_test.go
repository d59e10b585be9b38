package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lmlite/lmlite/money"
	"github.com/lmlite/lmlite/policies"
	"github.com/lmlite/lmlite/respstore"
	"github.com/lmlite/lmlite/tenancy"
	"github.com/lmlite/lmlite/usage"
)

// testClock is a clock the test moves.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

type usagePageT struct {
	Object string `json:"object"`
	Data   []struct {
		Object    string `json:"object"`
		StartTime int64  `json:"start_time"`
		EndTime   int64  `json:"end_time"`
		Results   []struct {
			Object            string  `json:"object"`
			InputTokens       int64   `json:"input_tokens"`
			OutputTokens      int64   `json:"output_tokens"`
			InputCachedTokens int64   `json:"input_cached_tokens"`
			NumModelRequests  int64   `json:"num_model_requests"`
			Model             *string `json:"model"`
			Tier              *string `json:"tier"`
			ProjectID         *string `json:"project_id"`
			Amount            *struct {
				Value    float64 `json:"value"`
				Currency string  `json:"currency"`
			} `json:"amount"`
		} `json:"results"`
	} `json:"data"`
	HasMore  bool    `json:"has_more"`
	NextPage *string `json:"next_page"`
}

func (ts *testServer) usagePage(path, key string, q url.Values) (int, usagePageT, string) {
	ts.t.Helper()
	resp, body := ts.get(path+"?"+q.Encode(), key)
	var p usagePageT
	if resp.StatusCode == 200 {
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			ts.t.Fatalf("%s: %v", body, err)
		}
	}
	return resp.StatusCode, p, body
}

func (ts *testServer) chatAt(c *testClock, at time.Time, tenant, model string) {
	ts.t.Helper()
	c.set(at)
	resp, body := ts.post("/v1/chat/completions", ts.keys[tenant],
		`{"model":"`+model+`","max_tokens":8,"messages":[{"role":"user","content":"hello there"}]}`)
	if resp.StatusCode != 200 {
		ts.t.Fatalf("chat %s %s: %d %s", tenant, model, resp.StatusCode, body)
	}
}

var day0 = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

func vals(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Add(kv[i], kv[i+1])
	}
	return v
}

func unix(t time.Time) string { return fmt.Sprint(t.Unix()) }

// usageServer settles, with a fixed clock: acme 2 tiny + 1 big in minute 10:00 (one
// at 10:00:59.999), 1 tiny at exactly 10:01:00, 1 tiny the next day; twotier 1 tiny.
func usageServer(t *testing.T) (*testServer, *testClock) {
	c := &testClock{t: day0}
	ts := startServerWith(t, testConfig, newFakeEngine(), Options{Now: c.now}, nil)
	ts.chatAt(c, day0.Add(10*time.Second), "acme", "tiny")
	ts.chatAt(c, day0.Add(59*time.Second+999*time.Millisecond), "acme", "tiny")
	ts.chatAt(c, day0.Add(30*time.Second), "acme", "big")
	ts.chatAt(c, day0.Add(time.Minute), "acme", "tiny")
	ts.chatAt(c, day0.Add(24*time.Hour), "acme", "tiny")
	ts.chatAt(c, day0.Add(5*time.Second), "twotier", "tiny")
	c.set(day0.Add(48 * time.Hour))
	return ts, c
}

func TestUsageCompletionsBucketEdgesAndGrouping(t *testing.T) {
	ts, _ := usageServer(t)
	key := ts.keys["acme"]
	code, p, body := ts.usagePage("/v1/organization/usage/completions", key,
		vals("start_time", unix(day0), "end_time", unix(day0.Add(2*time.Minute)), "bucket_width", "1m"))
	if code != 200 || p.Object != "page" || len(p.Data) != 2 || p.HasMore || p.NextPage != nil {
		t.Fatalf("%d %s", code, body)
	}
	if p.Data[0].StartTime != day0.Unix() || p.Data[0].EndTime != day0.Add(time.Minute).Unix() || p.Data[0].Object != "bucket" {
		t.Errorf("bucket 0 edges %d-%d", p.Data[0].StartTime, p.Data[0].EndTime)
	}
	r0, r1 := p.Data[0].Results, p.Data[1].Results
	if len(r0) != 1 || r0[0].NumModelRequests != 3 || r0[0].Model != nil || r0[0].Object != "organization.usage.completions.result" {
		t.Errorf("minute 10:00: %+v, want 3 requests ungrouped", r0)
	}
	if len(r1) != 1 || r1[0].NumModelRequests != 1 {
		t.Errorf("minute 10:01 (the request at exactly 10:01:00): %+v", r1)
	}
	// group_by model and tier.
	_, p, body = ts.usagePage("/v1/organization/usage/completions", key,
		vals("start_time", unix(day0), "end_time", unix(day0.Add(time.Minute)), "bucket_width", "1m", "group_by", "model", "group_by", "tier"))
	got := map[string]int64{}
	for _, r := range p.Data[0].Results {
		got[*r.Model+"/"+*r.Tier] = r.NumModelRequests
	}
	if len(got) != 2 || got["tiny/fast"] != 2 || got["big/deep"] != 1 {
		t.Errorf("grouped by model and tier: %v (%s)", got, body)
	}
	// Totals over the days equal the ledger's tokens.
	_, p, _ = ts.usagePage("/v1/organization/usage/completions", key,
		vals("start_time", unix(day0), "end_time", unix(day0.Add(48*time.Hour)), "bucket_width", "1d"))
	var in, out, n int64
	for _, b := range p.Data {
		for _, r := range b.Results {
			in, out, n = in+r.InputTokens, out+r.OutputTokens, n+r.NumModelRequests
		}
	}
	var lin, lout, ln int64
	for _, e := range ts.ledger() {
		if e.Tenant == "acme" {
			lin, lout, ln = lin+int64(e.PromptTokens), lout+int64(e.CompletionTokens), ln+1
		}
	}
	if in != lin || out != lout || n != ln || n != 5 {
		t.Errorf("usage %d/%d/%d, ledger %d/%d/%d", in, out, n, lin, lout, ln)
	}
}

func TestCostsEqualTheLedgerAndPaginate(t *testing.T) {
	ts, _ := usageServer(t)
	var ledger money.Money
	for _, e := range ts.ledger() {
		if e.Tenant == "acme" {
			ledger += e.Cost
		}
	}
	if ledger == 0 {
		t.Fatal("nothing spent")
	}
	// 48 hourly buckets, 24 a page: two pages, the cursor continues where the first ended.
	q := vals("start_time", unix(day0), "end_time", unix(day0.Add(48*time.Hour)), "bucket_width", "1h", "limit", "24")
	var sum float64
	var pages, buckets int
	var last int64
	for {
		code, p, body := ts.usagePage("/v1/organization/costs", ts.keys["acme"], q)
		if code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		pages++
		for _, b := range p.Data {
			if last != 0 && b.StartTime != last {
				t.Fatalf("bucket starts at %d, previous ended %d", b.StartTime, last)
			}
			last = b.EndTime
			buckets++
			for _, r := range b.Results {
				if r.Object != "organization.costs.result" || r.Amount == nil || r.Amount.Currency != "usd" {
					t.Fatalf("result %s", body)
				}
				sum += r.Amount.Value
			}
		}
		if !p.HasMore {
			if p.NextPage != nil {
				t.Error("next_page without has_more")
			}
			break
		}
		q.Set("page", *p.NextPage)
	}
	if pages != 2 || buckets != 48 {
		t.Errorf("%d pages of %d buckets, want 2 of 48", pages, buckets)
	}
	if got := money.Money(math.Round(sum * 1e9)); got != ledger {
		t.Errorf("costs sum to %v, the ledger to %v", got, ledger)
	}
	// A cursor of another query is refused.
	q.Set("page", "page_bogus")
	if code, _, _ := ts.usagePage("/v1/organization/costs", ts.keys["acme"], q); code != 400 {
		t.Errorf("bogus page: %d, want 400", code)
	}
}

func TestUsageIsScopedToTheCallersTenant(t *testing.T) {
	ts, _ := usageServer(t)
	q := vals("start_time", unix(day0), "end_time", unix(day0.Add(time.Hour)), "bucket_width", "1h", "group_by", "project_id")
	count := func(p usagePageT) map[string]int64 {
		m := map[string]int64{}
		for _, r := range p.Data[0].Results {
			m[*r.ProjectID] += r.NumModelRequests
		}
		return m
	}
	_, p, _ := ts.usagePage("/v1/organization/usage/completions", ts.keys["twotier"], q)
	if got := count(p); len(got) != 1 || got["twotier"] != 1 {
		t.Errorf("twotier sees %v, want only itself", got)
	}
	_, p, _ = ts.usagePage("/v1/organization/usage/completions", ts.keys["small"], q)
	if got := count(p); len(got) != 0 {
		t.Errorf("small (spent nothing) sees %v", got)
	}
	q.Set("tenant_ids", "acme")
	if code, _, body := ts.usagePage("/v1/organization/usage/completions", ts.keys["twotier"], q); code != 403 {
		t.Errorf("a tenant asking for another's: %d %s", code, body)
	}
	_, p, _ = ts.usagePage("/v1/organization/usage/completions", "admin-secret", q)
	if got := count(p); len(got) != 1 || got["acme"] != 4 {
		t.Errorf("admin with tenant_ids=acme sees %v", got)
	}
	q.Del("tenant_ids")
	_, p, _ = ts.usagePage("/v1/organization/usage/completions", "admin-secret", q)
	if got := count(p); len(got) != 2 || got["acme"] != 4 || got["twotier"] != 1 {
		t.Errorf("admin sees %v, want acme 4 and twotier 1", got)
	}
	if code, _, _ := ts.usagePage("/v1/organization/usage/completions", "lml_bogus", q); code != 401 {
		t.Errorf("bad key: %d", code)
	}
}

func TestUsageQueryValidation(t *testing.T) {
	ts, _ := usageServer(t)
	for _, q := range []url.Values{
		vals(),
		vals("start_time", "x"),
		vals("start_time", unix(day0), "end_time", unix(day0)),
		vals("start_time", unix(day0), "bucket_width", "5m"),
		vals("start_time", unix(day0), "group_by", "user_id"),
		vals("start_time", unix(day0), "bucket_width", "1d", "limit", "32"),
	} {
		if code, _, body := ts.usagePage("/v1/organization/usage/completions", ts.keys["acme"], q); code != 400 {
			t.Errorf("%v: %d %s, want 400", q, code, body)
		}
	}
}

func TestLimitsShowPlanBudgetsAndRefusals(t *testing.T) {
	c := &testClock{t: day0}
	ts := startServerWith(t, testConfig, newFakeEngine(), Options{Now: c.now}, nil)
	// slow: 1 request/s, burst 1: the second at the same instant is refused (rate).
	ts.chatAt(c, day0, "slow", "tiny")
	if resp, _ := ts.post("/v1/chat/completions", ts.keys["slow"], `{"model":"tiny","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`); resp.StatusCode != 429 {
		t.Fatalf("second request: %d, want 429", resp.StatusCode)
	}
	ts.chatAt(c, day0.Add(2*time.Second), "race", "tiny")
	type lim struct {
		Plan    string `json:"plan"`
		Budgets map[string]struct {
			LimitUSD     *float64 `json:"limit_usd"`
			SpentUSD     float64  `json:"spent_usd"`
			RemainingUSD *float64 `json:"remaining_usd"`
		} `json:"budgets"`
		Rate struct {
			RequestsPerSecond *float64 `json:"requests_per_second"`
			TokensPerMinute   *int     `json:"tokens_per_minute"`
			MaxConcurrency    *int     `json:"max_concurrency"`
		} `json:"rate_limits"`
		Usage struct {
			RequestsThisMinute int64 `json:"requests_this_minute"`
			RefusalsThisMinute int64 `json:"refusals_this_minute"`
		} `json:"usage"`
	}
	get := func(tenant string) lim {
		resp, body := ts.get("/v1/lmlite/limits", ts.keys[tenant])
		var l lim
		if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &l) != nil {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		return l
	}
	s := get("slow")
	if s.Plan != "slow" || s.Rate.RequestsPerSecond == nil || *s.Rate.RequestsPerSecond != 1 || s.Rate.MaxConcurrency != nil || s.Rate.TokensPerMinute != nil {
		t.Errorf("slow limits %+v", s)
	}
	if s.Usage.RequestsThisMinute != 1 || s.Usage.RefusalsThisMinute != 1 {
		t.Errorf("slow usage %+v, want 1 request and 1 refusal", s.Usage)
	}
	if d := s.Budgets["day"]; d.LimitUSD != nil || d.RemainingUSD != nil {
		t.Errorf("slow has no budget, got %+v", d)
	}
	r := get("race")
	var spent money.Money
	for _, e := range ts.ledger() {
		if e.Tenant == "race" {
			spent += e.Cost
		}
	}
	d := r.Budgets["day"]
	if d.LimitUSD == nil || *d.LimitUSD != 0.05 || d.RemainingUSD == nil || money.USD(*d.RemainingUSD) != money.USD(0.05)-spent || money.USD(d.SpentUSD) != spent {
		t.Errorf("race day budget %+v, spent %v", d, spent)
	}
	if resp, _ := ts.get("/v1/lmlite/limits", ""); resp.StatusCode != 401 {
		t.Errorf("no key: %d", resp.StatusCode)
	}
}

func TestMetricsNeedTheBearerTokenWhenConfigured(t *testing.T) {
	open := startServer(t, testConfig, newFakeEngine())
	if resp, _ := open.get("/metrics", ""); resp.StatusCode != 200 {
		t.Errorf("/metrics without a metrics key configured: %d", resp.StatusCode)
	}
	ts := startServerWith(t, testConfig, newFakeEngine(), Options{MetricsKey: "scrape-secret"}, nil)
	for key, want := range map[string]int{"": 401, "wrong": 401, ts.keys["acme"]: 401, "scrape-secret": 200} {
		if resp, body := ts.get("/metrics", key); resp.StatusCode != want {
			t.Errorf("/metrics with %q: %d, want %d", key, resp.StatusCode, want)
		} else if want == 200 && !strings.Contains(body, "lmlite_in_flight_requests") {
			t.Error("no metrics")
		}
	}
}

// The rollups a restarted server loads from the store (what New does) answer as the
// live ones did.
func TestRollupsLoadedFromTheStoreAnswerTheSame(t *testing.T) {
	ts, c := usageServer(t)
	restarted := &Server{ten: ts.srv.ten, now: c.now}
	if err := restarted.initUsage(nil); err != nil {
		t.Fatal(err)
	}
	for _, w := range []usage.Width{usage.Minute, usage.Hour, usage.Day} {
		q := usage.Query{Start: day0, End: day0.Add(48 * time.Hour), Width: w, ByTenant: true, ByModel: true, ByTier: true}
		live, err1 := ts.srv.usage.Query(q)
		rebuilt, err2 := restarted.usage.Query(q)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if !reflect.DeepEqual(live, rebuilt) {
			t.Errorf("width %s: rebuilt rollups differ", w)
		}
		if n := len(live); n == 0 {
			t.Fatal("no buckets")
		}
	}
}

// TestRefusalsBeforeAdmissionSurviveARestart: the ledger is the one feed of usage, so
// a refusal before admission (a rate limit's 429) is counted in the live rollups and,
// after a restart, in those loaded from the store: the same numbers. (When the
// gateway counted such refusals in memory only, the restarted server lost them.)
func TestRefusalsBeforeAdmissionSurviveARestart(t *testing.T) {
	c := &testClock{t: day0}
	ts := startServerWith(t, testConfig, newFakeEngine(), Options{Now: c.now}, nil)
	ts.chatAt(c, day0, "slow", "tiny") // 1 request/s, burst 1: the next one is refused
	if resp, _ := ts.post("/v1/chat/completions", ts.keys["slow"], `{"model":"tiny","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`); resp.StatusCode != 429 {
		t.Fatalf("second request: %d, want 429", resp.StatusCode)
	}
	restarted := &Server{ten: ts.srv.ten, now: c.now}
	if err := restarted.initUsage(nil); err != nil {
		t.Fatal(err)
	}
	q := usage.Query{Tenants: []string{"slow"}, Start: day0, End: day0.Add(time.Minute), Width: usage.Minute}
	for name, r := range map[string]usage.Rollups{"live": ts.srv.usage, "restarted": restarted.usage} {
		bs, err := r.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		if len(bs) != 1 || len(bs[0].Results) != 1 {
			t.Fatalf("%s: %+v", name, bs)
		}
		if got := bs[0].Results[0]; got.Requests != 1 || got.Refused(usage.Rate) != 1 {
			t.Errorf("%s rollups: %d requests, %d rate refusals; want 1 and 1", name, got.Requests, got.Refused(usage.Rate))
		}
	}
}

// TestAFloodOfRateLimitedRequestsIsAFewLedgerEntries: a tenant flooding the gateway
// with 10,000 requests refused 429 (1 request/s, burst 1) does not make 10,000
// ledger entries: the refusals are coalesced (tenancy.Store.RecordRefusal) into a few
// entries, one per flush, while the live rollups count the 10,000 at once and those
// loaded from the store after a clean shutdown count them too. (Each refusal was an
// entry of its own, fsynced before its 429, when the ledger became the one feed.)
func TestAFloodOfRateLimitedRequestsIsAFewLedgerEntries(t *testing.T) {
	dir := t.TempDir()
	c := &testClock{t: day0}
	ts := startServerIn(t, dir, testConfig, newFakeEngine(), Options{Now: c.now}, nil)
	ts.chatAt(c, day0, "slow", "tiny")
	const flood, workers = 10000, 8
	body := `{"model":"tiny","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
	start := time.Now()
	var wg sync.WaitGroup
	var other atomic.Int64
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range flood / workers {
				req, _ := http.NewRequest("POST", ts.url+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+ts.keys["slow"])
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					other.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 429 {
					other.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := other.Load(); n != 0 {
		t.Fatalf("%d of the flood's requests were not answered 429", n)
	}
	q := usage.Query{Tenants: []string{"slow"}, Start: day0, End: day0.Add(time.Minute), Width: usage.Minute}
	check := func(name string, r usage.Rollups) {
		t.Helper()
		bs, err := r.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		if len(bs) != 1 || len(bs[0].Results) != 1 {
			t.Fatalf("%s: %+v", name, bs)
		}
		if got := bs[0].Results[0]; got.Requests != 1 || got.Refused(usage.Rate) != flood {
			t.Errorf("%s rollups: %d requests, %d rate refusals; want 1 and %d", name, got.Requests, got.Refused(usage.Rate), flood)
		}
	}
	check("live", ts.srv.usage)
	flushes := int(time.Since(start)/time.Second) + 2 // one a second, and the shutdown's
	ts.stop()
	store, err := tenancy.Open(filepath.Join(dir, "lmlite.db"), tenancy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var entries, refusals int
	if err := store.Ledger(func(e tenancy.Entry) error {
		if e.Tenant == "slow" && e.NotAdmitted {
			entries++
			refusals += max(1, e.Count)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if entries > flushes || refusals != flood {
		t.Errorf("the ledger holds %d refusal entries standing for %d refusals, want at most %d for %d", entries, refusals, flushes, flood)
	}
	loaded := usage.NewMemory()
	if _, err := store.LoadRollups(loaded, day0); err != nil {
		t.Fatal(err)
	}
	check("loaded after a restart", loaded)
}

// TestUsageTotalsEqualTheLedgerAcrossARestart settles requests of several tenants and
// models over three days, some refused for money, restarts the server on the same
// store half-way (the new one loads the stored rollups), settles more, and checks that
// the usage and costs APIs' totals per tenant equal the ledger's to the nano-dollar,
// by day and by hour (paging through), and that nothing was counted twice.
func TestUsageTotalsEqualTheLedgerAcrossARestart(t *testing.T) {
	dir := t.TempDir()
	c := &testClock{t: day0}
	tenants := []string{"acme", "thin", "twotier", "race"}
	models := []string{"tiny", "big", "tiny"}
	run := func(ts *testServer, from, n int) (refused int) {
		for i := from; i < from+n; i++ {
			c.set(day0.Add(time.Duration(i) * 53 * time.Minute))
			tn, m := tenants[i%len(tenants)], models[i%len(models)]
			if tn == "twotier" {
				m = "tiny"
			}
			resp, body := ts.post("/v1/chat/completions", ts.keys[tn],
				fmt.Sprintf(`{"model":%q,"max_tokens":%d,"messages":[{"role":"user","content":"hello %d"}]}`, m, 1+i%7, i))
			switch resp.StatusCode {
			case 200:
			case 429:
				refused++
			default:
				t.Fatalf("request %d (%s %s): %d %s", i, tn, m, resp.StatusCode, body)
			}
		}
		return refused
	}
	a := startServerIn(t, dir, testConfig, newFakeEngine(), Options{Now: c.now}, nil)
	refused := run(a, 0, 40)
	a.stop()
	b := startServerIn(t, dir, testConfig, newFakeEngine(), Options{Now: c.now}, nil)
	refused += run(b, 40, 40)
	if refused == 0 {
		t.Error("no request was refused for money: the test does not cover refusals")
	}

	type totals struct {
		requests, in, out int64
		cost              money.Money
	}
	ledger := map[string]*totals{}
	entries := 0
	for _, e := range b.ledger() {
		l := ledger[e.Tenant]
		if l == nil {
			l = &totals{}
			ledger[e.Tenant] = l
		}
		l.requests++
		l.in += int64(e.PromptTokens)
		l.out += int64(e.CompletionTokens)
		l.cost += e.Cost
		entries++
	}
	if entries < 60 {
		t.Fatalf("only %d ledger entries", entries)
	}
	end := c.now().Add(time.Hour)
	for _, width := range []string{"1d", "1h"} {
		got := map[string]*totals{}
		at := func(tn string) *totals {
			if got[tn] == nil {
				got[tn] = &totals{}
			}
			return got[tn]
		}
		for _, path := range []string{"/v1/organization/usage/completions", "/v1/organization/costs"} {
			q := vals("start_time", unix(day0), "end_time", unix(end), "bucket_width", width, "group_by", "project_id", "limit", "7")
			for pages := 0; ; pages++ {
				code, p, body := b.usagePage(path, "admin-secret", q)
				if code != 200 || pages > 100 {
					t.Fatalf("%s %s: %d %s", path, width, code, body)
				}
				for _, bk := range p.Data {
					for _, r := range bk.Results {
						tt := at(*r.ProjectID)
						if r.Amount != nil {
							tt.cost += money.USD(r.Amount.Value)
							continue
						}
						tt.requests += r.NumModelRequests
						tt.in += r.InputTokens
						tt.out += r.OutputTokens
					}
				}
				if !p.HasMore {
					break
				}
				q.Set("page", *p.NextPage)
			}
		}
		for tn, l := range ledger {
			if g := got[tn]; g == nil || *g != *l {
				t.Errorf("width %s, tenant %s: usage API %+v, ledger %+v", width, tn, g, l)
			}
		}
		for tn := range got {
			if ledger[tn] == nil {
				t.Errorf("width %s: usage for %s, not in the ledger", width, tn)
			}
		}
	}
}

// start_time and end_time out of the range of dates (Unix seconds past year 9999, as
// 9223372036854775807) are a 400 naming the parameter, not a recovered panic.
func TestUsageTimesOutOfRangeAre400(t *testing.T) {
	ts, _ := usageServer(t)
	// The largest times allowed answer (an empty page).
	for _, path := range []string{"/v1/organization/usage/completions", "/v1/organization/costs"} {
		if code, _, body := ts.usagePage(path, ts.keys["acme"], vals("start_time", "253402300000", "end_time", "253402300799", "bucket_width", "1m")); code != 200 {
			t.Errorf("%s at the end of year 9999: %d %s", path, code, body)
		}
	}
	for _, c := range []struct {
		q     url.Values
		param string
	}{
		{vals("start_time", "9223372036854775807"), "start_time"},
		{vals("start_time", "253402300800"), "start_time"},
		{vals("start_time", unix(day0), "end_time", "9223372036854775807"), "end_time"},
		{vals("start_time", "9223372036854775806", "end_time", "9223372036854775807"), "start_time"},
		{vals("start_time", "-1"), "start_time"},
	} {
		for _, path := range []string{"/v1/organization/usage/completions", "/v1/organization/costs"} {
			code, _, body := ts.usagePage(path, ts.keys["acme"], c.q)
			if code != 400 || !strings.Contains(body, `"param":"`+c.param+`"`) {
				t.Errorf("%s %v: %d %s, want 400 naming %s", path, c.q, code, body, c.param)
			}
		}
	}
}

// GET /v1/lmlite/limits reports the tenant's own stored responses (count and bytes)
// against its plan's quota, and nothing of another tenant's.
func TestLimitsShowStoredResponses(t *testing.T) {
	c := &testClock{t: day0}
	store, err := respstore.OpenBolt(filepath.Join(t.TempDir(), "responses.db"), respstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ts := startServerWith(t, testConfig, newFakeEngine(), Options{Now: c.now, Responses: store}, nil)
	rec := respstore.Record{Tenant: "race", ID: "resp_1", Created: day0, Model: "tiny", Response: []byte(`{"id":"resp_1"}`),
		Input: []respstore.Item{{ID: "msg_1", JSON: []byte(`{"id":"msg_1","type":"message"}`)}}}
	if err := store.Put(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	type stored struct {
		Count, Bytes       int64
		MaxCount, MaxBytes *int64
	}
	get := func(tenant string) *stored {
		var l struct {
			Stored *struct {
				Count    int64  `json:"count"`
				Bytes    int64  `json:"bytes"`
				MaxCount *int64 `json:"max_count"`
				MaxBytes *int64 `json:"max_bytes"`
			} `json:"stored_responses"`
		}
		resp, body := ts.get("/v1/lmlite/limits", ts.keys[tenant])
		if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &l) != nil || l.Stored == nil {
			t.Fatalf("%s: %d %s", tenant, resp.StatusCode, body)
		}
		return &stored{l.Stored.Count, l.Stored.Bytes, l.Stored.MaxCount, l.Stored.MaxBytes}
	}
	r := get("race")
	if r.Count != 1 || r.Bytes != rec.Size() || r.MaxCount == nil || *r.MaxCount != policies.DefaultResponsesMaxCount ||
		r.MaxBytes == nil || *r.MaxBytes != policies.DefaultResponsesMaxBytes {
		t.Errorf("race: %+v, want 1 response of %d bytes and the default quota", r, rec.Size())
	}
	if s := get("slow"); s.Count != 0 || s.Bytes != 0 {
		t.Errorf("slow sees %+v", s)
	}
}

// A response over the plan's quota is a 400 naming the quota.
func TestResponsesQuotaErrorNamesTheQuota(t *testing.T) {
	e := responsesQuotaError(&respstore.LimitError{Limit: "responses_max_bytes", Max: 1000})
	if e.status != 400 || e.code != "response_quota_exceeded" || !strings.Contains(e.message, "responses_max_bytes (1000 bytes") {
		t.Errorf("%+v", e)
	}
}
