package gateway

import (
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"github.com/lmlite/lmlite/gateway/core"
	"github.com/lmlite/lmlite/policies"
	"github.com/lmlite/lmlite/tenancy"
	"github.com/lmlite/lmlite/tiers"
)

// Allocation budgets of the per-token and per-request hot paths.
func TestAllocs(t *testing.T) {
	in := input{kind: kindChat, usage: true}
	out := chatCodec.newOutput(&outMeta{Meta: core.Meta{ReqID: "req_1", Model: "tiny", Created: 1}, in: &in})
	ev := &outEvent{Kind: outText, Text: "hello \"world\"\n"}
	buf := make([]byte, 0, 1024)
	if n := testing.AllocsPerRun(100, func() {
		buf = out.AppendEvent(buf[:0], ev)
	}); n != 0 {
		t.Errorf("chat output's appendEvent: %v allocs per token, want 0", n)
	}
	chunk := []byte(`{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}],"usage":null}`)
	var ci chunkInfo
	if n := testing.AllocsPerRun(100, func() {
		upstreamChunk(chunk, &ci)
	}); n != 0 && !raceEnabled { // its decoder is pooled: the race detector drops pooled items at random
		t.Errorf("upstreamChunk: %v allocs per chunk, want 0", n)
	}
	store, err := tenancy.Open(filepath.Join(t.TempDir(), "lmlite.db"), tenancy.Options{Sync: tenancy.SyncProcess})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	key, _, _ := store.CreateKey("t", time.Now())
	if n := testing.AllocsPerRun(100, func() {
		if _, _, err := store.Authenticate(key); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Authenticate: %v allocs, want 0", n)
	}
}

// TestDecideAutoChainAllocs: a request by tiers whose chain ends before the last tier
// (gwbench's plan: one model in two tiers, so the tier after it has only a model the
// chain already holds) decides without allocating. Why no tier is left is answered,
// its message formatted, only when every entry refused (chain.end): it was formatted
// on every such request, 4.7% of the gateway's CPU at 16 connections; and the
// tiers.Select that finds it (its trace and error, 2 allocations) is made then too
// when no live statistics can change it (chainEnds; issue 36).
func TestDecideAutoChainAllocs(t *testing.T) {
	m := &model{id: "m", tier: "fast"}
	var set tiers.Set
	set.Tiers[tiers.Fast] = []tiers.Candidate{{Model: "m", Quality: 1}}
	set.Tiers[tiers.Balanced] = []tiers.Candidate{{Model: "m", Quality: 2}}
	a := ask{rt: route{mode: tiers.ModeBalanced}, n: 1, maxField: "max_tokens", allowTier: tiers.AllTiers}
	f := asks{plan: func(*model) plan { return plan{nPrompt: 10, out: 1} }}
	sn := snapshot{set: &set, models: map[string]*model{"m": m}, remaining: -1,
		stats:  func(string, time.Time) tiers.Stats { return tiers.Stats{} },
		native: func(*model) bool { return true }}
	now := time.Unix(1_800_000_000, 0)
	var dst [tiers.NumTiers]choice
	var ch chain
	n := testing.AllocsPerRun(100, func() {
		var aerr *apiError
		if ch, aerr = decide(&a, &f, &sn, now, dst[:0]); aerr != nil {
			t.Fatal(aerr.message)
		}
	})
	if len(ch.entries) != 1 || ch.entries[0].m != m || ch.end(&set, nil, nil) == nil {
		t.Fatalf("chain %+v: want m alone, then why no tier is left", ch)
	}
	if n != 0 {
		t.Errorf("decide: %v allocs, want 0", n)
	}
}

// TestJobDecideAllocs: the job's decision (job.decide: its policy's and plans' method
// values, the snapshot, decide) on gwbench's plan, one model in two tiers, does not
// allocate (TestDecideAutoChainAllocs). The job's method values were 3
// more on the heap while ask, whose pointers the chain copies out, held them (issue 36).
func TestJobDecideAllocs(t *testing.T) {
	m := &model{id: "m", tier: "fast"}
	var set tiers.Set
	set.Tiers[tiers.Fast] = []tiers.Candidate{{Model: "m", Quality: 1}}
	set.Tiers[tiers.Balanced] = []tiers.Candidate{{Model: "m", Quality: 2}}
	s := &Server{set: &set, models: map[string]*model{"m": m}, pred: tiers.NewPredictor(), ten: tenancy.New(nil)}
	pol, err := policies.Resolve("t", "default", policies.Plan{}, policies.Override{}, func(string) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	s.quotas = map[*policies.Policy]*tenancy.Quota{&pol: quotaOf(&pol)} // as New makes them
	j := &job{s: s, pol: &pol, rt: route{mode: tiers.ModeBalanced}}
	j.in.feat.N, j.in.maxField = 1, "max_tokens"
	j.plans = append(j.planBuf[:0], planned{m: m, p: plan{nPrompt: 10, out: 1}})
	now := time.Unix(1_800_000_000, 0)
	var ch chain
	n := testing.AllocsPerRun(100, func() {
		var aerr *apiError
		if ch, aerr = j.decide(now); aerr != nil {
			t.Fatal(aerr.message)
		}
	})
	if len(ch.entries) != 1 || ch.entries[0].m != m || ch.end(&set, nil, nil) == nil {
		t.Fatalf("chain %+v: want m alone, then why no tier is left", ch)
	}
	if n != 0 {
		t.Errorf("job.decide: %v allocs, want 0", n)
	}
}

// TestJobSizeClass: a request's job fits the 1,536-byte size class. Its chain's room
// for every tier's entry (4 choices of 136 bytes) put it in the 2,048-byte class, 768
// bytes more per request than d98c1fb's (issue 36); a chain of more than one entry
// takes its own array (TestDecideLongChainAllocs).
func TestJobSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(job{}); n > 1536 {
		t.Errorf("job is %d bytes: over the 1,536-byte size class", n)
	}
}

// TestDecideLongChainAllocs: a chain longer than the job's room for one entry takes one
// array for all its entries, not one per doubling.
func TestDecideLongChainAllocs(t *testing.T) {
	var set tiers.Set
	models := map[string]*model{}
	for i, id := range []string{"f", "b", "q", "x"} {
		models[id] = &model{id: id}
		set.Tiers[i] = []tiers.Candidate{{Model: id, Quality: 1}}
	}
	a := ask{rt: route{mode: tiers.ModeMax}, n: 1, maxField: "max_tokens", allowTier: tiers.AllTiers}
	f := asks{plan: func(*model) plan { return plan{nPrompt: 10, out: 1} }}
	sn := snapshot{set: &set, models: models, remaining: -1,
		stats:  func(string, time.Time) tiers.Stats { return tiers.Stats{} },
		native: func(*model) bool { return true }}
	now := time.Unix(1_800_000_000, 0)
	allocs := func(dst []choice) float64 {
		return testing.AllocsPerRun(100, func() {
			ch, aerr := decide(&a, &f, &sn, now, dst)
			if aerr != nil {
				t.Fatal(aerr.message)
			}
			if len(ch.entries) != tiers.NumTiers {
				t.Fatalf("chain of %d entries, want %d", len(ch.entries), tiers.NumTiers)
			}
		})
	}
	var one [1]choice
	var all [tiers.NumTiers]choice
	if n, base := allocs(one[:0]), allocs(all[:0]); n > base+1 {
		t.Errorf("decide: %v allocs with room for one entry, %v with room for all: want 1 more (the chain's array)", n, base)
	}
}

// BenchmarkJobDecide is TestJobDecideAllocs's decision (gwbench's plan: one model in
// two tiers, mode balanced) timed: the routing decision's part of a served request.
func BenchmarkJobDecide(b *testing.B) {
	m := &model{id: "m", tier: "fast"}
	var set tiers.Set
	set.Tiers[tiers.Fast] = []tiers.Candidate{{Model: "m", Quality: 1}}
	set.Tiers[tiers.Balanced] = []tiers.Candidate{{Model: "m", Quality: 2}}
	s := &Server{set: &set, models: map[string]*model{"m": m}, pred: tiers.NewPredictor(), ten: tenancy.New(nil)}
	pol, err := policies.Resolve("t", "default", policies.Plan{}, policies.Override{}, func(string) bool { return true })
	if err != nil {
		b.Fatal(err)
	}
	s.quotas = map[*policies.Policy]*tenancy.Quota{&pol: quotaOf(&pol)}
	j := &job{s: s, pol: &pol, rt: route{mode: tiers.ModeBalanced}}
	j.in.feat.N, j.in.maxField = 1, "max_tokens"
	j.plans = append(j.planBuf[:0], planned{m: m, p: plan{nPrompt: 10, out: 1}})
	now := time.Unix(1_800_000_000, 0)
	b.ReportAllocs()
	for b.Loop() {
		if _, aerr := j.decide(now); aerr != nil {
			b.Fatal(aerr.message)
		}
	}
}
