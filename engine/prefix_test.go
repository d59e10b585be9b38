package engine

import (
	"fmt"
	"sync"
	"testing"

	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/engine/model"
)

func promptOf(n, seed, vocab int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32((seed*7919 + i*104729 + 5) % vocab)
	}
	return p
}

// TestPrefixCache: a hot hit and a warm hit (after the hot tier was emptied) give the
// same bits as computing the prompt; one tenant never hits another's prefix unless
// both share it on purpose (salt "").
func TestPrefixCache(t *testing.T) {
	b := genBlock(t, ModelConfig{MaxModelLen: 256, MaxModelConcurrency: 2, KVWarmBytes: 8 << 20},
		genmodel.Options{Arch: "qwen3", Type: "q8_0", Seed: 4})
	tok, _ := b.Tokenizer("m")
	req := Request{Prompt: promptOf(70, 1, tok.VocabSize()), MaxTokens: 20, CacheSalt: "tenant-a",
		Sampling: Sampling{Temperature: 0.7, Seed: 9}}
	cold := generate(b, req)
	if cold.err != nil || cold.u.CachedTokens != 0 {
		t.Fatalf("cold: %v, %d cached", cold.err, cold.u.CachedTokens)
	}
	hot := generate(b, req)
	if err := cold.same(hot); err != nil || hot.u.CachedTokens != 64 {
		t.Fatalf("hot hit: %v, %d cached tokens (want 64: the prompt's whole blocks)", err, hot.u.CachedTokens)
	}
	if err := b.DemoteCache("m"); err != nil {
		t.Fatal(err)
	}
	before := b.Models()[0].KV
	if before.HotCached != 0 || before.WarmBlocks == 0 {
		t.Fatalf("after DemoteCache: %+v", before)
	}
	warm := generate(b, req)
	after := b.Models()[0].KV
	if err := cold.same(warm); err != nil || warm.u.CachedTokens != 64 || after.Replays-before.Replays != 4 {
		t.Fatalf("warm hit: %v, %d cached tokens, %d replays", err, warm.u.CachedTokens, after.Replays-before.Replays)
	}

	// Another tenant, same prompt: no hit, same output.
	other := req
	other.CacheSalt = "tenant-b"
	if r := generate(b, other); cold.same(r) != nil || r.u.CachedTokens != 0 {
		t.Fatalf("tenant b: %v, %d cached tokens of tenant a's prompt", cold.same(r), r.u.CachedTokens)
	}
	// Shared on purpose: the first publishes under "", the second tenant hits it.
	shared := req
	shared.CacheSalt, shared.Tenant = "", "x"
	generate(b, shared)
	shared.Tenant = "y"
	if r := generate(b, shared); cold.same(r) != nil || r.u.CachedTokens != 64 {
		t.Fatalf("shared prefix: %v, %d cached tokens", cold.same(r), r.u.CachedTokens)
	}
}

// TestCacheEvictionUnderPressure: a hot pool barely larger than the running
// sequences need, a small warm tier, and many concurrent requests sharing some
// prefixes: cached blocks are demoted, dropped and replayed while requests run, and
// every request still produces exactly what it produces alone without the cache.
func TestCacheEvictionUnderPressure(t *testing.T) {
	opts := genmodel.Options{Arch: "llama", Type: "q4_0", Seed: 8}
	ref := genBlock(t, ModelConfig{MaxModelLen: 160, MaxModelConcurrency: 1, DisablePrefixCache: true}, opts)
	tok, _ := ref.Tokenizer("m")
	kv := ref.Models()[0].KV.BlockSize // bytes per block
	b := genBlock(t, ModelConfig{MaxModelLen: 160, MaxModelConcurrency: 4,
		KVCacheBytes: 4 * 11 * kv, KVWarmBytes: 12 * kv}, opts)
	var reqs []Request
	for i := range 24 {
		p := append(promptOf(48, i%5, tok.VocabSize()), promptOf(10+i, 100+i, tok.VocabSize())...) // 5 shared prefixes
		reqs = append(reqs, Request{Prompt: p, MaxTokens: 24 + i%8, CacheSalt: fmt.Sprint("t", i%2),
			Sampling: Sampling{Temperature: 0.8, Seed: uint64(i)}})
	}
	want := make([]result, len(reqs))
	for i, r := range reqs {
		if want[i] = generate(ref, r); want[i].err != nil {
			t.Fatal(want[i].err)
		}
	}
	for round := range 2 {
		got := make([]result, len(reqs))
		var wg sync.WaitGroup
		for i, r := range reqs {
			wg.Add(1)
			go func() { defer wg.Done(); got[i] = generate(b, r) }()
		}
		wg.Wait()
		for i := range reqs {
			if err := want[i].same(got[i]); err != nil {
				t.Errorf("round %d request %d (%d cached tokens): %v", round, i, got[i].u.CachedTokens, err)
			}
		}
	}
	st := b.Models()[0].KV
	t.Logf("kv: %+v", st)
	if st.HitTokens == 0 || st.Demotions == 0 || st.Evictions == 0 || st.Replays == 0 {
		t.Errorf("the pressure did not exercise the tiers: %+v", st)
	}
	if st.HotUsed != 0 {
		t.Errorf("%d hot blocks still referenced after every request ended", st.HotUsed)
	}
}

// TestReplicaAffinity: requests go to the replica that caches their prefix; others
// still alternate.
func TestReplicaAffinity(t *testing.T) {
	b := genBlock(t, ModelConfig{MaxModelLen: 128, Replicas: 2}, genmodel.Options{Arch: "llama", Type: "q8_0", Seed: 2})
	tok, _ := b.Tokenizer("m")
	req := Request{Prompt: promptOf(40, 3, tok.VocabSize()), MaxTokens: 4, CacheSalt: "a"}
	first := generate(b, req)
	for i := range 5 {
		r := generate(b, req)
		if r.u.Replica != first.u.Replica || r.u.CachedTokens != 32 {
			t.Fatalf("repeat %d: replica %d with %d cached tokens; the prefix is on replica %d", i, r.u.Replica, r.u.CachedTokens, first.u.Replica)
		}
	}
	seen := map[int]bool{}
	for i := range 4 {
		other := Request{Prompt: promptOf(40, 10+i, tok.VocabSize()), MaxTokens: 4, CacheSalt: "a"}
		seen[generate(b, other).u.Replica] = true
	}
	if len(seen) != 2 {
		t.Fatalf("requests without a cached prefix all went to replicas %v", seen)
	}
}

// TestAffinityKeepsRequestsOnOneReplica: requests with the same Affinity (the
// gateway's prompt_cache_key) and no cached prefix anywhere go to one replica, not
// round-robin; another affinity may go elsewhere.
func TestAffinityKeepsRequestsOnOneReplica(t *testing.T) {
	b := genBlock(t, ModelConfig{MaxModelLen: 128, Replicas: 2}, genmodel.Options{Arch: "llama", Type: "q8_0", Seed: 2})
	tok, _ := b.Tokenizer("m")
	seen := map[uint64]map[int]bool{}
	for i := range 8 {
		aff := uint64(7 + i/4) // four requests of one key, then four of another
		r := generate(b, Request{Prompt: promptOf(40, 20+i, tok.VocabSize()), MaxTokens: 2, CacheSalt: "a", Affinity: aff})
		if r.err != nil {
			t.Fatal(r.err)
		}
		if seen[aff] == nil {
			seen[aff] = map[int]bool{}
		}
		seen[aff][r.u.Replica] = true
	}
	if len(seen[7]) != 1 || len(seen[8]) != 1 || seen[7][0] == seen[8][0] {
		t.Fatalf("replicas by affinity: %v", seen)
	}
}

// TestPrefixCacheKeepsAttentionModesApart: on a model that opts into float32
// attention from 64 prompt tokens, a request of a short prompt (binary16
// attention) and one whose prompt starts with it but reaches 64 tokens (float32
// attention, model.AttnF32) never share cached blocks, in either order, while a
// second request of each mode hits its own; every output is the bits of the same
// request computed without the cache.
func TestPrefixCacheKeepsAttentionModesApart(t *testing.T) {
	opts := genmodel.Options{Arch: "llama", Type: "q4_k_m", Seed: 6}
	ref := genBlock(t, ModelConfig{MaxModelLen: 256, DisablePrefixCache: true, AttnF32MinPrompt: model.AttnF32MinPrompt}, opts)
	tok, _ := ref.Tokenizer("m")
	short := Request{Prompt: promptOf(40, 1, tok.VocabSize()), MaxTokens: 8, Sampling: Sampling{Temperature: 0.7, Seed: 3}}
	long := short
	long.Prompt = append(append([]int32(nil), short.Prompt...), promptOf(40, 2, tok.VocabSize())...)
	wantShort, wantLong := generate(ref, short), generate(ref, long)
	if wantShort.err != nil || wantLong.err != nil {
		t.Fatal(wantShort.err, wantLong.err)
	}
	check := func(name string, got, want result, cached int) {
		t.Helper()
		if err := want.same(got); err != nil || got.u.CachedTokens != cached {
			t.Fatalf("%s: %v, %d cached tokens (want %d)", name, err, got.u.CachedTokens, cached)
		}
	}
	// Short first: its two whole blocks are cached, the long prompt does not take them.
	b := genBlock(t, ModelConfig{MaxModelLen: 256, AttnF32MinPrompt: model.AttnF32MinPrompt}, opts)
	check("short", generate(b, short), wantShort, 0)
	check("long after short", generate(b, long), wantLong, 0)
	check("long again", generate(b, long), wantLong, 64)
	check("short again", generate(b, short), wantShort, 32)
	// Long first: the short prompt does not take its blocks either.
	b = genBlock(t, ModelConfig{MaxModelLen: 256, AttnF32MinPrompt: model.AttnF32MinPrompt}, opts)
	check("long", generate(b, long), wantLong, 0)
	check("short after long", generate(b, short), wantShort, 0)
}
