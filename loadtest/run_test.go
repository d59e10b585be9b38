package loadtest

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func mustScenario(t *testing.T, y string) *Scenario {
	t.Helper()
	s, err := ParseScenario([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestStopsAtDuration: a constant 40 req/s for 500ms sends 20 requests, none
// started after the bound, and the run ends when its last request does. The run
// is in a synctest bubble against the fixture through a pipe: its clock is the
// script's, not the machine's.
func TestStopsAtDuration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fixture{ITL: time.Millisecond}
		s := mustScenario(t, `
duration: 500ms
arrival: {type: constant, rate: 40}
workload: {output_tokens: 3}
tenants: [{name: a}]
`)
		t0 := time.Now()
		rep, err := Run(context.Background(), Config{Scenario: s, Target: pipeTarget, Transport: pipeTransport{f}})
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(t0)
		if rep.Meta.StoppedBy != StopDuration {
			t.Errorf("stopped by %q", rep.Meta.StoppedBy)
		}
		// Arrivals at 0, 25, ..., 475ms: 20 within the bound, none after it.
		if n := rep.Overall.Requests; n != 20 || rep.Overall.OK != n {
			t.Errorf("%d requests, %d ok; want 20 (40/s for 0.5s)", n, rep.Overall.OK)
		}
		if got := len(f.requests()); got != rep.Overall.Requests {
			t.Errorf("server saw %d requests, report has %d", got, rep.Overall.Requests)
		}
		// The last request starts at 475ms and streams 3 tokens 1ms apart.
		if took < 475*time.Millisecond || took > 500*time.Millisecond {
			t.Errorf("run took %v; want its last request's end, 475ms + 3 tokens", took)
		}
	})
}

// TestStopsAtRequestCount: a closed loop of 4 users and a cap of 13 measured
// requests sends exactly 13 after warm-up.
func TestStopsAtRequestCount(t *testing.T) {
	f := &fixture{ITL: time.Millisecond}
	srv := f.start(t)
	s := mustScenario(t, `
requests: 13
warmup: 150ms
arrival: {type: closed, users: 4}
workload: {output_tokens: 2}
tenants: [{name: a}]
`)
	rep, err := Run(context.Background(), Config{Scenario: s, Target: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Meta.StoppedBy != StopRequests || rep.Overall.Requests != 13 || rep.Overall.OK != 13 {
		t.Errorf("stopped by %q after %d requests (%d ok); want requests, 13", rep.Meta.StoppedBy, rep.Overall.Requests, rep.Overall.OK)
	}
	if rep.Meta.WarmupRequests == 0 {
		t.Error("no warm-up requests")
	}
	if got := len(f.requests()); got != 13+rep.Meta.WarmupRequests {
		t.Errorf("server saw %d requests, want %d", got, 13+rep.Meta.WarmupRequests)
	}
	for _, p := range rep.Timeline {
		if p.T < 0 {
			t.Errorf("timeline point before warm-up end: %v", p.T)
		}
	}
}

// TestDrainCancels: a server that never answers; after the 300ms bound the
// requests get the 200ms drain and are then cancelled and counted (in a synctest
// bubble, as TestStopsAtDuration).
func TestDrainCancels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fixture{Hang: true}
		s := mustScenario(t, `
duration: 300ms
drain: 200ms
arrival: {type: constant, rate: 10}
tenants: [{name: a}]
`)
		t0 := time.Now()
		rep, err := Run(context.Background(), Config{Scenario: s, Target: pipeTarget, Transport: pipeTransport{f}})
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(t0); took != 500*time.Millisecond {
			t.Errorf("run took %v; want bound 300ms + drain 200ms", took)
		}
		// Arrivals at 0, 100 and 200ms.
		if n := rep.Overall.Requests; n != 3 || rep.Overall.Errors[ErrCancelled] != n {
			t.Errorf("requests %d errors %v; want 3 cancelled", n, rep.Overall.Errors)
		}
	})
}

// TestInterrupt: cancelling the context stops the run at once, its requests in
// flight cancelled and counted (in a synctest bubble against a server that never
// answers, as TestDrainCancels: the run ends at the cancel's instant, not after
// the scenario's 10 minutes or a drain).
func TestInterrupt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fixture{Hang: true}
		s := mustScenario(t, `
duration: 10m
arrival: {type: constant, rate: 20}
tenants: [{name: a}]
`)
		ctx, cancel := context.WithTimeout(context.Background(), 175*time.Millisecond)
		defer cancel()
		t0 := time.Now()
		rep, err := Run(ctx, Config{Scenario: s, Target: pipeTarget, Transport: pipeTransport{f}})
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(t0); took != 175*time.Millisecond {
			t.Errorf("interrupted run took %v; want the cancel's 175ms", took)
		}
		// Arrivals at 0, 50, 100 and 150ms, all in flight at the cancel.
		n := rep.Overall.Requests
		if rep.Meta.StoppedBy != StopInterrupt || n != 4 || rep.Overall.Errors[ErrCancelled] != n {
			t.Errorf("stopped by %q after %d requests, errors %v; want interrupt, 4 cancelled", rep.Meta.StoppedBy, n, rep.Overall.Errors)
		}
	})
}

// TestDropsAtConcurrencyCap: an open loop faster than a slow server with room for
// two in flight drops the arrivals that find no room.
func TestDropsAtConcurrencyCap(t *testing.T) {
	f := &fixture{TTFT: 300 * time.Millisecond}
	srv := f.start(t)
	s := mustScenario(t, `
duration: 200ms
concurrency: 2
arrival: {type: constant, rate: 50}
workload: {output_tokens: 1}
tenants: [{name: a}]
`)
	rep, err := Run(context.Background(), Config{Scenario: s, Target: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if n := rep.Overall.Requests; n < 8 || n > 10 || rep.Overall.OK != 2 || rep.Overall.Errors[ErrDropped] != n-2 {
		t.Errorf("requests %d ok %d errors %v; want 10, 2 ok, 8 dropped", n, rep.Overall.OK, rep.Overall.Errors)
	}
}

// TestTenantsKeysAndShares: the shared arrival splits by weight, each tenant sends
// its own key, and a tenant's own arrival and workload replace the shared ones.
func TestTenantsKeysAndShares(t *testing.T) {
	f := &fixture{ITL: time.Millisecond, Status: map[string]fixtureErr{"lml_c": {429, "insufficient_quota"}}}
	srv := f.start(t)
	s := mustScenario(t, `
duration: 1s
arrival: {type: constant, rate: 30}
workload: {output_tokens: 2}
tenants:
  - {name: a, api_key: lml_a, weight: 2}
  - {name: b, api_key_env: KEY_B, weight: 1}
  - name: c
    api_key: lml_c
    arrival: {type: constant, rate: 5}
    workload: {api: completions, stream: false, tiers: [{tier_mode: fixed, tier: fast}], tier_via: headers}
`)
	env := map[string]string{"KEY_B": "lml_b"}
	rep, err := Run(context.Background(), Config{Scenario: s, Target: srv.URL, Getenv: func(k string) string { return env[k] }})
	if err != nil {
		t.Fatal(err)
	}
	// The last arrival of each may miss the deadline on a loaded machine.
	a, b, c := rep.Tenants["a"], rep.Tenants["b"], rep.Tenants["c"]
	if a.Requests < 19 || a.Requests > 20 || b.Requests < 9 || b.Requests > 10 || c.Requests < 4 || c.Requests > 5 || c.QuotaExhausted != c.Requests {
		t.Errorf("requests a %d b %d c %d (quota %d); want 20, 10, 5 (5)", a.Requests, b.Requests, c.Requests, c.QuotaExhausted)
	}
	if ok := a.OK + b.OK; rep.Overall.Tiers["fast"] != ok || rep.Overall.Models["fixture-model"] != ok {
		t.Errorf("tiers %v models %v", rep.Overall.Tiers, rep.Overall.Models)
	}
	// Only c sent tier options; every one of its requests was refused.
	if len(a.Asked) != 0 || len(b.Asked) != 0 || len(c.Asked) != 1 || c.Asked["fixed tier=fast"]["429"] != c.Requests {
		t.Errorf("asked: a %v b %v c %v", a.Asked, b.Asked, c.Asked)
	}
	keys := map[string]int{}
	for _, r := range f.requests() {
		keys[r.Key]++
		if r.Key == "lml_c" && (r.Header.Get("X-LMLite-Tier-Mode") != "fixed" || r.Header.Get("X-LMLite-Tier") != "fast" || r.Body["prompt"] == nil) {
			t.Errorf("tenant c request: headers %v body %v", r.Header, r.Body)
		}
	}
	if keys["lml_a"] != a.Requests || keys["lml_b"] != b.Requests || keys["lml_c"] != c.Requests {
		t.Errorf("keys seen %v", keys)
	}
	// One --api-key for every tenant.
	f.mu.Lock()
	f.seen = nil
	f.mu.Unlock()
	s.Duration = Dur(200 * time.Millisecond)
	if _, err := Run(context.Background(), Config{Scenario: s, Target: srv.URL, APIKey: "lml_one", Getenv: func(string) string { return "" }}); err != nil {
		t.Fatal(err)
	}
	for _, r := range f.requests() {
		if r.Key != "lml_one" {
			t.Fatalf("--api-key not used: %q", r.Key)
		}
	}
	// A missing environment variable with no fallback is an error.
	s.Tenants[1].APIKeyEnv, s.Tenants[1].APIKey = "NOPE", ""
	if _, err := Run(context.Background(), Config{Scenario: s, Target: srv.URL, Getenv: func(string) string { return "" }}); err == nil {
		t.Error("empty key variable accepted")
	}
}

// TestMultiTurnAndPrefix: one closed-loop user with 3-turn chats under a shared
// system prompt sends system+1, system+3, system+5 messages, then starts again,
// each turn carrying the answers it got.
func TestMultiTurnAndPrefix(t *testing.T) {
	f := &fixture{ITL: time.Millisecond}
	srv := f.start(t)
	s := mustScenario(t, `
requests: 7
arrival: {type: closed, users: 1}
workload:
  output_tokens: 2
  shared_prefix: {fraction: 1, tokens: 50}
  multi_turn: {turns: 3, conversations: 1}
  tiers: [{tier_mode: balanced, max_latency_ms: 300, max_cost_usd: 0.01}]
tenants: [{name: a}]
`)
	rep, err := Run(context.Background(), Config{Scenario: s, Target: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Overall.Asked; len(got) != 1 || got["balanced max_latency_ms=300 max_cost_usd=0.01"]["fast"] != 7 {
		t.Errorf("asked %v; want the 7 requests served by the fast tier", got)
	}
	seen := f.requests()
	want := []int{2, 4, 6, 2, 4, 6, 2}
	if len(seen) != len(want) {
		t.Fatalf("%d requests", len(seen))
	}
	var system string
	for i, r := range seen {
		msgs, _ := r.Body["messages"].([]any)
		if len(msgs) != want[i] {
			t.Fatalf("request %d has %d messages, want %d", i, len(msgs), want[i])
		}
		first := msgs[0].(map[string]any)
		if first["role"] != "system" || (system != "" && first["content"] != system) {
			t.Fatalf("request %d: first message %v", i, first)
		}
		system = first["content"].(string)
		if len(msgs) > 2 && msgs[2].(map[string]any)["content"] != "t0 t1 " {
			t.Errorf("request %d: the answer is not carried: %v", i, msgs[2])
		}
		if opt, _ := r.Body["lmlite"].(map[string]any); opt["tier_mode"] != "balanced" || opt["max_latency_ms"] != 300.0 || opt["max_cost_usd"] != 0.01 {
			t.Errorf("lmlite options %v", r.Body["lmlite"])
		}
	}
	if n := len(strings.Fields(system)); n != 54 {
		t.Errorf("system prompt has %d words, want 4 + 50", n)
	}
}

func TestCheckTarget(t *testing.T) {
	cases := []struct {
		url    string
		remote bool
		ok     bool
	}{
		{"http://127.0.0.1:8080", false, true},
		{"http://127.8.9.10:8080/", false, true},
		{"http://localhost:8080", false, true},
		{"http://[::1]:8080", false, true},
		{"https://LOCALHOST", false, true},
		{"http://10.0.0.1:8080", false, false},
		{"http://example.com", false, false},
		{"http://127.0.0.1.example.com", false, false},
		{"http://[::ffff:10.0.0.1]:80", false, false},
		{"http://10.0.0.1:8080", true, true},
		{"ftp://127.0.0.1", false, false},
		{"127.0.0.1:8080", false, false},
		{"http://127.0.0.1:8080/?x=1", false, false},
	}
	for _, tc := range cases {
		_, err := CheckTarget(tc.url, tc.remote)
		if (err == nil) != tc.ok {
			t.Errorf("CheckTarget(%q, %v) = %v", tc.url, tc.remote, err)
		}
	}
	if _, err := CheckTarget("http://192.168.1.1", false); !errors.Is(err, ErrRemote) {
		t.Errorf("remote target: %v, want ErrRemote", err)
	}
	s := mustScenario(t, "requests: 1\narrival: {type: closed, users: 1}\ntenants: [{name: a}]")
	if _, err := Run(context.Background(), Config{Scenario: s, Target: "http://192.0.2.1:80"}); !errors.Is(err, ErrRemote) {
		t.Errorf("Run to a remote target: %v", err)
	}
}

// TestNoRedirects: a redirect (which could lead off loopback) is not followed.
func TestNoRedirects(t *testing.T) {
	srv := httptest.NewServer(http.RedirectHandler("http://192.0.2.1/v1/chat/completions", http.StatusTemporaryRedirect))
	defer srv.Close()
	s := mustScenario(t, "requests: 2\narrival: {type: closed, users: 1}\ntenants: [{name: a}]")
	rep, err := Run(context.Background(), Config{Scenario: s, Target: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Overall.Errors["307"] != 2 {
		t.Errorf("errors %v, want two 307", rep.Overall.Errors)
	}
}

func TestParseScenarioErrors(t *testing.T) {
	base := "arrival: {type: poisson, rate: 1}\ntenants: [{name: a}]\n"
	cases := map[string]string{
		"unbounded":        base,
		"too long":         "duration: 31m\n" + base,
		"too many":         "requests: 1000001\n" + base,
		"unknown field":    "requests: 1\nbogus: 1\n" + base,
		"no tenants":       "requests: 1\narrival: {type: poisson, rate: 1}\n",
		"duplicate tenant": "requests: 1\narrival: {type: poisson, rate: 1}\ntenants: [{name: a}, {name: a}]",
		"no arrival":       "requests: 1\ntenants: [{name: a}]",
		"bad arrival":      "requests: 1\narrival: {type: random}\ntenants: [{name: a}]",
		"zero rate":        "requests: 1\narrival: {type: poisson}\ntenants: [{name: a}]",
		"bad duration":     "duration: soon\n" + base,
		"bad dist":         "requests: 1\nworkload: {prompt_tokens: {dist: zipf}}\n" + base,
		"crossed min/max":  "requests: 1\nworkload: {prompt_tokens: {dist: uniform, min: 9, max: 3}}\n" + base,
		"fixed without":    "requests: 1\nworkload: {tiers: [{tier_mode: fixed}]}\n" + base,
		"bad tier mode":    "requests: 1\nworkload: {tiers: [{tier_mode: fastest}]}\n" + base,
		"multi-turn text":  "requests: 1\nworkload: {api: completions, multi_turn: {turns: 3}}\n" + base,
		"extra model":      "requests: 1\nworkload: {extra: {model: x}}\n" + base,
		"negative weight":  "requests: 1\narrival: {type: poisson, rate: 1}\ntenants: [{name: a, weight: -1}]",
		"not yaml":         "{[",
	}
	for name, y := range cases {
		if _, err := ParseScenario([]byte(y)); !errors.Is(err, ErrScenario) {
			t.Errorf("%s: %v, want ErrScenario", name, err)
		}
	}
}

// TestShippedScenarios: every file in scenarios/ parses and is bounded.
func TestShippedScenarios(t *testing.T) {
	files, _ := filepath.Glob("scenarios/*.yaml")
	if len(files) < 5 {
		t.Fatalf("%d scenario files", len(files))
	}
	for _, p := range files {
		s, err := LoadScenario(p)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if s.Duration.D() > MaxDuration || s.Requests > MaxRequests || s.Name == "" {
			t.Errorf("%s: unbounded or unnamed", p)
		}
		if b, _ := os.ReadFile(p); !strings.HasPrefix(string(b), "#") {
			t.Errorf("%s: no comment saying what it shows", p)
		}
	}
}

func TestTierChoiceLabel(t *testing.T) {
	cases := []struct {
		c    TierChoice
		want string
	}{
		{TierChoice{}, "default"},
		{TierChoice{Mode: "max"}, "max"},
		{TierChoice{Mode: "fixed", Tier: "fast"}, "fixed tier=fast"},
		{TierChoice{Mode: "balanced", MaxLatencyMS: 300}, "balanced max_latency_ms=300"},
		{TierChoice{Weight: 2, Mode: "deep", MaxCostUSD: 0.0005}, "deep max_cost_usd=0.0005"},
		{TierChoice{Mode: "deep", MaxLatencyMS: 3000, MaxCostUSD: 0.01}, "deep max_latency_ms=3000 max_cost_usd=0.01"},
	}
	for _, c := range cases {
		if got := c.c.Label(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.c, got, c.want)
		}
	}
}
