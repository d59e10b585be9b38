package tiers_test

import (
	"fmt"
	"time"

	"github.com/lmlite/lmlite/tiers"
)

// A request in mode max with a 1s latency budget: Max and Deep are predicted too
// slow, so the router steps down to Balanced.
func ExampleSelect() {
	set := &tiers.Set{}
	set.Tiers[tiers.Fast] = []tiers.Candidate{{Model: "tiny", Quality: 0.2}}
	set.Tiers[tiers.Balanced] = []tiers.Candidate{{Model: "small", Quality: 0.5}}
	set.Tiers[tiers.Deep] = []tiers.Candidate{{Model: "mid", Quality: 0.7}}
	set.Tiers[tiers.Max] = []tiers.Candidate{{Model: "big", Quality: 0.9}}

	p := tiers.NewPredictor()
	p.Observe("small", 20*time.Millisecond, 5*time.Millisecond)
	p.Observe("mid", 50*time.Millisecond, 10*time.Millisecond)
	p.Observe("big", 100*time.Millisecond, 20*time.Millisecond)
	now := time.Now()

	d, err := tiers.Select(set, tiers.Request{
		Mode: tiers.ModeMax, MaxLatency: time.Second, Remaining: -1,
		PromptTokens: 100, MaxTokens: 100, AllowTier: tiers.AllTiers,
	}, func(m string) tiers.Stats { return p.Stats(m, now) })
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(d.Tier, d.Candidate.Model, d.Predicted)
	fmt.Println(tiers.FormatTrace(d.Trace))
	// Output:
	// balanced small 520ms
	// max/big:latency max:latency deep/mid:latency deep:latency
}
