package loadtest

import (
	"bytes"
	"errors"
	"strings"
	"testing"
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
