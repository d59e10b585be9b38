package loadtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseSLOs(t *testing.T) {
	slos, err := ParseSLOs("ttft_p99=500ms, e2e_p90=2s,itl_p50=40,error_rate=1%,rps=5,fairness=0.9,goodput_ratio=0.95")
	if err != nil {
		t.Fatal(err)
	}
	want := []SLO{
		{"ttft_p99=500ms", "", "ttft_p99", 500, false},
		{"e2e_p90=2s", "", "e2e_p90", 2000, false},
		{"itl_p50=40", "", "itl_p50", 40, false},
		{"error_rate=1%", "", "error_rate", 0.01, false},
		{"rps=5", "", "rps", 5, true},
		{"fairness=0.9", "", "fairness", 0.9, true},
		{"goodput_ratio=0.95", "", "goodput_ratio", 0.95, true},
	}
	if len(slos) != len(want) {
		t.Fatalf("got %v", slos)
	}
	for i := range want {
		if slos[i] != want[i] {
			t.Errorf("slo %d = %+v, want %+v", i, slos[i], want[i])
		}
	}
	if g := GoodputFrom(slos); g != (GoodputSLO{TTFTms: 500, ITLms: 40, E2Ems: 2000}) {
		t.Errorf("goodput from slos: %+v", g)
	}
	if s, err := ParseSLOs("quiet-a:ttft_p99=300ms"); err != nil || s[0].Tenant != "quiet-a" || s[0].Metric != "ttft_p99" || s[0].Target != 300 {
		t.Errorf("tenant slo: %+v %v", s, err)
	}
	for _, bad := range []string{"ttft_p95=1s", "ttft_p99", "rps=fast", "e2e_p50=-1s", "error_rate=NaN", "rps=Inf", ":rps=1", "a:fairness=0.9"} {
		if _, err := ParseSLOs(bad); !errors.Is(err, ErrSLO) {
			t.Errorf("%q: %v, want ErrSLO", bad, err)
		}
	}
	if s, err := ParseSLOs(""); err != nil || len(s) != 0 {
		t.Errorf("empty spec: %v %v", s, err)
	}
}

func TestCheckSLOs(t *testing.T) {
	j := 0.95
	rep := &Report{
		Overall:  Metrics{Requests: 100, OK: 98, Good: 90, RPS: 10, TTFT: Percentiles{P99: 400, N: 98}, E2E: Percentiles{P90: 2500, N: 98}},
		Tenants:  map[string]Metrics{"quiet": {Requests: 10, OK: 10, TTFT: Percentiles{P99: 200, N: 10}}},
		Fairness: Fairness{Jain: &j},
	}
	cases := []struct {
		spec string
		met  bool
	}{
		{"ttft_p99=500ms", true},
		{"ttft_p99=300ms", false},
		{"e2e_p90=2s", false},
		{"error_rate=2%", true},
		{"error_rate=1%", false},
		{"rps=10", true},
		{"rps=11", false},
		{"fairness=0.9", true},
		{"goodput_ratio=0.95", false},
		{"itl_p99=1s", false}, // no ITL samples: missed, not vacuously met
		{"quiet:ttft_p99=300ms", true},
		{"quiet:ttft_p99=100ms", false},
		{"quiet:error_rate=0", true},
		{"absent:rps=0", false}, // a tenant the report lacks: missed
	}
	for _, tc := range cases {
		slos, err := ParseSLOs(tc.spec)
		if err != nil {
			t.Fatal(err)
		}
		if got := rep.CheckSLOs(slos); got != tc.met || rep.SLO[0].Met != tc.met {
			t.Errorf("%s: met %v, want %v (actual %v)", tc.spec, got, tc.met, rep.SLO[0].Actual)
		}
	}
}

func TestCompare(t *testing.T) {
	a := &Report{Overall: Metrics{Requests: 100, OK: 100, RPS: 10, TTFT: Percentiles{P50: 100}}, Tenants: map[string]Metrics{"x": {Requests: 100}}}
	b := &Report{Overall: Metrics{Requests: 100, OK: 90, RPS: 12, TTFT: Percentiles{P50: 150}}, Tenants: map[string]Metrics{"y": {Requests: 5}}}
	var out bytes.Buffer
	if err := Compare(&out, a, b, "A", "B"); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"ttft_p50_ms", "+50.0%", "+20.0%", "-10.0%"} {
		if !strings.Contains(s, want) {
			t.Errorf("compare output lacks %q:\n%s", want, s)
		}
	}
	// A tenant only one side has shows "-" for the other.
	for _, line := range strings.Split(s, "\n") {
		if f := strings.Fields(line); len(f) == 5 && f[0] == "y" && f[1] == "requests" && (f[2] != "-" || f[3] != "5") {
			t.Errorf("tenant y: %q", line)
		}
	}
}

// TestScenarioDiffs checks that comparing two reports names every way their runs
// differ, and nothing when they ran the same scenario.
func TestScenarioDiffs(t *testing.T) {
	const base = `
name: cmp
duration: 30s
requests: 500
arrival: {type: poisson, rate: 4}
workload:
  model: lt-balanced
  prompt_tokens: 64
  output_tokens: {dist: uniform, min: 16, max: 64}
  tiers: [{tier_mode: balanced, max_latency_ms: 300}, {tier_mode: fixed, tier: fast}]
tenants: [{name: a, api_key: lml_secret_a}, {name: b, weight: 2}]
`
	report := func(t *testing.T, y string, edit func(*Scenario)) *Report {
		t.Helper()
		s, err := ParseScenario([]byte(y))
		if err != nil {
			t.Fatal(err)
		}
		if edit != nil {
			edit(s)
		}
		// Through JSON, as compare reads report.json files.
		b, err := json.Marshal(&Report{Meta: Meta{Scenario: s.Name, Spec: s.Spec(), WindowS: 30, StoppedBy: StopDuration}})
		if err != nil {
			t.Fatal(err)
		}
		var r Report
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte("lml_secret_a")) {
			t.Error("the report holds a tenant's key")
		}
		return &r
	}
	cases := []struct {
		name string
		edit func(*Scenario)
		meta func(*Meta)
		want []string // substrings of the differences, in order; none for equal runs
	}{
		{name: "same", want: nil},
		{name: "only the description and the keys", edit: func(s *Scenario) { s.Description = "x"; s.Tenants[0].APIKey = "other" }},
		{name: "name", edit: func(s *Scenario) { s.Name = "cmp2" }, want: []string{`name: A "cmp", B "cmp2"`}},
		{name: "output tokens", edit: func(s *Scenario) { s.Workload.OutputTokens.Max = 128 }, want: []string{"workload.output_tokens.max: A 64, B 128"}},
		{name: "model", edit: func(s *Scenario) { s.Workload.Model = "lt-deep" }, want: []string{`workload.model: A "lt-balanced", B "lt-deep"`}},
		{name: "tier options", edit: func(s *Scenario) { s.Workload.Tiers[0].MaxLatencyMS = 2000 }, want: []string{"workload.tiers[0].max_latency_ms: A 300, B 2000"}},
		{name: "one tier option fewer", edit: func(s *Scenario) { s.Workload.Tiers = s.Workload.Tiers[:1] },
			want: []string{`workload.tiers[1]: A {max_cost_usd: 0, max_latency_ms: 0, tier: "fast", tier_mode: "fixed", weight: 1}, B (none)`}},
		{name: "a tenant's own tier option", edit: func(s *Scenario) {
			s.Tenants[1].Workload = &Workload{Tiers: []TierChoice{{Mode: "max"}}}
		}, want: []string{`tenants[1].workload: A null, B {`}},
		{name: "duration", edit: func(s *Scenario) { s.Duration = Dur(60 * time.Second) }, want: []string{`duration: A "30s", B "1m0s"`}},
		{name: "requests", edit: func(s *Scenario) { s.Requests = 100 }, want: []string{"requests: A 500, B 100"}},
		{name: "arrival rate", edit: func(s *Scenario) { s.Arrival.Rate = 8 }, want: []string{"arrival.rate: A 4, B 8"}},
		{name: "tenant weight", edit: func(s *Scenario) { s.Tenants[1].Weight = 1 }, want: []string{"tenants[1].weight: A 2, B 1"}},
		{name: "a tenant more", edit: func(s *Scenario) { s.Tenants = append(s.Tenants, Tenant{Name: "c", Weight: 1}) },
			want: []string{`tenants[2]: A (none), B {arrival: null, name: "c", weight: 1, workload: null}`}},
		{name: "goodput limits", meta: func(m *Meta) { m.Goodput = GoodputSLO{TTFTms: 500, E2Ems: 2000} },
			want: []string{"goodput limits: A none, B ttft 500ms, e2e 2000ms"}},
		{name: "a window cut short", meta: func(m *Meta) { m.WindowS, m.StoppedBy = 12, StopInterrupt },
			want: []string{"stopped by: A duration, B interrupt", "measured window: A 30.0s, B 12.0s"}},
		{name: "an old report", meta: func(m *Meta) { m.Spec = nil }, want: []string{"B has no record of its scenario"}},
		{name: "an old report of another name", meta: func(m *Meta) { m.Spec, m.Scenario = nil, "other" },
			want: []string{"B has no record of its scenario", `name: A "cmp", B "other"`}},
	}
	a := report(t, base, nil)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := report(t, base, tc.edit)
			if tc.meta != nil {
				tc.meta(&b.Meta)
			}
			got := ScenarioDiffs(a, b, "A", "B")
			if len(got) != len(tc.want) {
				t.Fatalf("differences %q, want %d like %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("difference %d = %q, want it to contain %q", i, got[i], w)
				}
			}
			var out bytes.Buffer
			if err := Compare(&out, a, b, "A", "B"); err != nil {
				t.Fatal(err)
			}
			if warned := strings.HasPrefix(out.String(), "WARNING: the two runs differ"); warned != (len(tc.want) > 0) {
				t.Errorf("compare output warned %v, want %v:\n%s", warned, len(tc.want) > 0, out.String())
			}
		})
	}
}
