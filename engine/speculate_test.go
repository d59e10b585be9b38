package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/engine/spec"
)

// specCase is one request of the speculation tests.
type specCase struct {
	name string
	req  Request
}

// specCases are requests over prompt: greedy, seeded sampling (with the chain's
// filters and a repetition penalty), logprobs with top logprobs, a stop string,
// short max tokens that end inside a draft (over a prompt that repeats itself),
// and ignore_eos.
func specCases(t *testing.T, b *Block, id string, prompt []int32, stop string) []specCase {
	t.Helper()
	out := runFeatures(b, id, Request{Prompt: prompt, MaxTokens: 200, NoSpeculation: true, Sampling: Sampling{IgnoreEOS: true}})
	if out.err != nil || len(out.ids) < 200 {
		t.Fatalf("greedy continuation: %v, %d tokens", out.err, len(out.ids))
	}
	// The prompt and the model's own greedy continuation, cut (at 180 tokens or the
	// nearest cut before it) where prompt lookup drafts the right token at the first
	// decode step, i.e. over the cut and the first token the request samples. Where the
	// output starts to repeat depends on the SIMD level (a random model's greedy tokens
	// differ between levels), so a fixed cut drafted on one machine and not on another.
	drafts := func(cut int) bool {
		d := spec.Lookup(nil, append(slices.Clip(prompt), out.ids[:cut+1]...), 1)
		return len(d) == 1 && d[0] == out.ids[cut+1]
	}
	cut := 180
	for cut > 0 && !drafts(cut) {
		cut--
	}
	if cut == 0 {
		t.Fatalf("prompt lookup drafts nothing right over the greedy continuation: nothing for the short cases to draft")
	}
	continued := append(append([]int32(nil), prompt...), out.ids[:cut]...)
	cs := []specCase{
		{"greedy", Request{Prompt: prompt, MaxTokens: 200}},
		{"greedy-logprobs", Request{Prompt: prompt, MaxTokens: 120, Logprobs: true, TopLogprobs: 5}},
		{"sampled", Request{Prompt: prompt, MaxTokens: 150, Sampling: Sampling{Temperature: 0.7, TopK: 40, TopP: 0.95, Seed: 42}}},
		{"sampled-hot", Request{Prompt: prompt, MaxTokens: 150, Logprobs: true, Sampling: Sampling{Temperature: 1.2, MinP: 0.02, Seed: 7}}},
		{"penalty", Request{Prompt: prompt, MaxTokens: 100, Sampling: Sampling{Temperature: 0.5, RepeatPenalty: 1.1, Seed: 3}}},
		{"ignore-eos", Request{Prompt: prompt, MaxTokens: 90, Sampling: Sampling{IgnoreEOS: true}}},
		{"stop", Request{Prompt: prompt, MaxTokens: 200, Stop: []string{stop}}},
	}
	// Short max tokens over it end inside a draft.
	for _, n := range []int{1, 2, 3, 5, 7, 11, 13, 17, 23} {
		cs = append(cs, specCase{fmt.Sprint("max-tokens-", n), Request{Prompt: continued, MaxTokens: n}})
	}
	return cs
}

// sameWithAndWithout runs each case with speculation and without (NoSpeculation) on
// b and requires the same text, ids, logits, logprobs, top logprobs and finish
// reason; it returns the tokens accepted from drafts over all cases.
func sameWithAndWithout(t *testing.T, b *Block, id string, cases []specCase) int {
	t.Helper()
	accepted, shortDrafts := 0, 0
	for _, c := range cases {
		plain := c.req
		plain.NoSpeculation = true
		want := runFeatures(b, id, plain)
		got := runFeatures(b, id, c.req)
		if err := want.same(got); err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if want.u.FinishReason != got.u.FinishReason || want.u.CompletionTokens != got.u.CompletionTokens {
			t.Errorf("%s: finish %s after %d tokens plain, %s after %d speculating", c.name,
				want.u.FinishReason, want.u.CompletionTokens, got.u.FinishReason, got.u.CompletionTokens)
		}
		if want.u.DraftTokens != 0 {
			t.Errorf("%s: %d tokens drafted with NoSpeculation", c.name, want.u.DraftTokens)
		}
		t.Logf("%s: %d tokens (%s), drafted %d, accepted %d", c.name, got.u.CompletionTokens, got.u.FinishReason, got.u.DraftTokens, got.u.AcceptedTokens)
		accepted += got.u.AcceptedTokens
		if strings.HasPrefix(c.name, "max-tokens-") {
			shortDrafts += got.u.DraftTokens
		}
	}
	if shortDrafts == 0 {
		t.Errorf("the short max-tokens cases drafted nothing over a prompt that repeats")
	}
	return accepted
}

// TestSpeculationSameOutputStories: on a real model (stories260K, whose stories
// repeat), speculative decoding gives plain decoding's output bit for bit in every
// mode, and its drafts are accepted (so the verification path ran).
func TestSpeculationSameOutputStories(t *testing.T) {
	b := newStoriesBlock(t, ModelConfig{MaxModelLen: 512, Speculative: spec.Config{NGram: true}}, Config{Logger: quietLog()})
	tok, _ := b.Tokenizer("stories")
	prompt := tok.Encode("Once upon a time, there was a little girl named Lily. She liked to play with her ball. One day, Lily", true, false)
	if got := sameWithAndWithout(t, b, "stories", specCases(t, b, "stories", prompt, "ball")); got == 0 {
		t.Fatal("no draft was accepted: the verification path did not run")
	}
	st := b.Models()[0]
	if st.DraftTokens == 0 || st.AcceptedTokens == 0 || st.AcceptedTokens > st.DraftTokens {
		t.Fatalf("model counters: drafted %d, accepted %d", st.DraftTokens, st.AcceptedTokens)
	}
}

// TestSpeculationSameOutputGenerated: the same on a random-weight model (generated;
// its greedy output falls into cycles, which prompt lookup drafts), in float32
// attention (a 70-token prompt) and binary16 attention (a short one).
func TestSpeculationSameOutputGenerated(t *testing.T) {
	b := genBlock(t, ModelConfig{MaxModelLen: 512, Speculative: spec.Config{NGram: true, MaxDraft: 6}},
		genmodel.Options{Arch: "llama", Type: "q8_0", Seed: 5})
	tok, _ := b.Tokenizer("m")
	accepted := 0
	for _, n := range []int{12, 70} {
		prompt := make([]int32, n)
		for i := range prompt {
			prompt[i] = int32((i*7919 + 5) % tok.VocabSize())
		}
		accepted += sameWithAndWithout(t, b, "m", specCases(t, b, "m", prompt, "e"))
	}
	if accepted == 0 {
		t.Fatal("no draft was accepted: the verification path did not run")
	}
}

// TestSpeculationInMixedBatch: a speculating request gives its plain output among 15
// others, speculating and not, greedy and sampled, some constrained by a grammar
// (which never drafts) and with logprobs, all in the same steps.
func TestSpeculationInMixedBatch(t *testing.T) {
	b := genBlock(t, ModelConfig{MaxModelLen: 512, MaxModelConcurrency: 16, Speculative: spec.Config{NGram: true}},
		genmodel.Options{Arch: "llama", Type: "q8_0", Seed: 5})
	tok, _ := b.Tokenizer("m")
	g, err := b.CompileSchema([]byte(personSchema))
	if err != nil {
		t.Fatal(err)
	}
	prompt := make([]int32, 30)
	for i := range prompt {
		prompt[i] = int32((i*7919 + 5) % tok.VocabSize())
	}
	targets := []Request{
		{Prompt: prompt, MaxTokens: 150, Logprobs: true, TopLogprobs: 3},
		{Prompt: prompt[:20], MaxTokens: 150, Sampling: Sampling{Temperature: 0.8, TopK: 50, Seed: 99}},
	}
	for ti, target := range targets {
		plain := target
		plain.NoSpeculation, plain.CacheSalt = true, "plain"
		alone := runFeatures(b, "m", plain)
		var wg sync.WaitGroup
		var got featureResult
		for i := range 15 {
			req := Request{Prompt: prompt[:5+i], MaxTokens: 20 + 9*i, Tenant: fmt.Sprint("t", i%3), NoSpeculation: i%4 == 3,
				Sampling: Sampling{Temperature: float32(i%3) * 0.5, Seed: uint64(i)}, Logprobs: i%2 == 0, TopLogprobs: i % 4}
			if i%5 == 1 {
				req.Grammar = g
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if r := runFeatures(b, "m", req); r.err != nil {
					t.Errorf("other %d: %v", i, r.err)
				} else if req.Grammar != nil && r.u.DraftTokens != 0 {
					t.Errorf("other %d: a constrained request drafted %d tokens", i, r.u.DraftTokens)
				}
			}()
			if i == 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					tr := target
					tr.CacheSalt = "batch"
					got = runFeatures(b, "m", tr)
				}()
			}
		}
		wg.Wait()
		if err := alone.same(got); err != nil {
			t.Errorf("target %d: %v", ti, err)
		}
		if got.u.AcceptedTokens == 0 {
			t.Errorf("target %d: no draft accepted in the batch (drafted %d)", ti, got.u.DraftTokens)
		}
		t.Logf("target %d: drafted %d, accepted %d", ti, got.u.DraftTokens, got.u.AcceptedTokens)
	}
	if st := b.Models()[0]; float64(st.StepSeqs)/float64(st.Steps) < 1.5 {
		t.Errorf("no batching happened: %d steps, %d sequences", st.Steps, st.StepSeqs)
	}
}

// TestSpeculationSkipsGrammar: a request with a grammar decodes plainly on a model
// that speculates (its next mask depends on each accepted token): the same output,
// and nothing drafted.
func TestSpeculationSkipsGrammar(t *testing.T) {
	b := genBlock(t, ModelConfig{MaxModelLen: 512, Speculative: spec.Config{NGram: true}},
		genmodel.Options{Arch: "llama", Type: "q8_0", Seed: 5})
	g, err := b.CompileSchema([]byte(personSchema))
	if err != nil {
		t.Fatal(err)
	}
	prompt := []int32{1, 5, 9, 13, 5, 9, 13, 5, 9}
	req := Request{Prompt: prompt, MaxTokens: 120, Grammar: g, Logprobs: true, Sampling: Sampling{Temperature: 0.8, Seed: 4}}
	plain := req
	plain.NoSpeculation = true
	want, got := runFeatures(b, "m", plain), runFeatures(b, "m", req)
	if err := want.same(got); err != nil {
		t.Fatal(err)
	}
	if got.u.DraftTokens != 0 {
		t.Fatalf("drafted %d tokens under a grammar", got.u.DraftTokens)
	}
}

// TestSpeculationKVIsPlainKV: the KV blocks a speculating request leaves in the
// prefix cache (its accepted tokens' only, written partly by verification steps
// whose rejected drafts were rolled back) are bit for bit those of the same tokens
// decoded plainly, and a speculating request that starts from them (a prefix-cache
// hit) continues as plain decoding does without the cache.
func TestSpeculationKVIsPlainKV(t *testing.T) {
	b := newStoriesBlock(t, ModelConfig{MaxModelLen: 512, Speculative: spec.Config{NGram: true}}, Config{Logger: quietLog()})
	tok, _ := b.Tokenizer("stories")
	prompt := tok.Encode("Once upon a time, there was a little girl named Lily. She liked to play with her ball. One day, Lily", true, false)
	req := Request{Prompt: prompt, MaxTokens: 300, Sampling: Sampling{IgnoreEOS: true}, CacheSalt: "spec"}
	got := runFeatures(b, "stories", req)
	req.NoSpeculation, req.CacheSalt = true, "plain"
	want := runFeatures(b, "stories", req)
	if err := want.same(got); err != nil {
		t.Fatal(err)
	}
	if got.u.AcceptedTokens == 0 || got.u.AcceptedTokens == got.u.DraftTokens {
		t.Fatalf("drafted %d, accepted %d: the test needs accepted and rejected drafts", got.u.DraftTokens, got.u.AcceptedTokens)
	}
	tokens := append(append([]int32(nil), prompt...), want.ids...)
	var r *runner
	b.call(func() { r = b.models["stories"].life.reps.reps[0] })
	r.do(func() {
		a, p := r.pool.NewSeq(cacheSalt(Request{Prompt: prompt, CacheSalt: "spec"}, r.attnMin)), r.pool.NewSeq(cacheSalt(Request{Prompt: prompt, CacheSalt: "plain"}, r.attnMin))
		defer a.Release()
		defer p.Release()
		na, np := a.Prefix(tokens), p.Prefix(tokens)
		if na != np || na < len(tokens)-2*r.pool.BlockTokens() {
			t.Errorf("cached %d tokens speculating, %d plain, of %d", na, np, len(tokens))
			return
		}
		layers := r.pool.Config().Layers
		for i := range a.Blocks() {
			for l := range layers {
				ba, bp := a.Blocks()[i], p.Blocks()[i]
				if !slices.Equal(r.pool.K(ba, l), r.pool.K(bp, l)) || !slices.Equal(r.pool.V(ba, l), r.pool.V(bp, l)) {
					t.Errorf("block %d layer %d differs", i, l)
					return
				}
			}
		}
		t.Logf("%d tokens' KV identical (%d drafted, %d accepted)", na, got.u.DraftTokens, got.u.AcceptedTokens)
	})
	// After a prefix-cache hit on its own blocks, a speculating request with the
	// output in its prompt still gives plain decoding's continuation.
	long := Request{Prompt: tokens[:len(prompt)+200], MaxTokens: 60, Sampling: Sampling{IgnoreEOS: true}, CacheSalt: "spec"}
	hit := runFeatures(b, "stories", long)
	long.NoSpeculation, long.CacheSalt = true, "plain-2"
	cold := runFeatures(b, "stories", long)
	if err := cold.same(hit); err != nil {
		t.Fatalf("after a cache hit: %v", err)
	}
	if hit.u.CachedTokens == 0 || cold.u.CachedTokens != 0 || hit.u.DraftTokens == 0 {
		t.Fatalf("cached %d (speculating), %d (plain); drafted %d", hit.u.CachedTokens, cold.u.CachedTokens, hit.u.DraftTokens)
	}
}

// TestSpeculationGenerateN: n = 3 sampled choices speculating, in one batch, are the
// choices decoded plainly (each alone, its ChoiceSeed).
func TestSpeculationGenerateN(t *testing.T) {
	b := newStoriesBlock(t, ModelConfig{MaxModelLen: 512, MaxModelConcurrency: 8, Speculative: spec.Config{NGram: true}}, Config{Logger: quietLog()})
	prompt, _ := b.Tokenize("stories", "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends.")
	req := Request{Prompt: prompt, MaxTokens: 200, Sampling: Sampling{Temperature: 0.6, Seed: 77}, Logprobs: true, CacheSalt: "n"}
	streams, err := b.GenerateN(context.Background(), "stories", req, 3)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]featureResult, 3)
	var wg sync.WaitGroup
	for i, s := range streams {
		wg.Add(1)
		go func() { defer wg.Done(); got[i] = drain(s) }()
	}
	wg.Wait()
	accepted := 0
	for i := range 3 {
		alone := req
		alone.Sampling.Seed = ChoiceSeed(req.Sampling.Seed, i)
		alone.CacheSalt, alone.NoSpeculation = "alone", true
		if err := runFeatures(b, "stories", alone).same(got[i]); err != nil {
			t.Errorf("choice %d: %v", i, err)
		}
		accepted += got[i].u.AcceptedTokens
	}
	if accepted == 0 {
		t.Error("no choice accepted a draft")
	}
}
