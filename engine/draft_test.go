package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/engine/model"
	"github.com/lmlite/lmlite/engine/sched"
	"github.com/lmlite/lmlite/engine/spec"
	"github.com/lmlite/lmlite/internal/testenv"
)

// genDraftPair generates a target (random-weight llama tiny, q8_0, seed 3) and two
// draft models with its vocabulary: the same weights (its drafts are the target's
// own greedy tokens) and other weights (qwen3 tiny, f16, seed 8: mostly wrong).
func genDraftPair(t *testing.T) (target, same, other string) {
	t.Helper()
	dir := t.TempDir()
	target, same, other = filepath.Join(dir, "target.gguf"), filepath.Join(dir, "same.gguf"), filepath.Join(dir, "other.gguf")
	for _, g := range []struct {
		path string
		o    genmodel.Options
	}{
		{target, genmodel.Options{Arch: "llama", Preset: "tiny", Type: "q8_0", Seed: 3}},
		{same, genmodel.Options{Arch: "llama", Preset: "tiny", Type: "q8_0", Seed: 3}},
		{other, genmodel.Options{Arch: "qwen3", Preset: "tiny", Type: "f16", Seed: 8}},
	} {
		if err := genmodel.Generate(g.o, g.path); err != nil {
			t.Fatal(err)
		}
	}
	return target, same, other
}

// TestDraftModelSameOutput: with a draft model (random-weight tiny models of one
// vocabulary), the target's output is plain decoding's bit for bit — ids, text,
// logits, logprobs, finish reason — greedy, seeded sampling, with a penalty, a stop
// string, alone and 12 at once in the same steps; a draft model with the target's
// own weights has its greedy drafts accepted, one with other weights has them
// mostly rejected, and the model counters name the source.
func TestDraftModelSameOutput(t *testing.T) {
	target, same, other := genDraftPair(t)
	for _, d := range []struct {
		name, path string
	}{{"same-weights", same}, {"other-weights", other}} {
		t.Run(d.name, func(t *testing.T) {
			b, err := New(Config{Logger: quietLog(), Models: []ModelConfig{
				{ID: "target", Path: target, MaxModelLen: 512, MaxModelConcurrency: 12, Speculative: spec.Config{DraftModel: "draft"}},
				{ID: "draft", Path: d.path, MaxModelLen: 512}}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			tok, err := b.Tokenizer("target")
			if err != nil {
				t.Fatal(err)
			}
			prompt := tok.Encode("The quick brown fox jumps over the lazy dog and then", true, false)
			cases := predictionCases(prompt)
			for _, c := range cases {
				plain := c.req
				plain.NoSpeculation = true
				want := runFeatures(b, "target", plain)
				got := runFeatures(b, "target", c.req)
				if err := want.same(got); err != nil {
					t.Errorf("%s: %v", c.name, err)
					continue
				}
				if got.u.FinishReason != want.u.FinishReason || want.u.DraftTokens != 0 {
					t.Errorf("%s: finish %s / %s, plain drafted %d", c.name, want.u.FinishReason, got.u.FinishReason, want.u.DraftTokens)
				}
				if d.name == "same-weights" && c.name == "greedy" && got.u.AcceptedTokens < got.u.CompletionTokens/2 {
					t.Errorf("%s: the target's own weights drafted, %d of %d tokens accepted (drafted %d)", c.name,
						got.u.AcceptedTokens, got.u.CompletionTokens, got.u.DraftTokens)
				}
				t.Logf("%s: %d tokens, drafted %d, accepted %d", c.name, got.u.CompletionTokens, got.u.DraftTokens, got.u.AcceptedTokens)
			}

			// 12 at once: each as alone and plain.
			reqs := make([]Request, 12)
			for i := range reqs {
				reqs[i] = Request{Prompt: prompt[:len(prompt)-i%4], MaxTokens: 30 + 5*i, Logprobs: i%2 == 0, TopLogprobs: i % 3,
					Sampling: Sampling{Temperature: float32(i%3) * 0.4, Seed: uint64(i)}}
			}
			alone := make([]featureResult, len(reqs))
			for i, r := range reqs {
				r.NoSpeculation = true
				alone[i] = runFeatures(b, "target", r)
			}
			before := b.Models()[0]
			got := make([]featureResult, len(reqs))
			var wg sync.WaitGroup
			for i, r := range reqs {
				wg.Add(1)
				go func() { defer wg.Done(); got[i] = runFeatures(b, "target", r) }()
			}
			wg.Wait()
			for i := range reqs {
				if err := alone[i].same(got[i]); err != nil {
					t.Errorf("batched request %d: %v", i, err)
				}
			}
			after := b.Models()[0]
			if after.DraftModelDraftTokens == before.DraftModelDraftTokens || after.DraftModelDraftTokens != after.DraftTokens {
				t.Errorf("model counters: draft model drafted %d → %d, all drafted %d", before.DraftModelDraftTokens, after.DraftModelDraftTokens, after.DraftTokens)
			}
			t.Logf("model: drafted %d, accepted %d; steps %d, sequences %d", after.DraftTokens, after.AcceptedTokens,
				after.Steps-before.Steps, after.StepSeqs-before.StepSeqs)
		})
	}
}

// TestDraftModelConfig: a draft model must be another configured model with the
// same vocabulary and a context that holds the model's longest sequence and a
// draft; New says which rule a config breaks. A model's memory counts its
// draft model's weights and KV pool.
func TestDraftModelConfig(t *testing.T) {
	target, same, _ := genDraftPair(t)
	stories := testenv.SharedFile(t, "models/stories260K.gguf")
	for _, c := range []struct {
		name   string
		models []ModelConfig
		want   string
	}{
		{"unknown", []ModelConfig{{ID: "target", Path: target, Speculative: spec.Config{DraftModel: "nope"}}},
			`speculative.draft_model "nope" is not a configured model`},
		{"itself", []ModelConfig{{ID: "target", Path: target, Speculative: spec.Config{DraftModel: "target"}}},
			"speculative.draft_model is the model itself"},
		{"other-vocabulary", []ModelConfig{{ID: "target", Path: target, Speculative: spec.Config{DraftModel: "stories"}}, {ID: "stories", Path: stories}},
			"speculative.draft_model stories: the vocabularies differ"},
		{"short-context", []ModelConfig{{ID: "target", Path: target, Speculative: spec.Config{DraftModel: "draft"}}, {ID: "draft", Path: same}},
			"its context length 2048 is below the model's max_model_len 2048 and a draft of 8"},
	} {
		_, err := New(Config{Logger: quietLog(), Models: c.models})
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrConfig saying %q", c.name, err, c.want)
		}
	}
	memory := func(draft string) int64 {
		b, err := New(Config{Logger: quietLog(), Models: []ModelConfig{{ID: "target", Path: target, MaxModelLen: 512, Speculative: spec.Config{DraftModel: draft}}, {ID: "draft", Path: same}}})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if err := b.Load(context.Background(), "target"); err != nil {
			t.Fatal(fmt.Errorf("same vocabulary: %w", err))
		}
		return b.Models()[0].MemoryBytes
	}
	fi, err := os.Stat(same)
	if err != nil {
		t.Fatal(err)
	}
	if with, without := memory("draft"), memory(""); with-without <= fi.Size() {
		t.Errorf("memory with a draft model %d, without %d: want more than its file's %d bytes more", with, without, fi.Size())
	}
}

// TestDraftModelChunkedPrefill: a sequence the draft model has not seen catches up
// with its prompt at most chunk tokens per draft run, all sequences together (the
// target's prefill chunking), drafting nothing until it has: one long prompt never
// makes one long draft step. Once caught up, each sequence's drafts are those of
// a drafter that took its prompt whole (the kernels give a token the same bits
// whatever the chunk). Before the drafter chunked, the first run computed all 50
// prompt tokens and drafted at once.
func TestDraftModelChunkedPrefill(t *testing.T) {
	target, same, _ := genDraftPair(t)
	models := []ModelConfig{
		{ID: "target", Path: target, MaxModelLen: 512, MaxModelConcurrency: 2, Speculative: spec.Config{DraftModel: "draft"}},
		{ID: "draft", Path: same, MaxModelLen: 512}}
	f, err := gguf.Open(target)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, _, err := readMeta(f, "target")
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	dc, err := newDraftConfig(models, models[0], tok)
	if err != nil {
		t.Fatal(err)
	}
	long := tok.Encode(strings.Repeat("The quick brown fox jumps over the lazy dog. ", 4), true, false)
	short := long[:10]
	if len(long) < 33 {
		t.Fatalf("the long prompt has %d tokens, want more than two chunks", len(long))
	}
	const want, chunk = 4, 16
	// run drafts for both sequences until both have drafted (at most 10 runs),
	// checking each run's progress; it returns their drafts and the runs taken.
	run := func(chunk int) (drafts [2][]int32, runs int) {
		d, err := newDrafter(dc, chunk)
		if err != nil {
			t.Fatal(err)
		}
		defer d.close()
		jobs := [2]*job{{tokens: long}, {tokens: short}}
		seen := [2]int{}
		for runs = 1; runs <= 10; runs++ {
			for i, j := range jobs {
				j.draft = j.draft[:0]
				d.ask(sched.ID(i+1), j, want)
			}
			set := map[sched.ID]int{}
			d.draft(func(id sched.ID, n int) { set[id] = n })
			computed := 0
			for i, j := range jobs {
				s := d.seqs[sched.ID(i+1)]
				now := commonPrefix(s.toks, j.tokens)
				if now > seen[i] {
					computed += now - seen[i]
				}
				seen[i] = now
				if set[sched.ID(i+1)] != len(j.draft) {
					t.Errorf("chunk %d, run %d, sequence %d: told the scheduler %d drafts, has %d", chunk, runs, i, set[sched.ID(i+1)], len(j.draft))
				}
				if now < len(j.tokens) && len(j.draft) > 0 {
					t.Errorf("chunk %d, run %d, sequence %d: drafted with %d of its %d tokens computed", chunk, runs, i, now, len(j.tokens))
				}
			}
			if computed > chunk {
				t.Errorf("chunk %d, run %d: the first step computed %d new prompt tokens", chunk, runs, computed)
			}
			if len(jobs[0].draft) == want && len(jobs[1].draft) == want {
				return [2][]int32{jobs[0].draft, jobs[1].draft}, runs
			}
		}
		t.Fatalf("chunk %d: the sequences drafted %d and %d tokens after 10 runs", chunk, len(jobs[0].draft), len(jobs[1].draft))
		return
	}
	whole, wholeRuns := run(1000)
	chunked, chunkedRuns := run(chunk)
	if wholeRuns != 1 || chunkedRuns < (len(long)+len(short)+chunk-1)/chunk {
		t.Errorf("runs until both drafted: %d with the prompts whole, %d in chunks of %d (prompts of %d and %d tokens)", wholeRuns, chunkedRuns, chunk, len(long), len(short))
	}
	for i := range whole {
		if !slices.Equal(whole[i], chunked[i]) {
			t.Errorf("sequence %d: drafts %v after a chunked catch-up, %v with the prompt whole", i, chunked[i], whole[i])
		}
	}
	t.Logf("prompts of %d and %d tokens: %d runs in chunks of %d; drafts %v", len(long), len(short), chunkedRuns, chunk, chunked)
}

// TestDraftModelChoicesAndCacheHit: with a draft model (the target's own weights,
// so drafts are accepted), n = 3 seeded choices decoded together are the choices
// decoded plainly, each alone (its ChoiceSeed), ids, logits and logprobs; and a
// request whose prompt the prefix cache holds (a hit on a speculating request's
// own blocks, output included: the draft model has not seen it, and catches up)
// continues as plain decoding does without the cache. Both turns' prompts are of
// model.AttnF32MinPrompt tokens or more, one attention mode on every CPU: a turn
// that crosses that length is cached apart and misses once (README, cacheSalt).
func TestDraftModelChoicesAndCacheHit(t *testing.T) {
	target, same, _ := genDraftPair(t)
	b, err := New(Config{Logger: quietLog(), Models: []ModelConfig{
		{ID: "target", Path: target, MaxModelLen: 512, MaxModelConcurrency: 4, Speculative: spec.Config{DraftModel: "draft"}},
		{ID: "draft", Path: same, MaxModelLen: 512}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	tok, err := b.Tokenizer("target")
	if err != nil {
		t.Fatal(err)
	}
	prompt := tok.Encode("The quick brown fox jumps over the lazy dog and then", true, false)

	req := Request{Prompt: prompt, MaxTokens: 80, Logprobs: true, TopLogprobs: 2, Sampling: Sampling{Temperature: 0.7, Seed: 21, IgnoreEOS: true}, CacheSalt: "n"}
	streams, err := b.GenerateN(context.Background(), "target", req, 3)
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
	drafted := 0
	for i := range got {
		alone := req
		alone.Sampling.Seed = ChoiceSeed(req.Sampling.Seed, i)
		alone.CacheSalt, alone.NoSpeculation = "alone", true
		if err := runFeatures(b, "target", alone).same(got[i]); err != nil {
			t.Errorf("choice %d: %v", i, err)
		}
		drafted += got[i].u.DraftTokens
	}
	if drafted == 0 {
		t.Error("n = 3: no choice drafted")
	}

	turn := slices.Clone(prompt)
	for len(turn) < model.AttnF32MinPrompt {
		turn = append(turn, prompt[1:]...) // the sentence again, without the BOS
	}
	first := Request{Prompt: turn, MaxTokens: 150, Logprobs: true, Sampling: Sampling{IgnoreEOS: true}, CacheSalt: "spec"}
	out := runFeatures(b, "target", first)
	if out.err != nil {
		t.Fatal(out.err)
	}
	long := Request{Prompt: append(slices.Clone(turn), out.ids...), MaxTokens: 60, Logprobs: true, TopLogprobs: 3,
		Sampling: Sampling{IgnoreEOS: true}, CacheSalt: "spec"}
	hit := runFeatures(b, "target", long)
	long.NoSpeculation, long.CacheSalt = true, "plain"
	cold := runFeatures(b, "target", long)
	if err := cold.same(hit); err != nil {
		t.Fatalf("after a cache hit: %v", err)
	}
	if hit.u.CachedTokens <= len(turn) || cold.u.CachedTokens != 0 || hit.u.AcceptedTokens == 0 {
		t.Fatalf("cached %d (speculating; the first turn's prompt: %d), %d (plain); drafted %d, accepted %d", hit.u.CachedTokens, len(turn), cold.u.CachedTokens, hit.u.DraftTokens, hit.u.AcceptedTokens)
	}
	t.Logf("n = 3: drafted %d; after a hit on %d cached tokens: drafted %d, accepted %d", drafted, hit.u.CachedTokens, hit.u.DraftTokens, hit.u.AcceptedTokens)
}

// TestDraftModelFollowUpHitsEveryBlock: a conversation's next turn (the prompt and
// output of a speculating turn that has returned) finds every full block of the
// turn's computed tokens in the prefix cache, as after plain decoding, whichever
// verification step ended the turn (max tokens over a range of 16, one per
// position in a block).
func TestDraftModelFollowUpHitsEveryBlock(t *testing.T) {
	target, same, _ := genDraftPair(t)
	b, err := New(Config{Logger: quietLog(), Models: []ModelConfig{
		{ID: "target", Path: target, MaxModelLen: 512, Speculative: spec.Config{DraftModel: "draft"}},
		{ID: "draft", Path: same, MaxModelLen: 512}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	tok, err := b.Tokenizer("target")
	if err != nil {
		t.Fatal(err)
	}
	sentence := tok.Encode("The quick brown fox jumps over the lazy dog and then", true, false)
	turn := slices.Clone(sentence)
	for len(turn) < model.AttnF32MinPrompt { // one attention mode for both turns
		turn = append(turn, sentence[1:]...)
	}
	for maxTok := 40; maxTok < 40+kvBlockTokens; maxTok++ {
		salt := fmt.Sprint("turns-", maxTok)
		first := runFeatures(b, "target", Request{Prompt: turn, MaxTokens: maxTok, Sampling: Sampling{IgnoreEOS: true}, CacheSalt: salt})
		if first.err != nil {
			t.Fatal(first.err)
		}
		next := runFeatures(b, "target", Request{Prompt: append(slices.Clone(turn), first.ids...), MaxTokens: 1, CacheSalt: salt, NoSpeculation: true})
		if next.err != nil {
			t.Fatal(next.err)
		}
		// The first turn computed every token but its last one.
		if want := (len(turn) + maxTok - 1) / kvBlockTokens * kvBlockTokens; next.u.CachedTokens != want || first.u.AcceptedTokens == 0 {
			t.Errorf("max tokens %d: the next turn's prompt of %d tokens found %d cached, want %d (drafted %d, accepted %d)",
				maxTok, len(turn)+len(first.ids), next.u.CachedTokens, want, first.u.DraftTokens, first.u.AcceptedTokens)
		}
	}
}
