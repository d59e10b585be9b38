package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lmlite/lmlite/engine/sample"
	"github.com/lmlite/lmlite/engine/spec"
)

// This file is a request's way in: Generate sends the janitor a begin (janitor.go)
// and gets the loaded model's replicas or a load to wait for, await waits for that
// load (on a cold start only), pick chooses a replica, and the runner (runner.go)
// writes the request's tokens into its Stream, which the consumer reads: one
// hand-off per token. The request's end goes back to the janitor.

// Generate starts a request. Requests that can never run (unknown model, empty
// prompt, longer than MaxModelLen) and requests beyond the queue limit fail at once;
// the others stream their tokens and end with a Usage.
func (b *Block) Generate(ctx context.Context, modelID string, req Request) (*Stream, error) {
	out := NewStream()
	if err := b.generate(ctx, modelID, req, out); err != nil {
		return nil, err
	}
	return out, nil
}

// generate is Generate into a Stream the caller made.
func (b *Block) generate(ctx context.Context, modelID string, req Request, out *Stream) error {
	in, ok := b.models[modelID]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownModel, modelID)
	}
	limit := in.cfg.MaxModelLen
	if len(req.Prompt) == 0 {
		return fmt.Errorf("engine: empty prompt (give at least BOS)")
	}
	for _, id := range req.Prompt {
		if id < 0 || int(id) >= in.tok.VocabSize() {
			return fmt.Errorf("engine: prompt token %d is outside the vocabulary of %d", id, in.tok.VocabSize())
		}
	}
	if req.KeepAlive < 0 {
		return fmt.Errorf("engine: keep alive %v is negative", req.KeepAlive)
	}
	if req.MaxTokens < 0 {
		return fmt.Errorf("engine: max tokens %d is negative", req.MaxTokens)
	}
	if err := checkFeatures(&req); err != nil {
		return err
	}
	if err := in.saltAdapters(&req); err != nil {
		return err
	}
	if len(req.Prompt) >= limit || len(req.Prompt)+req.MaxTokens > limit {
		return fmt.Errorf("%w: %d prompt tokens + %d max tokens > max_model_len %d of model %s",
			ErrTooLong, len(req.Prompt), req.MaxTokens, limit, modelID)
	}
	g := b.begin(in, 1, false)
	if g.err != nil {
		return g.err
	}
	j := in.newJob(ctx, req, out)
	j.finish = func(u Usage, err error) {
		if err == nil && u.FinishReason == "" {
			u.FinishReason = FinishCancelled
		}
		if j.loras != nil {
			in.releaseAdapters(req.Adapters, b.now())
		}
		b.end(endMsg{in: in, n: 1, now: b.now(), keep: req.KeepAlive, setKeep: true})
		out.Finish(u, err)
	}
	if g.h != nil {
		in.submit(req, j, g.h)
		return nil
	}
	// A cold start: this goroutine waits for the load and hands the request over;
	// the tokens still go from the runner to out directly.
	go func() {
		h, cold, err := await(ctx, g.la)
		j.u.ColdStart = cold
		if err != nil {
			u := j.u
			err = finishErr(&u, err)
			j.finish(u, err)
			return
		}
		in.submit(req, j, h)
	}()
	return nil
}

// await waits for a load the janitor granted (begin) and returns the loaded model
// and how long it waited (the cold start). One wait is enough: the janitor finishes
// an attempt only once the model is ready or with an error, and a model with
// requests in flight is not unloaded. (Load counts no request: the model was ready
// when it returns.)
func await(ctx context.Context, la *loadAttempt) (*replicaSet, time.Duration, error) {
	start := time.Now() // a Usage timing: real time (Config.Clock is the lifecycle's)
	select {
	case <-la.done:
		if la.err != nil {
			return nil, 0, la.err
		}
		return la.h, time.Since(start), nil
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
}

// newJob prepares a request for a runner: its sampler, decoder and stop matcher.
func (in *instance) newJob(ctx context.Context, req Request, out *Stream) *job {
	maxTokens := req.MaxTokens
	switch {
	case req.PromptOnly:
		maxTokens = 1 // the scheduler's room for the step that ends it; no token is taken
	case maxTokens == 0:
		maxTokens = in.cfg.MaxModelLen - len(req.Prompt)
	}
	s := req.Sampling
	j := &job{ctx: ctx, req: req, start: time.Now(), max: maxTokens, out: out, u: Usage{PromptTokens: len(req.Prompt)},
		tokens: append(make([]int32, 0, len(req.Prompt)+maxTokens), req.Prompt...),
		smp: sample.New(sample.Params{Temperature: s.Temperature, TopK: s.TopK, TopP: s.TopP, MinP: s.MinP,
			RepeatPenalty: s.RepeatPenalty, PresencePenalty: s.PresencePenalty, FrequencyPenalty: s.FrequencyPenalty,
			RepeatLastN: s.RepeatLastN, Seed: s.Seed, LogitBias: s.LogitBias}),
		dec:  in.tok.NewDecoder(),
		stop: sample.NewStopMatcher(req.Stop)}
	if req.Grammar != nil || req.Logprobs || req.TopLogprobs > 0 || req.PromptLogprobs || s.IgnoreEOS {
		j.vocab = in.vocab.get(in.tok)
		if req.Grammar != nil {
			j.gm = j.vocab.vocab.NewMatcher(req.Grammar)
			j.mask.maskLimit = grammarLimit(in.cfg.GrammarMaskSteps, DefaultGrammarMaskSteps)
			j.mask.requestLimit = grammarLimit(in.cfg.GrammarRequestSteps, DefaultGrammarRequestSteps)
		}
		j.top = make([]sample.Logprob, req.TopLogprobs)
	}
	if req.PromptLogprobs {
		j.pdec = in.tok.NewDecoder()
		j.chunk = max(1, promptLogitsBytes/(4*in.tok.VocabSize()))
	}
	j.dec.Prime(req.Prompt)
	if req.Prediction != "" {
		j.u.Predicted = true
		if !in.cfg.Speculative.IgnorePrediction {
			j.pred = spec.NewPredicted(in.tok.Encode(req.Prediction, false, false)) // plain text: never control tokens
		}
	}
	return j
}

// promptLogitsBytes bounds the logits rows of one prefill chunk of a request with
// Request.PromptLogprobs (each of its positions is a row of the vocabulary's size):
// its chunks are cut to fit, so a long prompt never needs more.
const promptLogitsBytes = 16 << 20

// pick chooses the replica for a request: the one whose prefix cache holds the
// longest part of its prompt; ties (no hit anywhere, the usual case) go round-robin,
// or to the replica of the request's Affinity when it has one.
func (in *instance) pick(req Request, h *replicaSet) *runner {
	reps := h.reps
	var rr int
	if req.Affinity != 0 {
		rr = int(req.Affinity % uint64(len(reps)))
	} else {
		rr = int((h.rr.Add(1) - 1) % uint64(len(reps)))
	}
	best, bestN := reps[rr%len(reps)], 0
	if len(reps) > 1 && !in.cfg.DisablePrefixCache {
		for i := range reps {
			r := reps[(rr+i)%len(reps)]
			if n := r.pool.Peek(cacheSalt(req, r.attnMin), req.Prompt[:len(req.Prompt)-1]); n > bestN {
				best, bestN = r, n
			}
		}
	}
	return best
}

func finishErr(u *Usage, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		u.FinishReason = FinishCancelled
		return nil
	}
	return err
}
