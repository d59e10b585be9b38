package loadtest

import (
	"strings"
	"testing"
	"time"
)

// FuzzReadSSE: any byte stream from a server is read without panicking, the
// chunk times never go back, and the counts agree.
func FuzzReadSSE(f *testing.F) {
	f.Add("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n")
	f.Add("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":9}}\n\ndata: [DONE]\n")
	f.Add("data: {\"error\":{\"message\":\"x\",\"code\":42}}\n")
	f.Add(": ping\r\nevent: e\r\ndata:{\"choices\":[{\"text\":\"b\"}]}\r\n")
	f.Add("data: " + strings.Repeat("[", 5000))
	f.Fuzz(func(t *testing.T, stream string) {
		var res Result
		_ = readSSE(strings.NewReader(stream), time.Now(), &res)
		for i := 1; i < len(res.Tokens); i++ {
			if res.Tokens[i] < res.Tokens[i-1] {
				t.Fatal("chunk times go back")
			}
		}
		if len(res.Tokens) > 0 && res.TTFT != res.Tokens[0] {
			t.Fatal("TTFT is not the first chunk's time")
		}
		if !res.UsageReported && res.CompletionTokens != len(res.Tokens) {
			t.Fatalf("%d tokens counted for %d chunks", res.CompletionTokens, len(res.Tokens))
		}
	})
}

// FuzzParseScenario: any YAML is accepted or refused without panicking, and an
// accepted scenario is bounded and stays valid when normalized again.
func FuzzParseScenario(f *testing.F) {
	f.Add("requests: 5\narrival: {type: closed, users: 2}\ntenants: [{name: a}]\n")
	f.Add("duration: 1s\narrival: {type: bursts, burst_size: 3, burst_every: 100ms}\nworkload: {prompt_tokens: {dist: lognormal, mean: 9, stddev: 3}, multi_turn: {turns: 2}, shared_prefix: {fraction: 0.5, tokens: 4}}\ntenants: [{name: a, weight: 2}, {name: b, arrival: {type: poisson, rate: 3}}]\n")
	f.Add("duration: 1s\nworkload: {tiers: [{tier_mode: fixed, tier: fast}], extra: {ignore_eos: true}}\narrival: {type: constant, rate: 1}\ntenants: [{name: a}]\n")
	f.Add("tenants: &a [*a]")
	f.Fuzz(func(t *testing.T, y string) {
		s, err := ParseScenario([]byte(y))
		if err != nil {
			return
		}
		if s.Duration <= 0 || s.Duration.D() > MaxDuration || s.Requests <= 0 || s.Requests > MaxRequests {
			t.Fatalf("accepted an unbounded scenario: %v %d", s.Duration.D(), s.Requests)
		}
		if err := s.Normalize(); err != nil {
			t.Fatalf("normalizing again: %v", err)
		}
		// Requests can be built from it.
		for i, tn := range s.Tenants {
			w := &s.Workload
			if tn.Workload != nil {
				w = tn.Workload
			}
			if w.PromptTokens.Kind == DistFixed && w.PromptTokens.Value > 4096 || w.SharedPrefix != nil && w.SharedPrefix.Tokens*w.SharedPrefix.Count > 1<<16 {
				continue // valid but slow to build in a fuzz loop
			}
			if r := newGenerator(i, w, uint64(s.Seed)).make(); len(r.body) == 0 {
				t.Fatal("empty body")
			}
		}
	})
}

// FuzzParseSLOs: any --slo text is accepted or refused without panicking.
func FuzzParseSLOs(f *testing.F) {
	f.Add("ttft_p99=500ms,e2e_p90=2s,error_rate=1%,rps=5")
	f.Add("fairness=0.9,,goodput_rps=1e3")
	f.Fuzz(func(t *testing.T, spec string) {
		slos, err := ParseSLOs(spec)
		if err != nil {
			return
		}
		for _, s := range slos {
			if s.Target < 0 || s.Target != s.Target {
				t.Fatalf("bad target %v", s.Target)
			}
		}
	})
}
