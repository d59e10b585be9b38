package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/engine/grammar"
	"github.com/lmlite/lmlite/engine/sample"
	"github.com/lmlite/lmlite/internal/testenv"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

const personSchema = `{"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer"},"pets":{"type":"array","items":{"enum":["cat","dog","fish"]},"maxItems":3},"home":{"anyOf":[{"type":"string","format":"date"},{"type":"null"}]}},"required":["name","age","pets","home"],"additionalProperties":false}`

// featureResult is all of a stream, bits included.
type featureResult struct {
	text  string
	ids   []int32
	bits  []uint32 // logits, logprobs and top logprobs' bits, in order
	u     Usage
	err   error
	pairs []string // id:logprob of each step's top logprobs
}

func runFeatures(b *Block, model string, req Request) featureResult {
	s, err := b.Generate(context.Background(), model, req)
	if err != nil {
		return featureResult{err: err}
	}
	var r featureResult
	var text strings.Builder
	for tok := range s.Tokens {
		text.WriteString(tok.Text)
		if tok.ID < 0 {
			continue
		}
		r.ids = append(r.ids, tok.ID)
		r.bits = append(r.bits, math.Float32bits(tok.Logit), math.Float32bits(tok.Logprob))
		for _, t := range tok.TopLogprobs {
			r.bits = append(r.bits, uint32(t.ID), math.Float32bits(t.Logprob))
			r.pairs = append(r.pairs, fmt.Sprintf("%d:%.3f", t.ID, t.Logprob))
		}
	}
	r.text = text.String()
	r.u, r.err = s.Wait(context.Background())
	return r
}

func (r featureResult) same(o featureResult) error {
	if r.err != nil || o.err != nil {
		return fmt.Errorf("errors %v, %v", r.err, o.err)
	}
	if r.text != o.text || fmt.Sprint(r.ids) != fmt.Sprint(o.ids) || fmt.Sprint(r.bits) != fmt.Sprint(o.bits) {
		return fmt.Errorf("differs:\n%q\n%q", r.text, o.text)
	}
	return nil
}

func compileValidator(t *testing.T, schema string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("s.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("s.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func validates(t *testing.T, v *jsonschema.Schema, out string) {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(out))
	if err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if err := v.Validate(inst); err != nil {
		t.Fatalf("output does not validate: %v\n%s", err, out)
	}
}

// TestStructuredOutputStories: a real model (stories260K, a TinyStories model that has
// never seen JSON) sampled at temperature 1 under a JSON schema writes output that
// parses and validates, for many seeds, and stops by itself when the JSON closes.
func TestStructuredOutputStories(t *testing.T) {
	b := newStoriesBlock(t, ModelConfig{MaxModelConcurrency: 8}, Config{Logger: quietLog()})
	g, err := b.CompileSchema([]byte(personSchema))
	if err != nil {
		t.Fatal(err)
	}
	if g2, _ := b.CompileSchema([]byte(personSchema)); g2 != g {
		t.Errorf("the same schema compiled twice")
	}
	v := compileValidator(t, personSchema)
	prompt, _ := b.Tokenize("stories", "Once upon a time, a girl named Lily")
	var wg sync.WaitGroup
	for seed := range uint64(12) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := runFeatures(b, "stories", Request{Prompt: prompt, MaxTokens: 300, Grammar: g,
				Sampling: Sampling{Temperature: 1, Seed: seed}})
			if r.err != nil {
				t.Errorf("seed %d: %v", seed, r.err)
				return
			}
			if r.u.FinishReason != FinishStop {
				t.Errorf("seed %d: finish %q after %d tokens: %s", seed, r.u.FinishReason, r.u.CompletionTokens, r.text)
				return
			}
			validates(t, v, r.text)
		}()
	}
	wg.Wait()
	// json_object: any object.
	r := runFeatures(b, "stories", Request{Prompt: prompt, MaxTokens: 200, Grammar: grammar.JSONObject(),
		Sampling: Sampling{Temperature: 0.7, Seed: 3}})
	if r.err != nil {
		t.Fatal(r.err)
	}
	var obj map[string]any
	if r.u.FinishReason == FinishStop && json.Unmarshal([]byte(r.text), &obj) != nil {
		t.Errorf("json_object output is not an object: %s", r.text)
	}
	if !strings.HasPrefix(r.text, "{") {
		t.Errorf("json_object output does not start an object: %q", r.text)
	}
}

// TestFeaturesDeterminism: a request with a grammar, logprobs and top logprobs gives
// the same bits (text, ids, logits, logprobs, top logprobs) alone and among 15 other
// requests, some constrained by other grammars, some free.
func TestFeaturesDeterminism(t *testing.T) {
	b := genBlock(t, ModelConfig{MaxModelConcurrency: 16, MaxModelLen: 512},
		genmodel.Options{Arch: "llama", Type: "q8_0", Seed: 5})
	tok, _ := b.Tokenizer("m")
	g, err := b.CompileSchema([]byte(personSchema))
	if err != nil {
		t.Fatal(err)
	}
	other, err := b.CompileSchema([]byte(`{"type":"array","items":{"type":"number"}}`))
	if err != nil {
		t.Fatal(err)
	}
	prompt := make([]int32, 30)
	for i := range prompt {
		prompt[i] = int32((i*7919 + 5) % tok.VocabSize())
	}
	target := Request{Prompt: prompt, MaxTokens: 120, Grammar: g, Logprobs: true, TopLogprobs: 5,
		Sampling: Sampling{Temperature: 0.8, TopK: 50, Seed: 99}, CacheSalt: "alone"}
	alone := runFeatures(b, "m", target)
	if alone.err != nil || len(alone.ids) == 0 {
		t.Fatalf("alone: %v, %d tokens", alone.err, len(alone.ids))
	}
	if alone.u.FinishReason == FinishStop {
		validates(t, compileValidator(t, personSchema), alone.text)
	}
	for round := range 2 {
		var wg sync.WaitGroup
		var got featureResult
		for i := range 15 {
			req := Request{Prompt: prompt[:5+i], MaxTokens: 20 + 7*i, Tenant: fmt.Sprint("t", i%3),
				Sampling: Sampling{Temperature: float32(i%3) * 0.5, Seed: uint64(i)}, Logprobs: i%2 == 0, TopLogprobs: i % 4}
			switch i % 3 {
			case 0:
				req.Grammar = other
			case 1:
				req.Grammar = g
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if r := runFeatures(b, "m", req); r.err != nil {
					t.Errorf("other %d: %v", i, r.err)
				}
			}()
			if i == 4+round {
				wg.Add(1)
				go func() {
					defer wg.Done()
					tr := target
					tr.CacheSalt = fmt.Sprint("round", round)
					got = runFeatures(b, "m", tr)
				}()
			}
		}
		wg.Wait()
		if err := alone.same(got); err != nil {
			t.Errorf("round %d: %v", round, err)
		}
	}
	// Over one sequence per step on average (1.5: a loaded machine gives ~2).
	if st := b.Models()[0]; float64(st.StepSeqs)/float64(st.Steps) < 1.5 {
		t.Errorf("no batching happened: %d steps, %d sequences", st.Steps, st.StepSeqs)
	}
}

// TestLogprobs: the logprobs are the model's distribution before sampling: under
// greedy decoding the chosen token is the top one, the top list is sorted and its
// probabilities sum to at most 1; with a repetition penalty and a high temperature
// the logprobs of the same tokens do not change (they precede penalties).
func TestLogprobs(t *testing.T) {
	b := newStoriesBlock(t, ModelConfig{}, Config{Logger: quietLog()})
	prompt, _ := b.Tokenize("stories", "Once upon a time")
	r := runFeatures(b, "stories", Request{Prompt: prompt, MaxTokens: 20, Logprobs: true, TopLogprobs: 20})
	if r.err != nil {
		t.Fatal(r.err)
	}
	s, err := b.Generate(context.Background(), "stories", Request{Prompt: prompt, MaxTokens: 20, Logprobs: true, TopLogprobs: 20})
	if err != nil {
		t.Fatal(err)
	}
	steps := 0
	for tok := range s.Tokens {
		if tok.ID < 0 {
			continue
		}
		steps++
		if len(tok.TopLogprobs) != 20 {
			t.Fatalf("%d top logprobs, want 20", len(tok.TopLogprobs))
		}
		if tok.TopLogprobs[0].ID != tok.ID || tok.TopLogprobs[0].Logprob != tok.Logprob {
			t.Errorf("greedy token %d (%v) is not the top one %+v", tok.ID, tok.Logprob, tok.TopLogprobs[0])
		}
		sum := 0.0
		for i, x := range tok.TopLogprobs {
			if x.Logprob > 0 || i > 0 && x.Logprob > tok.TopLogprobs[i-1].Logprob {
				t.Errorf("top logprobs out of order or positive: %+v", tok.TopLogprobs)
			}
			sum += math.Exp(float64(x.Logprob))
		}
		if sum > 1.0001 || sum < 0.2 {
			t.Errorf("top 20 probabilities sum to %v", sum)
		}
		if tok.Piece == "" {
			t.Errorf("token %d has no piece", tok.ID)
		}
	}
	s.Wait(context.Background())
	if steps == 0 {
		t.Fatal("no tokens")
	}
	// Penalized and hot: the same positions' distributions are the model's.
	p := runFeatures(b, "stories", Request{Prompt: prompt, MaxTokens: 1, Logprobs: true, TopLogprobs: 3,
		Sampling: Sampling{Temperature: 1.7, RepeatPenalty: 1.5, PresencePenalty: 1, Seed: 4}})
	if p.err != nil || len(p.pairs) != 3 || strings.Join(p.pairs, " ") != strings.Join(r.pairs[:3], " ") {
		t.Errorf("first step's top logprobs with penalties %v, without %v (%v)", p.pairs, r.pairs[:3], p.err)
	}
	if _, err := b.Generate(context.Background(), "stories", Request{Prompt: prompt, TopLogprobs: 21}); err == nil {
		t.Errorf("top logprobs 21 accepted")
	}
}

// TestIgnoreEOS: the step's pick never takes an end-of-generation token under
// ignore_eos, even when the model puts it first; without, greedy takes it. (The
// shared models never end by themselves: stories260K separates stories with BOS.)
func TestIgnoreEOS(t *testing.T) {
	vi := &vocabInfo{pieces: []string{"a", "b", "", "c"}, eog: []int32{2}}
	for _, ignore := range []bool{false, true} {
		j := &job{vocab: vi, req: Request{Sampling: Sampling{IgnoreEOS: ignore}, Logprobs: true},
			smp: sample.New(sample.Params{})}
		row := []float32{1, 3, 9, 2}
		id, err := j.pick(row)
		if err != nil {
			t.Fatal(err)
		}
		want := int32(2)
		if ignore {
			want = 1
		}
		if id != want {
			t.Errorf("ignore_eos %v: picked %d, want %d", ignore, id, want)
		}
		// The logprob is the model's, with EOS still in the distribution.
		lse := math.Log(math.Exp(1) + math.Exp(3) + math.Exp(9) + math.Exp(2))
		if wantLP := float32(float64([]float32{1, 3, 9, 2}[want]) - lse); math.Abs(float64(j.lp.Logprob-wantLP)) > 1e-5 {
			t.Errorf("ignore_eos %v: logprob %v, want %v", ignore, j.lp.Logprob, wantLP)
		}
	}
}

// promptTokens drains a PromptLogprobs stream: its prompt tokens (with their bits)
// and the output's.
func promptTokens(t *testing.T, b *Block, model string, req Request) (prompt []Token, bits []uint32, out featureResult) {
	t.Helper()
	s, err := b.Generate(context.Background(), model, req)
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for tok := range s.Tokens {
		if tok.Prompt {
			if len(out.ids) > 0 {
				t.Fatalf("prompt token %d after output tokens", tok.ID)
			}
			prompt = append(prompt, tok)
			bits = append(bits, uint32(tok.ID), math.Float32bits(tok.Logprob))
			for _, tl := range tok.TopLogprobs {
				bits = append(bits, uint32(tl.ID), math.Float32bits(tl.Logprob))
			}
			continue
		}
		text.WriteString(tok.Text)
		if tok.ID >= 0 {
			out.ids = append(out.ids, tok.ID)
		}
	}
	out.text = text.String()
	out.u, out.err = s.Wait(context.Background())
	if out.err != nil {
		t.Fatal(out.err)
	}
	return prompt, bits, out
}

// TestPromptLogprobs: with PromptLogprobs the stream starts with one token per prompt
// token, the first without a logprob, each other's distribution the one the model
// gives at the position before it: bit for bit the first output step of a request
// whose prompt ends there (an independent path: a decode's row, not a prefill
// chunk's). The prompt here is longer than one chunk (a 32,000-token vocabulary cuts
// chunks to 131 rows), some of it is in the prefix cache, and the same bits come
// alone and among 15 other requests; the output is the request's without it.
func TestPromptLogprobs(t *testing.T) {
	// Every prompt in float32 attention (threshold 1): the references below decode
	// short prefixes, which the default threshold would run in binary16 mode while
	// the 300-token prompt runs in float32; in one mode the rows must agree bit for bit.
	b := genBlock(t, ModelConfig{MaxModelConcurrency: 16, MaxModelLen: 512, AttnF32MinPrompt: 1},
		genmodel.Options{Arch: "llama", Type: "q8_0", Seed: 8, Vocab: testenv.SharedFile(t, "testdata/tokenizer/ggml-vocab-llama-spm.gguf")})
	tok, _ := b.Tokenizer("m")
	if c := promptLogitsBytes / (4 * tok.VocabSize()); c != 131 {
		t.Fatalf("chunk of %d rows, the test wants 131", c)
	}
	prompt := make([]int32, 300)
	for i := range prompt {
		prompt[i] = int32((i*7919 + 5) % tok.VocabSize())
	}
	// The first 200 tokens cached: prompt logprobs must compute them anyway.
	runFeatures(b, "m", Request{Prompt: prompt[:200], MaxTokens: 1})
	req := Request{Prompt: prompt, MaxTokens: 12, PromptLogprobs: true, Logprobs: true, TopLogprobs: 4,
		Sampling: Sampling{Temperature: 0.9, Seed: 3}}
	ptoks, alone, out := promptTokens(t, b, "m", req)
	if len(ptoks) != len(prompt) {
		t.Fatalf("%d prompt tokens, want %d", len(ptoks), len(prompt))
	}
	if out.u.CachedTokens != 0 || out.u.PromptTokens != len(prompt) || out.u.CompletionTokens != len(out.ids) {
		t.Errorf("usage %+v", out.u)
	}
	plain := runFeatures(b, "m", Request{Prompt: prompt, MaxTokens: 12, Sampling: req.Sampling})
	if plain.text != out.text || fmt.Sprint(plain.ids) != fmt.Sprint(out.ids) {
		t.Errorf("output with prompt logprobs %v, without %v", out.ids, plain.ids)
	}
	if p := ptoks[0]; p.ID != prompt[0] || p.Logprob != 0 || p.TopLogprobs != nil {
		t.Errorf("first prompt token %+v has a logprob", p)
	}
	for _, p := range []int{1, 2, 130, 131, 132, 199, 200, 262, 299} {
		got := ptoks[p]
		if got.ID != prompt[p] || !got.Prompt || got.Piece != tok.Piece(prompt[p]) || len(got.TopLogprobs) != 4 {
			t.Fatalf("prompt token %d: %+v", p, got)
		}
		rs, err := b.Generate(context.Background(), "m", Request{Prompt: prompt[:p], MaxTokens: 1, Logprobs: true, TopLogprobs: 20})
		if err != nil {
			t.Fatal(err)
		}
		var ref []TopLogprob
		for tk := range rs.Tokens {
			if tk.ID >= 0 && ref == nil {
				ref = tk.TopLogprobs
			}
		}
		rs.Wait(context.Background())
		if fmt.Sprint(got.TopLogprobs) != fmt.Sprint(ref[:4]) {
			t.Errorf("position %d: top logprobs %v, a decode at that position %v", p, got.TopLogprobs, ref[:4])
		}
		if got.Logprob > ref[0].Logprob || math.IsInf(float64(got.Logprob), 0) {
			t.Errorf("position %d: logprob %v, the most likely token's %v", p, got.Logprob, ref[0].Logprob)
		}
		for _, tl := range ref {
			if tl.ID == got.ID && tl.Logprob != got.Logprob {
				t.Errorf("position %d: logprob %v, a decode at that position %v", p, got.Logprob, tl.Logprob)
			}
		}
	}
	// Among others (some asking for prompt logprobs too), the same bits.
	var wg sync.WaitGroup
	var among []uint32
	for i := range 15 {
		r := Request{Prompt: prompt[i : 40+9*i], MaxTokens: 5 + i, Tenant: fmt.Sprint("t", i%3), PromptLogprobs: i%3 == 0,
			Logprobs: i%2 == 0, TopLogprobs: i % 4, Sampling: Sampling{Temperature: 0.7, Seed: uint64(i)}}
		wg.Add(1)
		go func() { defer wg.Done(); promptTokens(t, b, "m", r) }()
		if i == 6 {
			wg.Add(1)
			go func() { defer wg.Done(); _, among, _ = promptTokens(t, b, "m", req) }()
		}
	}
	wg.Wait()
	if fmt.Sprint(among) != fmt.Sprint(alone) {
		t.Errorf("prompt logprobs differ among other requests")
	}
}

// TestPromptOnly: a PromptOnly request takes no output token and ends with
// FinishLength after its prefill; with PromptLogprobs its prompt tokens are the
// same bits as those of a request that goes on generating, alone and among others
// (some of them PromptOnly too), long prompts in several chunks included.
func TestPromptOnly(t *testing.T) {
	b := genBlock(t, ModelConfig{MaxModelConcurrency: 8, MaxModelLen: 512},
		genmodel.Options{Arch: "llama", Type: "q8_0", Seed: 8, Vocab: testenv.SharedFile(t, "testdata/tokenizer/ggml-vocab-llama-spm.gguf")})
	tok, _ := b.Tokenizer("m")
	prompt := make([]int32, 300) // 131 rows a chunk: three prefill chunks
	for i := range prompt {
		prompt[i] = int32((i*7919 + 5) % tok.VocabSize())
	}
	score := Request{Prompt: prompt, PromptOnly: true, PromptLogprobs: true, TopLogprobs: 3}
	ptoks, bits, out := promptTokens(t, b, "m", score)
	if len(ptoks) != len(prompt) || len(out.ids) != 0 || out.text != "" {
		t.Fatalf("%d prompt tokens (want %d), output %v %q", len(ptoks), len(prompt), out.ids, out.text)
	}
	if out.u.CompletionTokens != 0 || out.u.PromptTokens != len(prompt) || out.u.FinishReason != FinishLength {
		t.Errorf("usage %+v", out.u)
	}
	_, ref, gen := promptTokens(t, b, "m", Request{Prompt: prompt, MaxTokens: 3, PromptLogprobs: true, TopLogprobs: 3})
	if len(gen.ids) == 0 || fmt.Sprint(bits) != fmt.Sprint(ref) {
		t.Errorf("prompt logprobs of a prompt-only request differ from a generating one's (%d output tokens)", len(gen.ids))
	}
	// Without prompt logprobs: nothing comes, it just ends.
	plain := runFeatures(b, "m", Request{Prompt: prompt[:20], PromptOnly: true, MaxTokens: 7})
	if plain.err != nil || len(plain.ids) != 0 || plain.u.FinishReason != FinishLength || plain.u.CompletionTokens != 0 {
		t.Errorf("prompt only without logprobs: %+v", plain)
	}
	var wg sync.WaitGroup
	var among []uint32
	for i := range 10 {
		r := Request{Prompt: prompt[i : 30+20*i], MaxTokens: 4, PromptOnly: i%2 == 0, PromptLogprobs: i%3 == 0,
			Sampling: Sampling{Temperature: 0.7, Seed: uint64(i)}}
		wg.Go(func() {
			_, _, o := promptTokens(t, b, "m", r)
			if r.PromptOnly && (len(o.ids) != 0 || o.u.FinishReason != FinishLength) || !r.PromptOnly && len(o.ids) == 0 {
				t.Errorf("request %d (prompt only %v): %d output tokens, finish %q", i, r.PromptOnly, len(o.ids), o.u.FinishReason)
			}
		})
		if i == 4 {
			wg.Go(func() { _, among, _ = promptTokens(t, b, "m", score) })
		}
	}
	wg.Wait()
	if fmt.Sprint(among) != fmt.Sprint(bits) {
		t.Errorf("prompt-only logprobs differ among other requests")
	}
}
