package engine

import (
	"context"
	"fmt"
)

// GenerateN starts n choices of one request (OpenAI's n): each its own sequence,
// choice i sampled with ChoiceSeed(req.Sampling.Seed, i), so choice i's tokens are
// those of the request alone with that seed. Choice 0 starts at once; the others
// join once it has its first token, when its prompt's full KV blocks are in the
// prefix cache, so they share them instead of computing the prompt again (their
// Usage.CachedTokens says how many; with the prefix cache disabled they compute
// it). The streams are returned at once; a choice that cannot start ends its
// stream with the error.
func (b *Block) GenerateN(ctx context.Context, modelID string, req Request, n int) ([]*Stream, error) {
	if n < 1 || n > MaxChoices {
		return nil, fmt.Errorf("engine: n %d is outside [1, %d]", n, MaxChoices)
	}
	streams := make([]*Stream, n)
	streams[0] = NewStream()
	started := make(chan struct{})
	if n > 1 {
		streams[0].OnFirst(func() { close(started) })
	}
	if err := b.generate(ctx, modelID, req, streams[0]); err != nil {
		return []*Stream{nil}, err
	}
	for i := 1; i < n; i++ {
		s := NewStream()
		streams[i] = s
		ri := req
		ri.Sampling.Seed = ChoiceSeed(req.Sampling.Seed, i)
		// This goroutine only waits to start the choice; its tokens go from the
		// runner to s directly.
		go func() {
			select {
			case <-started:
			case <-ctx.Done():
				s.Finish(Usage{PromptTokens: len(req.Prompt), FinishReason: FinishCancelled}, nil)
				return
			}
			if err := b.generate(ctx, modelID, ri, s); err != nil {
				s.Finish(Usage{}, err)
			}
		}()
	}
	return streams, nil
}
