package engine

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/lmlite/lmlite/engine/spec"
)

// perturbHalf rewrites every other run of 6 words of text (reversed and
// upper-cased), so that half of it is as the model would write it and half not:
// a prediction that the output leaves and comes back to.
func perturbHalf(text string) string {
	w := strings.Fields(text)
	for i := 6; i < len(w); i += 12 {
		run := w[i:min(i+6, len(w))]
		for a, b := 0, len(run)-1; a < b; a, b = a+1, b-1 {
			run[a], run[b] = run[b], run[a]
		}
		for k := range run {
			run[k] = strings.ToUpper(run[k])
		}
	}
	return strings.Join(w, " ")
}

const unrelatedText = `func main() { for i := 0; i < 10; i++ { fmt.Println("row", i, strings.Repeat("#", i)) } }
SELECT id, name FROM users WHERE created_at > now() - interval '1 day' ORDER BY id;`

// predictionCases are the requests of the prediction tests: greedy, with logprobs,
// seeded sampling, a penalty, a stop string and a short max tokens.
func predictionCases(prompt []int32) []specCase {
	return []specCase{
		{"greedy", Request{Prompt: prompt, MaxTokens: 200}},
		{"greedy-logprobs", Request{Prompt: prompt, MaxTokens: 120, Logprobs: true, TopLogprobs: 5}},
		{"sampled", Request{Prompt: prompt, MaxTokens: 150, Logprobs: true, Sampling: Sampling{Temperature: 0.7, TopK: 40, TopP: 0.95, Seed: 42}}},
		{"penalty", Request{Prompt: prompt, MaxTokens: 100, Sampling: Sampling{Temperature: 1.2, MinP: 0.02, RepeatPenalty: 1.1, Seed: 3}}},
		{"stop", Request{Prompt: prompt, MaxTokens: 200, Stop: []string{"ball"}}},
		{"max-tokens-7", Request{Prompt: prompt, MaxTokens: 7}},
	}
}

func storiesPrompt(t *testing.T, b *Block) []int32 {
	t.Helper()
	tok, err := b.Tokenizer("stories")
	if err != nil {
		t.Fatal(err)
	}
	return tok.Encode("Once upon a time, there was a little girl named Lily. She liked to play with her ball. One day, Lily", true, false)
}

// TestPredictionSameOutput: on a real model (stories260K) whose config does not
// speculate, a request's prediction (its own plain output, half of it perturbed, or
// unrelated text) gives plain decoding's output bit for bit — ids, text, logits,
// logprobs, finish reason — greedy and sampled; the model's own output is mostly
// accepted from the prediction, and the usage counts add up.
func TestPredictionSameOutput(t *testing.T) {
	b := newStoriesBlock(t, ModelConfig{MaxModelLen: 512}, Config{Logger: quietLog()})
	prompt := storiesPrompt(t, b)
	own := runFeatures(b, "stories", Request{Prompt: prompt, MaxTokens: 200})
	if own.err != nil || len(own.ids) < 100 {
		t.Fatalf("plain output: %v, %d tokens", own.err, len(own.ids))
	}
	for _, p := range []struct{ name, text string }{{"own", own.text}, {"half", perturbHalf(own.text)}, {"unrelated", unrelatedText}} {
		for _, c := range predictionCases(prompt) {
			want := runFeatures(b, "stories", c.req)
			req := c.req
			req.Prediction = p.text
			got := runFeatures(b, "stories", req)
			name := p.name + "/" + c.name
			if err := want.same(got); err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			u := got.u
			if want.u.FinishReason != u.FinishReason || want.u.Predicted || !u.Predicted {
				t.Errorf("%s: finish %s / %s, predicted %v / %v", name, want.u.FinishReason, u.FinishReason, want.u.Predicted, u.Predicted)
			}
			if u.PredictionAccepted+u.PredictionRejected != u.DraftTokens || u.PredictionAccepted != u.AcceptedTokens {
				t.Errorf("%s: prediction accepted %d + rejected %d, drafted %d accepted %d (the only source)", name,
					u.PredictionAccepted, u.PredictionRejected, u.DraftTokens, u.AcceptedTokens)
			}
			if p.name == "own" && c.name == "greedy" && u.PredictionAccepted < u.CompletionTokens*3/4 {
				t.Errorf("%s: only %d of %d tokens accepted from the model's own output", name, u.PredictionAccepted, u.CompletionTokens)
			}
			if p.name == "half" && c.name == "greedy" && u.PredictionAccepted < u.CompletionTokens/4 {
				t.Errorf("%s: only %d of %d tokens accepted from the half-perturbed output (no re-alignment?)", name, u.PredictionAccepted, u.CompletionTokens)
			}
			t.Logf("%s: %d tokens, prediction accepted %d rejected %d", name, u.CompletionTokens, u.PredictionAccepted, u.PredictionRejected)
		}
	}
}

// TestPredictionInBatch: a request with a prediction gives its plain output among
// 15 others in the same steps (with and without predictions of their own, greedy
// and sampled, with logprobs, some under a JSON schema), and so do the others.
func TestPredictionInBatch(t *testing.T) {
	b := newStoriesBlock(t, ModelConfig{MaxModelLen: 512, MaxModelConcurrency: 16}, Config{Logger: quietLog()})
	prompt := storiesPrompt(t, b)
	g, err := b.CompileSchema([]byte(personSchema))
	if err != nil {
		t.Fatal(err)
	}
	own := runFeatures(b, "stories", Request{Prompt: prompt, MaxTokens: 150})
	reqs := make([]Request, 16)
	for i := range reqs {
		r := Request{Prompt: prompt[:len(prompt)-i%5], MaxTokens: 40 + 7*i, Tenant: fmt.Sprint("t", i%3),
			Sampling: Sampling{Temperature: float32(i%3) * 0.4, Seed: uint64(i)}, Logprobs: i%2 == 0, TopLogprobs: i % 4}
		switch i % 4 {
		case 0:
			r.Prediction = own.text
		case 1:
			r.Prediction = perturbHalf(own.text)
		case 2:
			r.Prediction = unrelatedText
		}
		if i%5 == 4 {
			r.Grammar = g
		}
		reqs[i] = r
	}
	reqs[0] = Request{Prompt: prompt, MaxTokens: 150, Logprobs: true, TopLogprobs: 3, Prediction: own.text}
	alone := make([]featureResult, len(reqs))
	for i, r := range reqs {
		r.Prediction = ""
		alone[i] = runFeatures(b, "stories", r)
	}
	before := b.Models()[0]
	got := make([]featureResult, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Add(1)
		go func() { defer wg.Done(); got[i] = runFeatures(b, "stories", r) }()
	}
	wg.Wait()
	for i := range reqs {
		if err := alone[i].same(got[i]); err != nil {
			t.Errorf("request %d: %v", i, err)
		}
		if reqs[i].Grammar != nil && got[i].u.DraftTokens != 0 {
			t.Errorf("request %d: drafted %d tokens under a grammar", i, got[i].u.DraftTokens)
		}
	}
	if got[0].u.PredictionAccepted == 0 {
		t.Errorf("the target accepted nothing from its prediction in the batch")
	}
	after := b.Models()[0]
	if steps, seqs := after.Steps-before.Steps, after.StepSeqs-before.StepSeqs; float64(seqs)/float64(steps) < 1.5 {
		t.Errorf("no batching happened: %d steps, %d sequences", steps, seqs)
	}
	if after.PredictionAcceptedTokens == 0 || after.PredictionAcceptedTokens != after.AcceptedTokens {
		t.Errorf("model counters: prediction accepted %d, all accepted %d", after.PredictionAcceptedTokens, after.AcceptedTokens)
	}
}

// TestPredictionChoices: with n = 3 (GenerateN) and a prediction, each choice is
// the plain one, bit for bit.
func TestPredictionChoices(t *testing.T) {
	b := newStoriesBlock(t, ModelConfig{MaxModelLen: 512}, Config{Logger: quietLog()})
	prompt := storiesPrompt(t, b)
	own := runFeatures(b, "stories", Request{Prompt: prompt, MaxTokens: 120})
	run := func(pred string) []featureResult {
		req := Request{Prompt: prompt, MaxTokens: 120, Logprobs: true, TopLogprobs: 2, Prediction: pred,
			Sampling: Sampling{Temperature: 0.6, Seed: 11}}
		ss, err := b.GenerateN(context.Background(), "stories", req, 3)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]featureResult, len(ss))
		for i, s := range ss {
			out[i] = drain(s)
		}
		return out
	}
	want, got := run(""), run(own.text)
	accepted := 0
	for i := range want {
		if err := want[i].same(got[i]); err != nil {
			t.Errorf("choice %d: %v", i, err)
		}
		accepted += got[i].u.PredictionAccepted
	}
	if accepted == 0 {
		t.Fatal("no choice accepted a predicted token")
	}
}

// TestPredictionUnderSchema: a request with a JSON schema and a prediction decodes
// plainly (nothing drafted), its output still valid and plain decoding's, and its
// usage says it had a prediction with nothing accepted or rejected.
func TestPredictionUnderSchema(t *testing.T) {
	b := newStoriesBlock(t, ModelConfig{MaxModelLen: 512}, Config{Logger: quietLog()})
	g, err := b.CompileSchema([]byte(personSchema))
	if err != nil {
		t.Fatal(err)
	}
	prompt := storiesPrompt(t, b)
	req := Request{Prompt: prompt, MaxTokens: 150, Grammar: g, Logprobs: true, Sampling: Sampling{Temperature: 0.8, Seed: 4}}
	want := runFeatures(b, "stories", req)
	req.Prediction = want.text
	got := runFeatures(b, "stories", req)
	if err := want.same(got); err != nil {
		t.Fatal(err)
	}
	validates(t, compileValidator(t, personSchema), got.text)
	if u := got.u; u.DraftTokens != 0 || !u.Predicted || u.PredictionAccepted != 0 || u.PredictionRejected != 0 {
		t.Fatalf("under a schema: drafted %d, predicted %v, accepted %d, rejected %d", u.DraftTokens, u.Predicted, u.PredictionAccepted, u.PredictionRejected)
	}
}

// TestPredictionIgnored: with speculative.ignore_prediction, a prediction drafts
// nothing (and the output is the same).
func TestPredictionIgnored(t *testing.T) {
	b := newStoriesBlock(t, ModelConfig{MaxModelLen: 512, Speculative: spec.Config{IgnorePrediction: true}}, Config{Logger: quietLog()})
	prompt := storiesPrompt(t, b)
	want := runFeatures(b, "stories", Request{Prompt: prompt, MaxTokens: 80})
	got := runFeatures(b, "stories", Request{Prompt: prompt, MaxTokens: 80, Prediction: want.text})
	if err := want.same(got); err != nil {
		t.Fatal(err)
	}
	if got.u.DraftTokens != 0 || !got.u.Predicted {
		t.Fatalf("drafted %d with ignore_prediction (predicted %v)", got.u.DraftTokens, got.u.Predicted)
	}
}

// TestPoolTenantIsolation: with the per-tenant n-gram pool (and no other source), a
// tenant's second request drafts from its first one's output and accepts the drafts
// (the same output as plain decoding), while another tenant's identical request
// drafts nothing from it: one tenant's n-grams never reach another's drafts.
func TestPoolTenantIsolation(t *testing.T) {
	b := newStoriesBlock(t, ModelConfig{MaxModelLen: 512, Speculative: spec.Config{Pool: true}}, Config{Logger: quietLog()})
	prompt := storiesPrompt(t, b)
	req := Request{Prompt: prompt, MaxTokens: 120, Tenant: "a", Logprobs: true}
	plain := req
	plain.NoSpeculation = true
	want := runFeatures(b, "stories", plain) // its output fills a's pool already
	first := runFeatures(b, "stories", req)
	other := req
	other.Tenant = "b"
	b1 := runFeatures(b, "stories", other)
	again := runFeatures(b, "stories", req)
	for name, got := range map[string]featureResult{"a first": first, "b": b1, "a again": again} {
		if err := want.same(got); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if b1.u.DraftTokens != 0 {
		t.Errorf("tenant b drafted %d tokens (from a's pool)", b1.u.DraftTokens)
	}
	if again.u.AcceptedTokens < again.u.CompletionTokens/2 {
		t.Errorf("tenant a's second request accepted %d of %d tokens from its pool", again.u.AcceptedTokens, again.u.CompletionTokens)
	}
	if st := b.Models()[0]; st.PoolAcceptedTokens != uint64(first.u.AcceptedTokens+again.u.AcceptedTokens) {
		t.Errorf("pool counters: accepted %d", st.PoolAcceptedTokens)
	}
	t.Logf("a first: drafted %d; b: drafted %d; a again: drafted %d, accepted %d of %d", first.u.DraftTokens, b1.u.DraftTokens,
		again.u.DraftTokens, again.u.AcceptedTokens, again.u.CompletionTokens)
}

// TestPredictionRejectedBounded: a request's rejected prediction tokens (billed as
// output tokens, as OpenAI bills them) are at most its prediction's tokens, however
// often a short wrong prediction re-aligns with a long output (stories260K, greedy:
// a prediction of one of the output's most frequent bigrams followed by a letter the
// model does not write there), so that the gateway's worst case holds; the output is
// plain decoding's.
func TestPredictionRejectedBounded(t *testing.T) {
	b := newStoriesBlock(t, ModelConfig{MaxModelLen: 512}, Config{Logger: quietLog()})
	tok, err := b.Tokenizer("stories")
	if err != nil {
		t.Fatal(err)
	}
	prompt := storiesPrompt(t, b)
	req := Request{Prompt: prompt, MaxTokens: 440}
	want := runFeatures(b, "stories", req)
	if want.err != nil || len(want.ids) < 300 {
		t.Fatalf("plain output: %v, %d tokens", want.err, len(want.ids))
	}
	count := map[[2]int32]int{}
	for i := 0; i+1 < len(want.ids); i++ {
		count[[2]int32{want.ids[i], want.ids[i+1]}]++
	}
	type bigram struct {
		ids [2]int32
		n   int
	}
	var top []bigram
	for k, n := range count {
		top = append(top, bigram{k, n})
	}
	slices.SortFunc(top, func(a, b bigram) int {
		return cmp.Or(b.n-a.n, cmp.Compare(a.ids[0], b.ids[0]), cmp.Compare(a.ids[1], b.ids[1]))
	})
	reached := false
	for _, bg := range top[:6] {
		pred := tok.Decode(bg.ids[:]) + "Q"
		n := len(tok.Encode(pred, false, false))
		r := req
		r.Prediction = pred
		got := runFeatures(b, "stories", r)
		if err := want.same(got); err != nil {
			t.Fatalf("prediction %q: %v", pred, err)
		}
		t.Logf("prediction %q (%d tokens, its bigram %d times in the output): rejected %d, accepted %d", pred, n, bg.n, got.u.PredictionRejected, got.u.PredictionAccepted)
		if got.u.PredictionRejected > n {
			t.Errorf("prediction %q of %d tokens: %d rejected tokens, over its length", pred, n, got.u.PredictionRejected)
		}
		reached = reached || got.u.PredictionRejected == n
	}
	if !reached {
		t.Errorf("no prediction was rejected up to its length: the bound was never tested")
	}
}
