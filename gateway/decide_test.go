package gateway

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/lmlite/lmlite/money"
	"github.com/lmlite/lmlite/tiers"
)

// TestDecideTraces runs the routing decisions in testdata/decide.txt: a request and a
// snapshot in, the fallback chain out (rewrite the expected outputs with
// `go test ./gateway -run TestDecideTraces -rewrite`). Commands:
//
//	models   one line per model: "ID prompt=USD completion=USD [q=Q] [tiers=T,T] [nontools]"
//	stats    model=M [queue=N] [maxqueue=N] [slots=N] [ttft=D] [tpot=D] [failing]
//	decide   (model=ID | mode=M [tier=T]) [prompt=N] [out=N] [n=N] [max_tokens=N]
//	         [remaining=USD] [max_cost=USD] [max_latency=D] [tools] [unfit=M,M]
//	         [forbid=T,T] [forbid_model=M,M]
//
// A model's plan is the decide command's prompt and out (unfit: over its limit, a
// 400 context_length_exceeded). The output is the chain, one entry a line, then its
// end; or the decision's error.
func TestDecideTraces(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	var set tiers.Set
	models := map[string]*model{}
	nontools := map[string]bool{}
	stats := map[string]tiers.Stats{}
	datadriven.RunTest(t, "testdata/decide.txt", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "models":
			set, models, nontools, stats = tiers.Set{}, map[string]*model{}, map[string]bool{}, map[string]tiers.Stats{}
			for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
				f := strings.Fields(line)
				m := &model{id: f[0]}
				q := 0.5
				var in []string
				for _, kv := range f[1:] {
					k, v, _ := strings.Cut(kv, "=")
					switch k {
					case "prompt":
						m.price.PromptPer1K = usd(t, v)
					case "completion":
						m.price.CompletionPer1K = usd(t, v)
					case "q":
						q, _ = strconv.ParseFloat(v, 64)
					case "tiers":
						in = strings.Split(v, ",")
					case "nontools":
						nontools[m.id] = true
					default:
						d.Fatalf(t, "bad model field %q", kv)
					}
				}
				for _, name := range in {
					tr, err := tiers.ParseTier(name)
					if err != nil {
						d.Fatalf(t, "%v", err)
					}
					set.Tiers[tr] = append(set.Tiers[tr], tiers.Candidate{Model: m.id, Quality: q, Price: m.price})
					m.in[tr] = true
					if m.tier == "" {
						m.tier = name
					}
				}
				models[m.id] = m
			}
			return ""
		case "stats":
			var id string
			d.ScanArgs(t, "model", &id)
			var st tiers.Stats
			d.MaybeScanArgs(t, "queue", &st.Queue)
			d.MaybeScanArgs(t, "maxqueue", &st.MaxQueue)
			d.MaybeScanArgs(t, "slots", &st.Slots)
			st.TTFT, st.TPOT = durOf(t, d, "ttft"), durOf(t, d, "tpot")
			st.Failing = d.HasArg("failing")
			stats[id] = st
			return ""
		case "decide":
			a := ask{n: 1, maxField: "max_tokens", allowTier: tiers.AllTiers}
			var f asks
			if d.HasArg("model") {
				var id string
				d.ScanArgs(t, "model", &id)
				if a.rt.named = models[id]; a.rt.named == nil {
					d.Fatalf(t, "unknown model %q", id)
				}
			} else {
				var mode string
				d.ScanArgs(t, "mode", &mode)
				var err error
				if a.rt.mode, err = tiers.ParseMode(mode); err != nil {
					d.Fatalf(t, "%v", err)
				}
				if d.HasArg("tier") {
					var tier string
					d.ScanArgs(t, "tier", &tier)
					if a.rt.tier, err = tiers.ParseTier(tier); err != nil {
						d.Fatalf(t, "%v", err)
					}
				}
			}
			prompt, out := 10, 100
			d.MaybeScanArgs(t, "prompt", &prompt)
			d.MaybeScanArgs(t, "out", &out)
			d.MaybeScanArgs(t, "n", &a.n)
			d.MaybeScanArgs(t, "max_tokens", &a.maxTokens)
			a.tools = d.HasArg("tools")
			if d.HasArg("max_cost") {
				a.rt.maxCost = usdArgOf(t, d, "max_cost")
			}
			a.rt.maxLatency = durOf(t, d, "max_latency")
			for _, name := range listOf(t, d, "forbid") {
				tr, err := tiers.ParseTier(name)
				if err != nil {
					d.Fatalf(t, "%v", err)
				}
				a.allowTier[tr] = false
			}
			if fm := listOf(t, d, "forbid_model"); len(fm) > 0 {
				f.allowModel = func(id string) bool { return !slices.Contains(fm, id) }
			}
			unfit := listOf(t, d, "unfit")
			planned := map[string]int{}
			f.plan = func(m *model) plan {
				planned[m.id]++
				p := plan{nPrompt: prompt, out: out}
				if slices.Contains(unfit, m.id) {
					p.err = contextLengthExceeded("messages", "the prompt is "+strconv.Itoa(prompt)+" tokens, over the model '"+m.id+"''s limit")
				}
				return p
			}
			sn := snapshot{set: &set, models: models, remaining: -1,
				stats: func(id string, at time.Time) tiers.Stats {
					if !at.Equal(now) {
						t.Errorf("stats asked at %v, not the decision's now", at)
					}
					return stats[id]
				},
				native: func(m *model) bool { return !nontools[m.id] },
			}
			if d.HasArg("remaining") {
				sn.remaining = usdArgOf(t, d, "remaining")
			}
			ch, aerr := decide(&a, &f, &sn, now, nil)
			if aerr != nil {
				return "error: " + formatAPIError(aerr) + "\n"
			}
			var b strings.Builder
			for k, e := range ch.entries {
				tier := e.tierName
				if tier == "" {
					tier = "-"
				}
				fmt.Fprintf(&b, "%d. %s/%s prompt=%d out=%d cost=%s reserve=%s\n", k+1, tier, e.m.id, e.nPrompt, e.out, e.cost, e.reserve)
			}
			if end := ch.end(&set, f.allowModel, f.hidden); end != nil {
				b.WriteString("end: " + formatAPIError(end) + "\n")
			} else {
				b.WriteString("end: the last refusal\n")
			}
			return b.String()
		}
		d.Fatalf(t, "unknown command %q", d.Cmd)
		return ""
	})
}

func formatAPIError(e *apiError) string {
	s := strconv.Itoa(e.status) + " " + e.code
	if e.param != "" {
		s += " param=" + e.param
	}
	return s + ": " + e.message
}

func usd(t *testing.T, v string) money.Money {
	x, err := strconv.ParseFloat(v, 64)
	if err != nil {
		t.Fatalf("bad USD %q", v)
	}
	return money.USD(x)
}

func usdArgOf(t *testing.T, d *datadriven.TestData, key string) money.Money {
	var v string
	d.ScanArgs(t, key, &v)
	return usd(t, v)
}

func durOf(t *testing.T, d *datadriven.TestData, key string) time.Duration {
	if !d.HasArg(key) {
		return 0
	}
	var v string
	d.ScanArgs(t, key, &v)
	x, err := time.ParseDuration(v)
	if err != nil {
		d.Fatalf(t, "%s: %v", key, err)
	}
	return x
}

func listOf(t *testing.T, d *datadriven.TestData, key string) []string {
	if !d.HasArg(key) {
		return nil
	}
	var v string
	d.ScanArgs(t, key, &v)
	return strings.Split(v, ",")
}
