package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lmlite/lmlite/engine/sample"
)

// This file is a request's way in: Generate admits it, await waits for its model,
// pick chooses a replica, and the request's tokens flow from the runner (runner.go)
// to its Stream.

// Generate starts a request. Requests that can never run (unknown model, empty
// prompt, longer than MaxModelLen) and requests beyond the queue limit fail at once;
// the others stream their tokens and end with a Usage.
func (b *Block) Generate(ctx context.Context, modelID string, req Request) (*Stream, error) {
	in, ok := b.models[modelID]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownModel, modelID)
	}
	limit := in.cfg.MaxModelLen
	if len(req.Prompt) == 0 {
		return nil, fmt.Errorf("engine: empty prompt (give at least BOS)")
	}
	for _, id := range req.Prompt {
		if id < 0 || int(id) >= in.tok.VocabSize() {
			return nil, fmt.Errorf("engine: prompt token %d is outside the vocabulary of %d", id, in.tok.VocabSize())
		}
	}
	if req.MaxTokens < 0 {
		return nil, fmt.Errorf("engine: max tokens %d is negative", req.MaxTokens)
	}
	if len(req.Prompt) >= limit || len(req.Prompt)+req.MaxTokens > limit {
		return nil, fmt.Errorf("%w: %d prompt tokens + %d max tokens > max_model_len %d of model %s",
			ErrTooLong, len(req.Prompt), req.MaxTokens, limit, modelID)
	}
	b.mu.Lock()
	if b.closed.Load() {
		b.mu.Unlock()
		return nil, ErrClosed
	}
	in.mu.Lock()
	if in.active >= b.cfg.MaxQueue+in.cfg.Replicas*in.cfg.MaxModelConcurrency {
		in.mu.Unlock()
		b.mu.Unlock()
		return nil, fmt.Errorf("%w: model %s has %d requests waiting", ErrQueueFull, modelID, in.active)
	}
	in.active++
	in.mu.Unlock()
	b.inflight.Add(1)
	b.mu.Unlock()

	s, tokens, finish := NewStream(16)
	go func() {
		defer b.inflight.Done()
		u, err := in.run(ctx, req, tokens)
		in.mu.Lock()
		in.active--
		in.lastUsed = b.now()
		in.mu.Unlock()
		finish(u, err)
	}()
	return s, nil
}

// await waits until the model is ready (asking the janitor to load it if it is
// unloaded) and returns
// how long this call waited for a load (the cold start).
func (in *instance) await(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	waited := false
	for {
		in.mu.Lock()
		switch in.state {
		case StateReady:
			in.mu.Unlock()
			if waited {
				return time.Since(start), nil
			}
			return 0, nil
		case StateFailed:
			err := in.err
			in.mu.Unlock()
			return 0, err
		}
		if in.attempt == nil {
			if in.b.closed.Load() {
				// Checked under in.mu: Close's pass takes in.mu after closed is set, so
				// either it refuses this attempt or this sees closed.
				in.mu.Unlock()
				return 0, ErrClosed
			}
			in.attempt = newLoadAttempt() // wanted: the janitor loads it or refuses
		}
		la := in.attempt
		in.mu.Unlock()
		signal(in.b.kick)
		waited = true
		select {
		case <-la.done:
			if la.err != nil {
				return 0, la.err
			}
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// run waits for the model, hands the request to a replica and forwards its tokens
// until it ends.
func (in *instance) run(ctx context.Context, req Request, out chan<- Token) (Usage, error) {
	start := time.Now()
	u := Usage{PromptTokens: len(req.Prompt)}
	cold, err := in.await(ctx)
	u.ColdStart = cold
	if err != nil {
		return u, finishErr(&u, err)
	}
	r := in.pick(req)

	maxTokens := req.MaxTokens
	if maxTokens == 0 {
		maxTokens = in.cfg.MaxModelLen - len(req.Prompt)
	}
	s := req.Sampling
	j := &job{ctx: ctx, req: req, start: start, max: maxTokens, box: newMailbox(), u: u,
		tokens: append(make([]int32, 0, len(req.Prompt)+maxTokens), req.Prompt...),
		smp: sample.New(sample.Params{Temperature: s.Temperature, TopK: s.TopK, TopP: s.TopP, MinP: s.MinP,
			RepeatPenalty: s.RepeatPenalty, PresencePenalty: s.PresencePenalty, FrequencyPenalty: s.FrequencyPenalty,
			RepeatLastN: s.RepeatLastN, Seed: s.Seed}),
		dec:  in.tok.NewDecoder(),
		stop: sample.NewStopMatcher(req.Stop)}
	j.dec.Prime(req.Prompt)
	r.submit(j)

	var buf []Token
	forward := true
	for {
		select {
		case <-j.box.wake:
		case <-ctx.Done():
			forward = false // the runner sees it at its next step and ends the job
			<-j.box.wake
		}
		var done bool
		buf, done = j.box.take(buf)
		for _, t := range buf {
			if !forward {
				break
			}
			select {
			case out <- t:
			case <-ctx.Done():
				forward = false
			}
		}
		if done {
			j.box.mu.Lock()
			u, err := j.box.u, j.box.err
			j.box.mu.Unlock()
			if err == nil && u.FinishReason == "" {
				u.FinishReason = FinishCancelled
			}
			return u, err
		}
	}
}

// pick chooses the replica for a request: the one whose prefix cache holds the
// longest part of its prompt; ties (no hit anywhere, the usual case) go round-robin.
func (in *instance) pick(req Request) *runner {
	in.mu.Lock()
	reps, rr := in.replicas, in.rr
	in.rr++
	in.mu.Unlock()
	best, bestN := reps[rr%len(reps)], 0
	if len(reps) > 1 && !in.cfg.DisablePrefixCache {
		for i := range reps {
			r := reps[(rr+i)%len(reps)]
			if n := r.pool.Peek(req.CacheSalt, req.Prompt[:len(req.Prompt)-1]); n > bestN {
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
