package engine

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// anyOfStringsSchema is a pathological schema for masks: n alternatives that all
// open with the same string property, so that inside it n stacks stay live and each
// fresh mask walks the whole vocabulary n times (~1.8 million steps for 32 over Llama
// 2's vocabulary, ~100 ms).
func anyOfStringsSchema(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"anyOf":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"type":"object","properties":{"name":{"type":"string"},"v%d":{"type":"integer"}},"required":["name"],"additionalProperties":false}`, i)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

func llamaPrompt(vocab, n int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(1000 + (i*7919)%(vocab-2000))
	}
	return p
}

// TestGrammarBudgetStopsPathologicalSchema: a schema whose masks take more than the
// default budget of one token (2^20 steps) ends with ErrGrammarBudget, after the
// tokens it produced before the expensive state, with the work counted in its Usage;
// a budget too small for the first mask ends the request before its first token.
func TestGrammarBudgetStopsPathologicalSchema(t *testing.T) {
	b := llamaVocabBlock(t, ModelConfig{MaxModelConcurrency: 4, MaxModelLen: 512})
	tok, _ := b.Tokenizer("m")
	g, err := b.CompileSchema(anyOfStringsSchema(32))
	if err != nil {
		t.Fatal(err)
	}
	r := runFeatures(b, "m", Request{Prompt: llamaPrompt(tok.VocabSize(), 16), MaxTokens: 64, Grammar: g,
		Sampling: Sampling{Temperature: 1, Seed: 1}})
	if !errors.Is(r.err, ErrGrammarBudget) {
		t.Fatalf("pathological schema: %v after %d tokens (%q), want ErrGrammarBudget", r.err, len(r.ids), r.text)
	}
	if len(r.ids) == 0 || !strings.HasPrefix(r.text, `{"name":`) {
		t.Errorf("tokens before the budget ran out: %d, %q; want the object's opening", len(r.ids), r.text)
	}
	if r.u.GrammarSteps <= DefaultGrammarMaskSteps || r.u.GrammarTime <= 0 {
		t.Errorf("usage: %d grammar steps in %v; want the spent budget counted", r.u.GrammarSteps, r.u.GrammarTime)
	}
	t.Logf("%v after %d tokens %q; %d steps, %v", r.err, len(r.ids), r.text, r.u.GrammarSteps, r.u.GrammarTime)

	// A budget the first mask exceeds: no token at all.
	small := llamaVocabBlock(t, ModelConfig{MaxModelConcurrency: 4, MaxModelLen: 512, GrammarMaskSteps: 50})
	g2, err := small.CompileSchema(optionalSchema(64, "first"))
	if err != nil {
		t.Fatal(err)
	}
	r = runFeatures(small, "m", Request{Prompt: llamaPrompt(tok.VocabSize(), 16), MaxTokens: 8, Grammar: g2})
	if !errors.Is(r.err, ErrGrammarBudget) || len(r.ids) != 0 {
		t.Errorf("mask budget 50: %v after %d tokens, want ErrGrammarBudget before the first", r.err, len(r.ids))
	}
	// The same request without a limit runs.
	free := llamaVocabBlock(t, ModelConfig{MaxModelConcurrency: 4, MaxModelLen: 512, GrammarMaskSteps: -1, GrammarRequestSteps: -1})
	g3, _ := free.CompileSchema(optionalSchema(64, "first"))
	if r := runFeatures(free, "m", Request{Prompt: llamaPrompt(tok.VocabSize(), 16), MaxTokens: 8, Grammar: g3}); r.err != nil || len(r.ids) == 0 {
		t.Errorf("no limit: %v after %d tokens", r.err, len(r.ids))
	}
}

// TestGrammarRequestBudget: a request's masks together past its budget end it with
// ErrGrammarBudget, though each mask is within the per-token budget.
func TestGrammarRequestBudget(t *testing.T) {
	b := llamaVocabBlock(t, ModelConfig{MaxModelConcurrency: 4, MaxModelLen: 512, GrammarRequestSteps: 100_000})
	tok, _ := b.Tokenizer("m")
	g, _ := b.CompileSchema(optionalSchema(64, "req"))
	r := runFeatures(b, "m", Request{Prompt: llamaPrompt(tok.VocabSize(), 16), MaxTokens: 200, Grammar: g,
		Sampling: Sampling{Temperature: 1, Seed: 3}})
	if !errors.Is(r.err, ErrGrammarBudget) || !strings.Contains(r.err.Error(), "request's 100000 steps") {
		t.Fatalf("request budget 100,000: %v after %d tokens and %d steps, want ErrGrammarBudget", r.err, len(r.ids), r.u.GrammarSteps)
	}
}

// TestMaskCacheHitsAcrossRequests: a second request through the same grammar states
// (same schema, prompt and seed) takes every mask from the cache: no grammar work,
// the same tokens.
func TestMaskCacheHitsAcrossRequests(t *testing.T) {
	b := llamaVocabBlock(t, ModelConfig{MaxModelConcurrency: 4, MaxModelLen: 512})
	tok, _ := b.Tokenizer("m")
	g, _ := b.CompileSchema(optionalSchema(64, "cache"))
	req := Request{Prompt: llamaPrompt(tok.VocabSize(), 16), MaxTokens: 40, Grammar: g, Sampling: Sampling{Temperature: 1, Seed: 5}}
	first := runFeatures(b, "m", req)
	if first.err != nil || first.u.GrammarSteps == 0 {
		t.Fatalf("first: %v, %d grammar steps", first.err, first.u.GrammarSteps)
	}
	before := b.Models()[0].GrammarMasks
	second := runFeatures(b, "m", req)
	if err := first.same(second); err != nil {
		t.Fatal(err)
	}
	after := b.Models()[0].GrammarMasks
	if second.u.GrammarSteps != 0 || after.Misses != before.Misses || after.Hits-before.Hits < uint64(len(second.ids)) {
		t.Errorf("second request: %d grammar steps, %d misses, %d hits for %d tokens; want every mask cached",
			second.u.GrammarSteps, after.Misses-before.Misses, after.Hits-before.Hits, len(second.ids))
	}
}

// TestConstrainedBesideUnconstrainedDeterminism: a constrained request whose masks are
// computed off the step (a fresh schema of 64 optional properties: cache misses, the
// sequence held while its masks compute) gives the same bits alone and beside
// unconstrained requests, and they give the same bits alone and beside it.
func TestConstrainedBesideUnconstrainedDeterminism(t *testing.T) {
	mc := ModelConfig{MaxModelConcurrency: 8, MaxModelLen: 512}
	b := llamaVocabBlock(t, mc)
	tok, _ := b.Tokenizer("m")
	prompt := llamaPrompt(tok.VocabSize(), 40)
	constrained := func(b *Block) Request {
		g, err := b.CompileSchema(optionalSchema(64, "det"))
		if err != nil {
			t.Fatal(err)
		}
		return Request{Prompt: prompt[:20], MaxTokens: 48, Grammar: g, Tenant: "c",
			Sampling: Sampling{Temperature: 0.9, Seed: 11}, Logprobs: true, TopLogprobs: 3}
	}
	free := func(i int) Request {
		return Request{Prompt: prompt[i : i+12], MaxTokens: 24, Tenant: fmt.Sprint("u", i), CacheSalt: fmt.Sprint("u", i),
			Sampling: Sampling{Temperature: float32(i%2) * 0.7, Seed: uint64(i), IgnoreEOS: true}}
	}
	aloneC := runFeatures(b, "m", constrained(b))
	if aloneC.err != nil || aloneC.u.GrammarSteps == 0 {
		t.Fatalf("constrained alone: %v, %d grammar steps", aloneC.err, aloneC.u.GrammarSteps)
	}
	var aloneU []featureResult
	for i := range 4 {
		aloneU = append(aloneU, runFeatures(b, "m", free(i)))
	}
	for round := range 2 {
		b := llamaVocabBlock(t, mc) // the same model, its mask cache empty: every mask computed again
		var wg sync.WaitGroup
		got := make([]featureResult, 4)
		var gotC featureResult
		wg.Add(1)
		go func() {
			defer wg.Done()
			gotC = runFeatures(b, "m", constrained(b))
		}()
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[i] = runFeatures(b, "m", free(i))
			}()
		}
		wg.Wait()
		if err := aloneC.same(gotC); err != nil {
			t.Errorf("round %d, constrained: %v", round, err)
		}
		if gotC.u.GrammarSteps == 0 {
			t.Errorf("round %d: the constrained request's masks were not computed", round)
		}
		for i := range 4 {
			if err := aloneU[i].same(got[i]); err != nil {
				t.Errorf("round %d, unconstrained %d: %v", round, i, err)
			}
		}
	}
}
