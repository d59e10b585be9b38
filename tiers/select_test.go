package tiers

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/lmlite/lmlite/money"
)

// TestSelectTraces runs the decision traces in testdata/select.txt (rewrite the expected
// outputs with `go test ./tiers -rewrite`). Commands:
//
//	set            one line per tier: "TIER: MODEL q=Q prompt=USD completion=USD ..."
//	stats model=M [ttft=D] [tpot=D] [queue=N] [slots=N] [maxqueue=N] [failing]
//	select mode=M [tier=T] prompt=N max_tokens=N [max_latency=D] [max_cost=USD]
//	       [remaining=USD] [forbid=T,T] [forbid_model=M,M] [exclude=T,T]
//	       [unfit=M,M] [need=M:PROMPT:OUT,...]   (Request.Need: per-model worst cases)
//	       [hidden=M,M]   (Request.Hidden: candidates that do not exist for the tenant)
func TestSelectTraces(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var set Set
		stats := map[string]Stats{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "set":
				set = Set{}
				for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
					name, rest, ok := strings.Cut(line, ":")
					if !ok {
						d.Fatalf(t, "bad set line %q", line)
					}
					tier, err := ParseTier(strings.TrimSpace(name))
					if err != nil {
						d.Fatalf(t, "%v", err)
					}
					f := strings.Fields(rest)
					if len(f) == 0 {
						continue
					}
					c := Candidate{Model: f[0]}
					for _, kv := range f[1:] {
						k, v, _ := strings.Cut(kv, "=")
						x, err := strconv.ParseFloat(v, 64)
						if err != nil {
							d.Fatalf(t, "bad %q", kv)
						}
						switch k {
						case "q":
							c.Quality = x
						case "prompt":
							c.Price.PromptPer1K = money.USD(x)
						case "completion":
							c.Price.CompletionPer1K = money.USD(x)
						}
					}
					set.Tiers[tier] = append(set.Tiers[tier], c)
				}
				return ""
			case "stats":
				var model string
				d.ScanArgs(t, "model", &model)
				s := Stats{}
				s.TTFT = durArg(t, d, "ttft")
				s.TPOT = durArg(t, d, "tpot")
				d.MaybeScanArgs(t, "queue", &s.Queue)
				d.MaybeScanArgs(t, "slots", &s.Slots)
				d.MaybeScanArgs(t, "maxqueue", &s.MaxQueue)
				s.Failing = d.HasArg("failing")
				stats[model] = s
				return fmt.Sprintf("%s predicts %s for 100 tokens", model, PredictLatency(s, 100))
			case "select":
				req := Request{AllowTier: AllTiers, Remaining: -1}
				var mode string
				d.ScanArgs(t, "mode", &mode)
				m, err := ParseMode(mode)
				if err != nil {
					return err.Error()
				}
				req.Mode = m
				if d.HasArg("tier") {
					var tier string
					d.ScanArgs(t, "tier", &tier)
					if req.Tier, err = ParseTier(tier); err != nil {
						return err.Error()
					}
				}
				d.ScanArgs(t, "prompt", &req.PromptTokens)
				d.ScanArgs(t, "max_tokens", &req.MaxTokens)
				req.MaxLatency = durArg(t, d, "max_latency")
				if d.HasArg("max_cost") {
					req.MaxCost = usdArg(t, d, "max_cost")
				}
				if d.HasArg("remaining") {
					req.Remaining = usdArg(t, d, "remaining")
				}
				for _, n := range listArg(t, d, "forbid") {
					tier, err := ParseTier(n)
					if err != nil {
						d.Fatalf(t, "%v", err)
					}
					req.AllowTier[tier] = false
				}
				for _, n := range listArg(t, d, "exclude") {
					tier, err := ParseTier(n)
					if err != nil {
						d.Fatalf(t, "%v", err)
					}
					req.Exclude |= 1 << uint(tier)
				}
				if fm := listArg(t, d, "forbid_model"); len(fm) > 0 {
					req.AllowModel = func(m string) bool {
						for _, x := range fm {
							if x == m {
								return false
							}
						}
						return true
					}
				}
				if hm := listArg(t, d, "hidden"); len(hm) > 0 {
					req.Hidden = func(m string) bool { return slices.Contains(hm, m) }
				}
				unfit, needs := listArg(t, d, "unfit"), map[string]Need{}
				for _, n := range listArg(t, d, "need") {
					var m string
					var nd Need
					if _, err := fmt.Sscanf(strings.ReplaceAll(n, ":", " "), "%s %d %d", &m, &nd.PromptTokens, &nd.MaxTokens); err != nil {
						d.Fatalf(t, "need %q: %v", n, err)
					}
					needs[m] = nd
				}
				if len(unfit) > 0 || len(needs) > 0 {
					asked := map[string]int{}
					defer func() {
						for m, n := range asked {
							if n > 1 {
								t.Errorf("Need(%s) asked %d times", m, n)
							}
						}
					}()
					req.Need = func(m string) Need {
						asked[m]++
						for _, x := range unfit {
							if x == m {
								return Need{Unfit: true}
							}
						}
						if nd, ok := needs[m]; ok {
							return nd
						}
						return Need{PromptTokens: req.PromptTokens, MaxTokens: req.MaxTokens}
					}
				}
				dec, err := Select(&set, req, func(m string) Stats { return stats[m] })
				if err != nil {
					var nf *NoFitError
					if e, ok := err.(*NoFitError); ok {
						nf = e
						return fmt.Sprintf("refused: %v\ntrace: %s", err, FormatTrace(nf.Trace))
					}
					return "error: " + err.Error()
				}
				tr := FormatTrace(dec.Trace)
				if tr == "" {
					tr = "(none)"
				}
				return fmt.Sprintf("%s/%s predicted=%s cost=%s\ntrace: %s",
					dec.Tier, dec.Candidate.Model, dec.Predicted, dec.Cost, tr)
			}
			d.Fatalf(t, "unknown command %q", d.Cmd)
			return ""
		})
	})
}

func durArg(t *testing.T, d *datadriven.TestData, key string) time.Duration {
	if !d.HasArg(key) {
		return 0
	}
	var s string
	d.ScanArgs(t, key, &s)
	v, err := time.ParseDuration(s)
	if err != nil {
		d.Fatalf(t, "%s: %v", key, err)
	}
	return v
}

func usdArg(t *testing.T, d *datadriven.TestData, key string) money.Money {
	var s string
	d.ScanArgs(t, key, &s)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		d.Fatalf(t, "%s: %v", key, err)
	}
	return money.USD(v)
}

func listArg(t *testing.T, d *datadriven.TestData, key string) []string {
	if !d.HasArg(key) {
		return nil
	}
	var s string
	d.ScanArgs(t, key, &s)
	return strings.Split(s, ",")
}

func TestParse(t *testing.T) {
	for i, n := range []string{"fast", "balanced", "deep", "max"} {
		tr, err := ParseTier(n)
		if err != nil || int(tr) != i || tr.String() != n {
			t.Errorf("ParseTier(%q) = %v, %v", n, tr, err)
		}
	}
	for _, bad := range []string{"", "Fast", "huge"} {
		if _, err := ParseTier(bad); err == nil {
			t.Errorf("ParseTier(%q) accepted", bad)
		}
	}
	if m, err := ParseMode("fixed"); err != nil || m != ModeFixed {
		t.Errorf("ParseMode(fixed) = %v, %v", m, err)
	}
	if _, err := ParseMode("auto"); err == nil {
		t.Error("ParseMode(auto) accepted")
	}
}

func TestPriceCost(t *testing.T) {
	p := money.Price{PromptPer1K: money.USD(0.0005), CompletionPer1K: money.USD(0.0015)}
	if got, want := p.Cost(1000, 1000), money.USD(0.002); got != want {
		t.Errorf("Cost = %v, want %v", got, want)
	}
	if got := p.Cost(1, 0); got != 500 { // 0.5 micro-dollars = 500 nano
		t.Errorf("Cost(1,0) = %d", got)
	}
	if got := (money.Price{PromptPer1K: 1}).Cost(1, 0); got != 1 { // rounds up
		t.Errorf("rounding: %d", got)
	}
}

func TestPredictor(t *testing.T) {
	p := NewPredictor()
	now := time.Unix(1000, 0)
	p.SetCapacity("m", 2, 4)
	p.Observe("m", 100*time.Millisecond, 10*time.Millisecond)
	p.Observe("m", 200*time.Millisecond, 20*time.Millisecond)
	s := p.Stats("m", now)
	if s.TTFT != 120*time.Millisecond || s.TPOT != 12*time.Millisecond {
		t.Errorf("moving averages: %+v", s)
	}
	p.Begin("m")
	p.Begin("m")
	p.Begin("m")
	p.End("m")
	if s := p.Stats("m", now); s.Queue != 2 || s.Slots != 2 || s.MaxQueue != 4 {
		t.Errorf("queue: %+v", s)
	}
	p.Fail("m", now)
	if !p.Stats("m", now.Add(time.Second)).Failing {
		t.Error("not failing after Fail")
	}
	if p.Stats("m", now.Add(11*time.Second)).Failing {
		t.Error("still failing after the cooldown")
	}
}

// TestRefusesAgreesWithSelect checks Refuses against Select on random sets and
// requests (modes, fixed tiers, forbidden and excluded tiers, hidden and forbidden
// models, a random set of failing models): when Refuses says Select refuses, Select
// refuses with the same error whatever the other models' statistics and the
// request's needs; when it says not, Select on healthy statistics with no limits
// serves the request. The gateway ends its fallback chain on Refuses (chainEnds), so
// a walk that drifted from Select's (its order or a filter) fails here.
func TestRefusesAgreesWithSelect(t *testing.T) {
	rng := rand.New(rand.NewPCG(36, 45))
	models := []string{"a", "b", "c", "d", "e"}
	subset := func() map[string]bool {
		s := map[string]bool{}
		for _, m := range models {
			if rng.IntN(3) == 0 {
				s[m] = true
			}
		}
		return s
	}
	refused, served := 0, 0
	for iter := 0; iter < 20000; iter++ {
		var set Set
		for tr := range set.Tiers {
			for k := rng.IntN(4); k > 0; k-- {
				set.Tiers[tr] = append(set.Tiers[tr], Candidate{Model: models[rng.IntN(len(models))], Quality: float64(rng.IntN(3))})
			}
		}
		req := Request{Mode: Mode(rng.IntN(4)), Tier: Tier(rng.IntN(NumTiers)), Remaining: -1, Exclude: uint8(rng.IntN(16))}
		for tr := range req.AllowTier {
			req.AllowTier[tr] = rng.IntN(4) != 0
		}
		if hidden := subset(); rng.IntN(2) == 0 {
			req.Hidden = func(m string) bool { return hidden[m] }
		}
		if forbidden := subset(); rng.IntN(2) == 0 {
			req.AllowModel = func(m string) bool { return !forbidden[m] }
		}
		failing := subset()
		if !Refuses(&set, &req, func(m string) bool { return failing[m] }) {
			served++
			healthy := func(m string) Stats { return Stats{Failing: failing[m]} }
			if d, err := Select(&set, req, healthy); err != nil {
				t.Fatalf("iter %d: Refuses says Select serves %+v on %+v, but it refused: %v [%s]", iter, req, set, err, FormatTrace(err.(*NoFitError).Trace))
			} else if failing[d.Candidate.Model] {
				t.Fatalf("iter %d: Select chose failing %s", iter, d.Candidate.Model)
			}
			continue
		}
		refused++
		_, want := Select(&set, req, func(m string) Stats { return Stats{Failing: failing[m]} })
		if want == nil {
			t.Fatalf("iter %d: Refuses says Select refuses %+v on %+v, but it served", iter, req, set)
		}
		for k := 0; k < 4; k++ {
			r := req
			r.MaxLatency = time.Duration(rng.IntN(3)) * time.Millisecond
			r.MaxCost = money.USD(float64(rng.IntN(3)) / 1000)
			r.Need = func(string) Need { return Need{PromptTokens: 10, MaxTokens: 10, Unfit: rng.IntN(3) == 0} }
			_, got := Select(&set, r, func(m string) Stats {
				return Stats{Failing: failing[m] || rng.IntN(2) == 0, Queue: rng.IntN(3), MaxQueue: rng.IntN(3), TTFT: time.Duration(rng.IntN(3)) * time.Millisecond}
			})
			if got == nil || got.Error() != want.Error() || FormatTrace(got.(*NoFitError).Trace) != FormatTrace(want.(*NoFitError).Trace) {
				t.Fatalf("iter %d: Refuses says the refusal is fixed, but Select answered %v, want %v", iter, got, want)
			}
		}
	}
	if refused < 1000 || served < 1000 {
		t.Fatalf("the random cases are lopsided: %d refused, %d served", refused, served)
	}
}

// TestRefusesAllocs checks that Refuses allocates nothing (the gateway asks it on
// every request by tiers).
func TestRefusesAllocs(t *testing.T) {
	set := &Set{}
	set.Tiers[Fast] = []Candidate{{Model: "m"}}
	set.Tiers[Balanced] = []Candidate{{Model: "m"}}
	req := &Request{Mode: ModeBalanced, AllowTier: AllTiers, AllowModel: func(string) bool { return true }}
	chosen := "m"
	if n := testing.AllocsPerRun(100, func() {
		if !Refuses(set, req, func(m string) bool { return m == chosen }) {
			t.Fatal("Refuses: want true")
		}
	}); n != 0 {
		t.Fatalf("Refuses: %v allocations, want 0", n)
	}
}
