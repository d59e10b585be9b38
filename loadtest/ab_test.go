package loadtest

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestABFindsAKnownGap: two fixtures whose first token leaves 4 ms and 10 ms after a
// request arrives are told apart request by request: the median difference is about
// 6 ms and its interval excludes 0. Both saw the same requests in the same order (one
// per round, every round's prompt new), in both orders within a round; a target that
// refuses every request counts errors and has no difference.
func TestABFindsAKnownGap(t *testing.T) {
	fa, fb := &fixture{TTFT: 4 * time.Millisecond}, &fixture{TTFT: 10 * time.Millisecond}
	fc := &fixture{Status: map[string]fixtureErr{"kc": {Status: 503, Code: "engine_restarting"}}}
	a, b, c := fa.start(t), fb.start(t), fc.start(t)
	s := mustScenario(t, `
duration: 1s
arrival: {type: closed, users: 1}
workload: {api: completions, prompt_tokens: 8, output_tokens: 1}
tenants: [{name: x}]
`)
	rounds := 0
	rep, err := RunAB(context.Background(), ABConfig{Scenario: s, Rounds: 30, Warmup: 2, Seed: 3,
		Targets: []ABTarget{{URL: a.URL, APIKey: "ka"}, {URL: b.URL, APIKey: "kb"}, {URL: c.URL, APIKey: "kc"}},
		OnRound: func(int, []Result) { rounds++ }})
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	if err := rep.WriteSummary(&sb); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + sb.String())
	if rounds != 30 || rep.Rounds != 30 {
		t.Errorf("%d rounds seen, report %d, want 30", rounds, rep.Rounds)
	}
	ra, rb, rc := rep.Targets[0], rep.Targets[1], rep.Targets[2]
	if ra.TTFTDiff != nil || ra.Errors != 0 || rb.Errors != 0 {
		t.Errorf("reference %+v, b %+v", ra, rb)
	}
	d := rb.TTFTDiff
	if d == nil || d.Pairs != 30 || d.Median < 4 || d.Median > 8 || d.CILow <= 0 || d.CILow > d.Median || d.CIHigh < d.Median {
		t.Errorf("b − a TTFT: %+v, want a median of about 6 ms with an interval above 0", d)
	}
	if rc.Errors != 30 || rc.TTFTDiff != nil || rc.E2EDiff != nil {
		t.Errorf("refusing target: %+v", rc)
	}
	ta, tb := fa.requests(), fb.requests()
	if len(ta) != 32 || len(tb) != 32 {
		t.Fatalf("requests seen: %d and %d, want 32 each (2 warm-up rounds)", len(ta), len(tb))
	}
	aFirst := 0
	for i := range ta {
		if !reflect.DeepEqual(ta[i].Body, tb[i].Body) {
			t.Fatalf("round %d: the targets saw different requests: %v and %v", i, ta[i].Body, tb[i].Body)
		}
		if i > 0 && reflect.DeepEqual(ta[i].Body["prompt"], ta[i-1].Body["prompt"]) {
			t.Errorf("rounds %d and %d sent the same prompt (a prefix cache would serve it)", i-1, i)
		}
		if ta[i].Arrived.Before(tb[i].Arrived) {
			aFirst++
		}
	}
	if aFirst == 0 || aFirst == len(ta) {
		t.Errorf("a went first in %d of %d rounds: the order is not mixed", aFirst, len(ta))
	}
}

// TestABRefusesWhatCannotBeCompared: one target, remote targets, and multi-turn
// chats (whose requests depend on each server's answers) are refused.
func TestABRefusesWhatCannotBeCompared(t *testing.T) {
	s := mustScenario(t, "duration: 1s\narrival: {type: closed, users: 1}\ntenants: [{name: x}]\n")
	mt := mustScenario(t, "duration: 1s\narrival: {type: closed, users: 1}\nworkload: {multi_turn: {conversations: 1, turns: 3}}\ntenants: [{name: x}]\n")
	loop := ABTarget{URL: "http://127.0.0.1:1"}
	for _, c := range []struct {
		name string
		cfg  ABConfig
		kind error
		want string
	}{
		{"one target", ABConfig{Scenario: s, Rounds: 1, Targets: []ABTarget{loop}}, ErrAB, "at least two"},
		{"remote", ABConfig{Scenario: s, Rounds: 1, Targets: []ABTarget{loop, {URL: "http://example.com"}}}, ErrRemote, "loopback"},
		{"multi-turn", ABConfig{Scenario: mt, Rounds: 1, Targets: []ABTarget{loop, loop}}, ErrAB, "multi_turn"},
		{"no rounds", ABConfig{Scenario: s, Targets: []ABTarget{loop, loop}}, ErrAB, "rounds"},
	} {
		if _, err := RunAB(context.Background(), c.cfg); !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %v about %q", c.name, err, c.kind, c.want)
		}
	}
}

// TestPairedDiffInterval: the median of known differences, and an interval that
// holds it, is a point for constant differences and is reproduced by its seed.
func TestPairedDiffInterval(t *testing.T) {
	if d := pairedDiff([]float64{2, 2, 2, 2}, newRand(1, 1)); d.Median != 2 || d.CILow != 2 || d.CIHigh != 2 || d.Pairs != 4 {
		t.Errorf("constant: %+v", d)
	}
	x := []float64{-3, 1, 0.5, 2, 7, -1, 0, 4, 1.5}
	d1 := pairedDiff(x, newRand(5, 5))
	d2 := pairedDiff(x, newRand(5, 5))
	if d1.Median != 1 || d1.CILow > 1 || d1.CIHigh < 1 || d1.CILow < -3 || d1.CIHigh > 7 || *d1 != *d2 {
		t.Errorf("%+v, %+v", d1, d2)
	}
	if pairedDiff(nil, rand.New(rand.NewPCG(1, 1))) != nil {
		t.Error("no pairs should give no difference")
	}
}
