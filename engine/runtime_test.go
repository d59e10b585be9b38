package engine

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"path/filepath"
	"sync"
	"testing"

	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/engine/kernels"
	"github.com/lmlite/lmlite/engine/model"
)

// genBlock generates a tiny model and serves it from a Block.
func genBlock(t *testing.T, mc ModelConfig, opts genmodel.Options) *Block {
	t.Helper()
	if opts.Preset == "" {
		opts.Preset = "tiny"
	}
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := genmodel.Generate(opts, path); err != nil {
		t.Fatal(err)
	}
	mc.ID, mc.Path = "m", path
	b, err := New(Config{Models: []ModelConfig{mc}, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.Load(context.Background(), "m"); err != nil {
		t.Fatal(err)
	}
	return b
}

// result is what a request produced: tokens with their logits' bits, and its usage.
type result struct {
	ids    []int32
	logits []uint32
	u      Usage
	err    error
}

func generate(b *Block, req Request) result {
	s, err := b.Generate(context.Background(), "m", req)
	if err != nil {
		return result{err: err}
	}
	var r result
	for tok := range s.Tokens {
		if tok.ID >= 0 {
			r.ids = append(r.ids, tok.ID)
			r.logits = append(r.logits, math.Float32bits(tok.Logit))
		}
	}
	r.u, r.err = s.Wait(context.Background())
	return r
}

func (r result) same(o result) error {
	if r.err != nil || o.err != nil {
		return fmt.Errorf("errors %v, %v", r.err, o.err)
	}
	if len(r.ids) != len(o.ids) {
		return fmt.Errorf("%d tokens, want %d", len(o.ids), len(r.ids))
	}
	for i := range r.ids {
		if r.ids[i] != o.ids[i] || r.logits[i] != o.logits[i] {
			return fmt.Errorf("token %d: id %d logit %#x, want id %d logit %#x", i, o.ids[i], o.logits[i], r.ids[i], r.logits[i])
		}
	}
	return nil
}

// others are 31 requests of other prompts, lengths, sampling and tenants.
func others(vocab int) []Request {
	var reqs []Request
	for i := range 31 {
		p := make([]int32, 1+(i*13)%70)
		for j := range p {
			p[j] = int32((i*31 + j*7 + 3) % vocab)
		}
		reqs = append(reqs, Request{Prompt: p, MaxTokens: 8 + i%20, Tenant: fmt.Sprint("t", i%3), Priority: Priority(i % 2),
			Sampling: Sampling{Temperature: float32(i%4) * 0.4, TopK: 40 * (i % 2), Seed: uint64(i)}})
	}
	return reqs
}

// TestDeterminism: a request's tokens and their logits are the same bits alone or
// among 31 others (joining and leaving the batch around it, prefilling beside its
// decodes, interactive and batch ones, so its steps pause for their prefills or
// its prefill runs alone), at either priority, with 1 or 2 threads, on either replica, and with its prompt's prefix
// computed or taken from the cache.
//
// The mixtures of experts hold to it too (their expert choice is part of the bits),
// among them one whose first three experts tie exactly on every token.
func TestDeterminism(t *testing.T) {
	for _, c := range []struct {
		o       genmodel.Options
		prompt  int
		attnMin int // ModelConfig.AttnF32MinPrompt
	}{
		{genmodel.Options{Arch: "llama", Type: "q4_k_m", Seed: 11}, 45, 0},
		// A model that opts into float32 attention from llama.cpp's threshold, and a
		// prompt past it: the sequence runs in float32 mode (model.AttnF32), its
		// prefill chunks in tiles of many tokens.
		{genmodel.Options{Arch: "llama", Type: "q4_k_m", Seed: 11}, 150, model.AttnF32MinPrompt},
		{genmodel.Options{Arch: "mixtral", Type: "q4_k_m", Seed: 11}, 45, 0},
		{genmodel.Options{Arch: "qwen2moe", Type: "q8_0", Seed: 11, TieExperts: 3}, 45, 0},
	} {
		name := c.o.Arch
		if c.o.TieExperts > 0 {
			name += "-tied"
		}
		if c.attnMin > 0 {
			name += "-f32"
		}
		t.Run(name, func(t *testing.T) { determinism(t, c.o, c.prompt, c.attnMin) })
	}
}

func determinism(t *testing.T, o genmodel.Options, prompt, attnMin int) {
	b := genBlock(t, ModelConfig{MaxModelConcurrency: 32, Replicas: 2, MaxModelLen: 512, AttnF32MinPrompt: attnMin}, o)
	tok, _ := b.Tokenizer("m")
	target := Request{Prompt: make([]int32, prompt), MaxTokens: 40,
		Sampling: Sampling{Temperature: 0.9, TopP: 0.95, RepeatPenalty: 1.1, Seed: 1234}}
	for i := range target.Prompt {
		target.Prompt[i] = int32((i*7919 + 11) % tok.VocabSize())
	}
	prev := kernels.SetThreads(1)
	defer kernels.SetThreads(prev)
	alone := generate(b, target)
	if alone.err != nil || len(alone.ids) == 0 {
		t.Fatalf("alone: %d tokens, %v", len(alone.ids), alone.err)
	}
	replicas := map[int]bool{alone.u.Replica: true}
	for _, threads := range []int{1, 2} {
		kernels.SetThreads(threads)
		for round := range 2 {
			var wg sync.WaitGroup
			reqs := others(tok.VocabSize())
			res := make([]result, len(reqs))
			for i, r := range reqs {
				wg.Add(1)
				go func() { defer wg.Done(); res[i] = generate(b, r) }()
				if i == 10+round {
					wg.Add(1)
					var got result
					tr := target
					tr.CacheSalt = fmt.Sprint("run", threads, round) // computed, not cached
					tr.Priority = Priority(round)                    // interactive, then batch
					go func() {
						defer wg.Done()
						got = generate(b, tr)
						if err := alone.same(got); err != nil {
							t.Errorf("threads %d round %d (replica %d): %v", threads, round, got.u.Replica, err)
						}
						replicas[got.u.Replica] = true
					}()
				}
			}
			wg.Wait()
			for i, r := range res {
				if r.err != nil || r.u.CompletionTokens == 0 {
					t.Fatalf("request %d: %v, usage %+v", i, r.err, r.u)
				}
			}
		}
	}
	// Alone again, one after the other: round-robin takes both replicas.
	for i := range 2 {
		tr := target
		tr.CacheSalt = fmt.Sprint("seq", i)
		got := generate(b, tr)
		if err := alone.same(got); err != nil {
			t.Errorf("sequential run %d (replica %d): %v", i, got.u.Replica, err)
		}
		replicas[got.u.Replica] = true
	}
	if len(replicas) != 2 {
		t.Errorf("the target ran on replicas %v only", replicas)
	}
	// The first run's prefix is cached: the same request hits it (on its replica).
	hit := generate(b, target)
	if err := alone.same(hit); err != nil || hit.u.CachedTokens != (prompt-1)/16*16 || hit.u.Replica != alone.u.Replica {
		t.Errorf("cached prefix: %v, %d cached tokens on replica %d (first run on %d)", err, hit.u.CachedTokens, hit.u.Replica, alone.u.Replica)
	}
	// Batching happened: steps averaged well over one sequence. (The 32 requests
	// overlap; on a loaded machine they average about two per step, so the bar is
	// 1.5, not 2: a scheduler that ran one sequence per step gives 1.0.)
	st := b.Models()[0]
	if st.Steps == 0 || float64(st.StepSeqs)/float64(st.Steps) < 1.5 {
		t.Errorf("no batching happened: %d steps, %d sequences", st.Steps, st.StepSeqs)
	}
}

// TestFairness: two tenants, one sending 10× more requests (80 clients against 8,
// each sending request after request): once both have requests waiting, each gets
// its weighted share of the decode steps (within 10%). The window is counted in
// tokens as the clients receive them, not in wall time.
func TestFairness(t *testing.T) {
	for _, quietWeight := range []float64{1, 3} {
		t.Run(fmt.Sprint("quiet weight ", quietWeight), func(t *testing.T) { testFairness(t, quietWeight) })
	}
}

func testFairness(t *testing.T, quietWeight float64) {
	b := genBlock(t, ModelConfig{MaxModelConcurrency: 4, MaxModelLen: 256}, genmodel.Options{Arch: "llama", Type: "q8_0", Seed: 3})
	tok, _ := b.Tokenizer("m")
	ctx, cancel := context.WithCancel(context.Background())
	// Measure between 300 and 1,500 received tokens: past the start, while both
	// tenants have requests waiting. The client whose token ends the window cancels
	// the others.
	var (
		mu           sync.Mutex
		got, start   map[string]int64
		noisy, quiet int64
	)
	got = map[string]int64{}
	count := func(tenant string) {
		mu.Lock()
		defer mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		got[tenant]++
		total := got["noisy"] + got["quiet"]
		if start == nil && total >= 300 {
			start = maps.Clone(got)
		}
		if total >= 1500 {
			noisy, quiet = got["noisy"]-start["noisy"], got["quiet"]-start["quiet"]
			cancel()
		}
	}
	var wg sync.WaitGroup
	client := func(tenant string, weight float64, c int) {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			p := make([]int32, 8)
			for j := range p {
				p[j] = int32((c*131 + i*17 + j*5 + 1) % tok.VocabSize())
			}
			s, err := b.Generate(ctx, "m", Request{Prompt: p, MaxTokens: 16, Tenant: tenant, Weight: weight})
			if err != nil {
				if ctx.Err() == nil {
					t.Error(err)
				}
				return
			}
			for range s.Tokens {
				count(tenant)
			}
			s.Wait(context.Background())
		}
	}
	for c := range 80 {
		wg.Add(1)
		go client("noisy", 1, c)
	}
	for c := range 8 {
		wg.Add(1)
		go client("quiet", quietWeight, 1000+c)
	}
	wg.Wait()
	share := float64(quiet) / float64(noisy+quiet)
	want := quietWeight / (1 + quietWeight)
	t.Logf("noisy %d tokens, quiet %d tokens: quiet's share %.3f (weighted share %.3f)", noisy, quiet, share, want)
	if math.Abs(share-want) > want/10 {
		t.Errorf("quiet tenant's share of decode steps %.3f, want %.3f ± 10%%", share, want)
	}
}

func quietLog() *slog.Logger { return slog.New(slog.DiscardHandler) }
