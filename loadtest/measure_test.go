package loadtest

import (
	"context"
	"math"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func streamRequest(t *testing.T, w Workload) *request {
	t.Helper()
	if err := w.normalize("test"); err != nil {
		t.Fatal(err)
	}
	return newGenerator(0, &w, 1).make()
}

// TestSSETiming measures a server whose chunks leave at known times: TTFT 60ms,
// then one chunk every 25ms. Each case runs in a synctest bubble against the
// fixture through a pipe (pipeTransport), so no time passes but the script's and
// every measured time is exact: the TTFT is the first chunk's send time, chunk i is
// timed at 60ms + i·25ms, the E2E is the last chunk's. A chunk timed late (by a
// buffered read, or by a clock read at the wrong place) fails the test. The HTTP
// client over a real socket is the other loadtest tests' (TestStopsAtRequestCount).
func TestSSETiming(t *testing.T) {
	const ttft, itl, n = 60 * time.Millisecond, 25 * time.Millisecond, 6
	pipeClient := func(f *fixture) *http.Client { return &http.Client{Transport: pipeTransport{f}} }
	for _, api := range []string{APIChat, APICompletions} {
		t.Run(api, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fixture{TTFT: ttft, ITL: itl}
				r := streamRequest(t, Workload{API: api, OutputTokens: Dist{Value: n}})
				res := do(context.Background(), pipeClient(f), pipeTarget, "lml_k", r, func() time.Duration { return 0 })
				if !res.OK() {
					t.Fatalf("not ok: %+v", res)
				}
				if len(res.Tokens) != n {
					t.Fatalf("timed %d chunks, want %d", len(res.Tokens), n)
				}
				if res.TTFT != res.Tokens[0] || res.TTFT != ttft {
					t.Errorf("TTFT %v (first chunk %v), want %v", res.TTFT, res.Tokens[0], ttft)
				}
				for i, at := range res.Tokens {
					if sent := ttft + time.Duration(i)*itl; at != sent {
						t.Errorf("chunk %d timed at %v, sent at %v", i, at, sent)
					}
				}
				if last := ttft + (n-1)*itl; res.E2E != last {
					t.Errorf("E2E %v, want the last chunk's %v", res.E2E, last)
				}
				if !res.UsageReported || res.CompletionTokens != n || res.PromptTokens != 7 || res.CachedTokens != 5 {
					t.Errorf("usage %v %d (%d cached)/%d", res.UsageReported, res.PromptTokens, res.CachedTokens, res.CompletionTokens)
				}
				if rec := res.Record("a"); rec.CachedTokens != 5 {
					t.Errorf("record %+v", rec)
				}
				a := newAcc()
				a.add(&res, true)
				a.add(&res, true)
				if a.m.CachedTokens != 10 || a.m.PromptTokens != 14 {
					t.Errorf("metrics: %d of %d prompt tokens cached, want 10 of 14", a.m.CachedTokens, a.m.PromptTokens)
				}
				if res.Tier != "fast" || res.Model != "fixture-model" {
					t.Errorf("tier %q model %q", res.Tier, res.Model)
				}
				if !strings.HasPrefix(res.Text, "t0 t1 ") {
					t.Errorf("text %q", res.Text)
				}
			})
		})
	}
	// Chunks are timed as they arrive, not when the stream ends: with a 1.5s pause
	// after the first chunk, the first is timed at 10ms, the second at 1.51s.
	t.Run("incremental", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			const first, gap = 10 * time.Millisecond, 1500 * time.Millisecond
			f := &fixture{TTFT: first, ITL: gap}
			r := streamRequest(t, Workload{OutputTokens: Dist{Value: 2}})
			res := do(context.Background(), pipeClient(f), pipeTarget, "", r, func() time.Duration { return 0 })
			if len(res.Tokens) != 2 || res.Tokens[0] != first || res.Tokens[1] != first+gap {
				t.Errorf("chunks timed at %v, sent at [%v %v]: the stream was not read incrementally", res.Tokens, first, first+gap)
			}
		})
	})
	t.Run("non-stream", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			no := false
			f := &fixture{TTFT: ttft, ITL: itl}
			r := streamRequest(t, Workload{Stream: &no, OutputTokens: Dist{Value: n}})
			res := do(context.Background(), pipeClient(f), pipeTarget, "", r, func() time.Duration { return 0 })
			if !res.OK() || len(res.Tokens) != 0 || res.TTFT != 0 || res.CompletionTokens != n || res.E2E != ttft+(n-1)*itl {
				t.Errorf("non-stream: %+v, want E2E %v", res, ttft+(n-1)*itl)
			}
		})
	})
	t.Run("no usage", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := &fixture{ITL: time.Millisecond, NoUsage: true}
			r := streamRequest(t, Workload{OutputTokens: Dist{Value: 5}})
			res := do(context.Background(), pipeClient(f), pipeTarget, "", r, func() time.Duration { return 0 })
			if !res.OK() || res.UsageReported || res.CompletionTokens != 5 {
				t.Errorf("counted chunks: %+v", res)
			}
		})
	})
}

func TestErrorsClassified(t *testing.T) {
	f := &fixture{Status: map[string]fixtureErr{
		"lml_broke": {429, "insufficient_quota"},
		"lml_fast":  {429, "rate_limit_exceeded"},
		"lml_pay":   {402, "payment_required"},
		"lml_bad":   {500, "internal"},
	}}
	srv := f.start(t)
	r := streamRequest(t, Workload{})
	cases := []struct{ key, errKey, code string }{
		{"lml_broke", "429", "insufficient_quota"},
		{"lml_fast", "429", "rate_limit_exceeded"},
		{"lml_pay", "402", "payment_required"},
		{"lml_bad", "500", "internal"},
		{"lml_ok", "", ""},
	}
	c := NewCollector([]string{"t"}, []float64{1}, 0, GoodputSLO{})
	for _, tc := range cases {
		res := do(context.Background(), srv.Client(), srv.URL, tc.key, r, func() time.Duration { return 0 })
		if res.ErrorKey() != tc.errKey || res.Code != tc.code {
			t.Errorf("%s: error key %q code %q, want %q %q", tc.key, res.ErrorKey(), res.Code, tc.errKey, tc.code)
		}
		c.Add(&res)
	}
	// A connection refused is a transport error.
	res := do(context.Background(), http.DefaultClient, "http://127.0.0.1:1", "", r, func() time.Duration { return 0 })
	if res.ErrorKey() != ErrTransport {
		t.Errorf("refused connection: %q", res.ErrorKey())
	}
	c.Add(&res)
	rep := c.Report(Meta{})
	if got := rep.Meta.ErrorSamples["429"]; !strings.HasPrefix(got, "insufficient_quota refused") {
		t.Errorf("first 429 sample %q", got)
	}
	m := rep.Overall
	if m.Requests != 6 || m.OK != 1 || m.Errors["429"] != 2 || m.Errors["402"] != 1 || m.Errors["500"] != 1 || m.Errors["transport"] != 1 ||
		m.QuotaExhausted != 1 || m.RateLimited != 1 || m.PaymentRequired != 1 {
		t.Errorf("metrics %+v", m)
	}
}

func TestReadSSEMalformed(t *testing.T) {
	cases := []struct {
		name, stream, class string
		err                 bool
		tokens              int
	}{
		{"cut short", "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n", "", true, 1},
		{"bad json", "data: {nope\n\n", ErrStream, false, 0},
		{"error event", "data: {\"error\":{\"message\":\"boom\",\"code\":\"overloaded\"}}\n\n", ErrStream, false, 0},
		{"comments and fields", ": keepalive\nevent: x\nid: 1\ndata: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata:[DONE]\n", "", false, 1},
		{"role-only chunk", "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\ndata: [DONE]\n\n", "", false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var res Result
			err := readSSE(strings.NewReader(tc.stream), time.Now(), &res)
			if (err != nil) != tc.err || res.Class != tc.class || len(res.Tokens) != tc.tokens {
				t.Errorf("err %v class %q tokens %d", err, res.Class, len(res.Tokens))
			}
		})
	}
}

// TestPercentiles feeds known latencies: e2e of 1..1000ms, TTFT a tenth of that,
// chunks 5ms apart. HDR keeps 3 significant digits, so each percentile is within
// 0.1% of the exact nearest-rank value.
func TestPercentiles(t *testing.T) {
	c := NewCollector([]string{"a", "b"}, []float64{1, 1}, 0, GoodputSLO{E2Ems: 500})
	for i := 1; i <= 1000; i++ {
		e2e := time.Duration(i) * time.Millisecond
		r := Result{Tenant: i % 2, Status: 200, E2E: e2e, TTFT: e2e / 10, CompletionTokens: 3, Start: time.Duration(i) * time.Millisecond}
		r.Tokens = []time.Duration{r.TTFT, r.TTFT + 5*time.Millisecond, r.TTFT + 10*time.Millisecond}
		c.Add(&r)
	}
	rep := c.Report(Meta{})
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > want*0.001+0.001 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	o := rep.Overall
	near("e2e p50", o.E2E.P50, 500)
	near("e2e p90", o.E2E.P90, 900)
	near("e2e p99", o.E2E.P99, 990)
	near("ttft p50", o.TTFT.P50, 50)
	near("ttft p99", o.TTFT.P99, 99)
	near("itl p50", o.ITL.P50, 5)
	near("itl p99", o.ITL.P99, 5)
	if o.E2E.N != 1000 || o.ITL.N != 2000 {
		t.Errorf("sample counts %d %d", o.E2E.N, o.ITL.N)
	}
	// Tenant b has the odd values 1,3,...,999: its median is 499 (nearest rank 250).
	near("b e2e p50", rep.Tenants["b"].E2E.P50, 499)
	near("a e2e p50", rep.Tenants["a"].E2E.P50, 500)
	if o.Good != 500 {
		t.Errorf("good %d, want 500 (e2e <= 500ms)", o.Good)
	}
	// The window runs from 0 to the last end (1000ms start + 1000ms e2e).
	if rep.Meta.WindowS != 2 || o.RPS != 500 || o.TokensPerS != 1500 || o.GoodputRPS != 250 {
		t.Errorf("window %v rps %v tok/s %v goodput %v", rep.Meta.WindowS, o.RPS, o.TokensPerS, o.GoodputRPS)
	}
	if len(rep.Timeline) == 0 {
		t.Fatal("no timeline")
	}
	total := 0
	for _, p := range rep.Timeline {
		total += p.Requests
	}
	if total != 1000 {
		t.Errorf("timeline holds %d requests", total)
	}
}

func TestMaxMinFair(t *testing.T) {
	cases := []struct {
		name           string
		capacity       float64
		demand, weight []float64
		want           []float64
	}{
		{"equal split", 30, []float64{100, 100, 100}, []float64{1, 1, 1}, []float64{10, 10, 10}},
		{"small demand satisfied", 30, []float64{4, 100, 100}, []float64{1, 1, 1}, []float64{4, 13, 13}},
		{"weights", 40, []float64{100, 100}, []float64{3, 1}, []float64{30, 10}},
		{"weighted with satisfied", 40, []float64{5, 100, 100}, []float64{2, 1, 1}, []float64{5, 17.5, 17.5}},
		{"all satisfied", 100, []float64{10, 20}, []float64{1, 1}, []float64{10, 20}},
		{"no demand", 10, []float64{0, 10}, []float64{1, 1}, []float64{0, 10}},
		{"nothing served", 0, []float64{5, 5}, []float64{1, 1}, []float64{0, 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := MaxMinFair(tc.capacity, tc.demand, tc.weight)
			for i := range got {
				if math.Abs(got[i]-tc.want[i]) > 1e-9 {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func TestJain(t *testing.T) {
	cases := []struct {
		xs   []float64
		want float64
	}{
		{[]float64{1, 1, 1, 1}, 1},
		{[]float64{1, 0, 0, 0}, 0.25},
		{[]float64{2, 1}, 0.9},
		{nil, 1},
	}
	for _, tc := range cases {
		if got := Jain(tc.xs); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("Jain(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
}

// TestFairnessNoisyTenant: a noisy tenant asking for 90% of the traffic and served
// its weighted max-min share is fair (index 1); a quiet tenant starved while the
// noisy one takes everything is not.
func TestFairnessNoisyTenant(t *testing.T) {
	names := []string{"noisy", "q1", "q2"}
	w := []float64{1, 1, 1}
	fair := fairness(names, w, []float64{900, 50, 50}, []float64{200, 50, 50})
	if fair.Jain == nil || *fair.Jain != 1 {
		t.Errorf("fair case: jain %v", fair.Jain)
	}
	if tf := fair.Tenants["noisy"]; tf.Ratio != 1 || tf.FairShare != round3(200.0/300) {
		t.Errorf("noisy: %+v", tf)
	}
	unfair := fairness(names, w, []float64{900, 50, 50}, []float64{290, 5, 5})
	if unfair.Jain == nil || *unfair.Jain > 0.6 {
		t.Errorf("starved case: jain %v", *unfair.Jain)
	}
	none := fairness(names, w, []float64{1, 1, 1}, []float64{0, 0, 0})
	if none.Jain != nil {
		t.Errorf("nothing served: jain %v", *none.Jain)
	}
}

func TestSchedule(t *testing.T) {
	t.Run("constant", func(t *testing.T) {
		s := newSchedule(Arrival{Type: ArrivalConstant, Rate: 4}, newRand(1, 1))
		for i := 0; i < 10; i++ {
			if got, want := s.next(), time.Duration(i)*250*time.Millisecond; got != want {
				t.Fatalf("arrival %d at %v, want %v", i, got, want)
			}
		}
	})
	t.Run("poisson", func(t *testing.T) {
		s := newSchedule(Arrival{Type: ArrivalPoisson, Rate: 100}, newRand(7, 7))
		var last time.Duration
		const n = 20000
		for i := 0; i < n; i++ {
			at := s.next()
			if at < last {
				t.Fatal("arrivals went back in time")
			}
			last = at
		}
		// Mean gap 10ms; over 20000 gaps the standard error is 0.7%.
		if mean := last.Seconds() / n; math.Abs(mean-0.01) > 0.0005 {
			t.Errorf("mean gap %v, want 10ms", mean)
		}
	})
	t.Run("bursts", func(t *testing.T) {
		s := newSchedule(Arrival{Type: ArrivalBursts, BurstSize: 3, BurstEvery: Dur(time.Second)}, newRand(1, 1))
		want := []time.Duration{0, 0, 0, time.Second, time.Second, time.Second, 2 * time.Second}
		for i, w := range want {
			if got := s.next(); got != w {
				t.Fatalf("arrival %d at %v, want %v", i, got, w)
			}
		}
		s = newSchedule(Arrival{Type: ArrivalBursts, Rate: 50, BurstSize: 10, BurstEvery: Dur(time.Second)}, newRand(1, 1))
		at0, between := 0, 0
		var last time.Duration
		for {
			at := s.next()
			if at < last {
				t.Fatal("arrivals went back in time")
			}
			last = at
			if at >= 10*time.Second {
				break
			}
			if at%time.Second == 0 {
				at0++
			} else {
				between++
			}
		}
		if at0 != 100 || between < 350 || between > 650 {
			t.Errorf("%d on burst instants (want 100), %d between (want about 500)", at0, between)
		}
	})
}

func TestDistDraw(t *testing.T) {
	rng := newRand(3, 3)
	cases := []Dist{
		{Kind: DistFixed, Value: 17},
		{Kind: DistUniform, Min: 5, Max: 9},
		{Kind: DistNormal, Mean: 100, StdDev: 30, Min: 50, Max: 150},
		{Kind: DistLognormal, Mean: 200, StdDev: 150, Max: 1000},
	}
	for _, d := range cases {
		sum := 0
		for i := 0; i < 5000; i++ {
			v := d.Draw(rng)
			lo, hi := max(d.Min, 1), d.Max
			if d.Kind == DistFixed {
				lo, hi = d.Value, d.Value
			}
			if v < lo || (hi > 0 && v > hi) {
				t.Fatalf("%+v drew %d", d, v)
			}
			sum += v
		}
		if d.Kind == DistLognormal {
			if mean := float64(sum) / 5000; mean < 170 || mean > 215 {
				t.Errorf("lognormal mean %v, want about 200 (less the clamp)", mean)
			}
		}
	}
}

// TestFairnessIgnoresOwnLimits: a tenant refused by its own budget is not a
// victim of unfairness.
func TestFairnessIgnoresOwnLimits(t *testing.T) {
	c := NewCollector([]string{"broke", "funded"}, []float64{1, 1}, 0, GoodputSLO{})
	for i := 0; i < 10; i++ {
		c.Add(&Result{Tenant: 0, Status: 429, Code: "insufficient_quota", E2E: time.Millisecond})
		c.Add(&Result{Tenant: 1, Status: 200, E2E: time.Millisecond})
	}
	rep := c.Report(Meta{})
	if rep.Fairness.Jain == nil || *rep.Fairness.Jain != 1 || rep.Fairness.Tenants["broke"].Demand != 0 {
		t.Errorf("fairness %+v", rep.Fairness)
	}
}

// TestSendLag: the report keeps how late open-loop requests left.
func TestSendLag(t *testing.T) {
	c := NewCollector([]string{"a"}, []float64{1}, 0, GoodputSLO{})
	for i := 0; i < 10; i++ {
		c.Add(&Result{Status: 200, E2E: time.Millisecond, Lag: time.Duration(i) * time.Millisecond})
	}
	l := c.Report(Meta{}).Meta.SendLag
	if l.N != 9 || math.Abs(l.Max-9) > 0.01 || math.Abs(l.P50-5) > 0.01 {
		t.Errorf("send lag %+v; want 9 late requests, max 9ms, median 5ms", l)
	}
}
