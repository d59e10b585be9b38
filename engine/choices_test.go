package engine

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
)

func float32bits(f float32) uint32 { return math.Float32bits(f) }

// TestGenerateN: each of n choices gives the tokens of the request alone with its
// choice's seed, choice 0 those of the plain request; the choices after the first
// take the prompt's full KV blocks from the prefix cache.
func TestGenerateN(t *testing.T) {
	b := newStoriesBlock(t, ModelConfig{MaxModelConcurrency: 8}, Config{Logger: quietLog()})
	prompt, _ := b.Tokenize("stories", "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends.")
	if len(prompt) < 17 {
		t.Fatalf("prompt of %d tokens holds no full KV block", len(prompt))
	}
	req := Request{Prompt: prompt, MaxTokens: 40, Sampling: Sampling{Temperature: 1, TopP: 0.9, Seed: 77}, Logprobs: true, CacheSalt: "n"}
	streams, err := b.GenerateN(context.Background(), "stories", req, 4)
	if err != nil || len(streams) != 4 {
		t.Fatalf("%d streams, %v", len(streams), err)
	}
	got := make([]featureResult, 4)
	var wg sync.WaitGroup
	for i, s := range streams {
		wg.Add(1)
		go func() { defer wg.Done(); got[i] = drain(s) }()
	}
	wg.Wait()
	texts := map[string]bool{}
	for i := range 4 {
		alone := req
		alone.Sampling.Seed = ChoiceSeed(req.Sampling.Seed, i)
		alone.CacheSalt = "alone"
		want := runFeatures(b, "stories", alone)
		if err := want.same(got[i]); err != nil {
			t.Errorf("choice %d: %v", i, err)
		}
		if i > 0 && got[i].u.CachedTokens < 16 {
			t.Errorf("choice %d: %d cached prompt tokens", i, got[i].u.CachedTokens)
		}
		texts[got[i].text] = true
	}
	if len(texts) < 2 {
		t.Errorf("4 sampled choices gave one text")
	}
	if _, err := b.GenerateN(context.Background(), "stories", req, 9); err == nil {
		t.Error("n=9 accepted")
	}
}

// drain is runFeatures for a stream already started.
func drain(s *Stream) featureResult {
	var r featureResult
	for tok := range s.Tokens {
		r.text += tok.Text
		if tok.ID < 0 {
			continue
		}
		r.ids = append(r.ids, tok.ID)
		r.bits = append(r.bits, float32bits(tok.Logit), float32bits(tok.Logprob))
		for _, t := range tok.TopLogprobs {
			r.bits = append(r.bits, uint32(t.ID), float32bits(t.Logprob))
			r.pairs = append(r.pairs, fmt.Sprintf("%d:%.3f", t.ID, t.Logprob))
		}
	}
	r.u, r.err = s.Wait(context.Background())
	return r
}
