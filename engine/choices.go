package engine

import (
	"context"
	"fmt"
	"sync"
)

// MaxChoices is the most choices GenerateN runs (OpenAI's n).
const MaxChoices = 8

// ChoiceSeed is the sampling seed of choice i of a request seeded with seed: seed
// itself for choice 0 (so n=1 is a plain request), a SplitMix64 mix of seed and i
// for the others.
func ChoiceSeed(seed uint64, i int) uint64 {
	if i == 0 {
		return seed
	}
	z := seed + uint64(i)*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

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
	first, err := b.Generate(ctx, modelID, req)
	if err != nil || n == 1 {
		return []*Stream{first}, err
	}
	streams := make([]*Stream, n)
	started := make(chan struct{})
	var once sync.Once
	streams[0] = relay(ctx, first, func() { once.Do(func() { close(started) }) })
	for i := 1; i < n; i++ {
		s, tokens, finish := NewStream(16)
		streams[i] = s
		ri := req
		ri.Sampling.Seed = ChoiceSeed(req.Sampling.Seed, i)
		go func() {
			select {
			case <-started:
			case <-ctx.Done():
				close(tokens)
				finish(Usage{PromptTokens: len(req.Prompt), FinishReason: FinishCancelled}, nil)
				return
			}
			inner, err := b.Generate(ctx, modelID, ri)
			if err != nil {
				finish(Usage{}, err)
				return
			}
			forward(ctx, inner, tokens, nil, finish)
		}()
	}
	return streams, nil
}

// relay returns a stream that passes on inner's tokens, calling first when the
// first token (or the end) arrives.
func relay(ctx context.Context, inner *Stream, first func()) *Stream {
	s, tokens, finish := NewStream(16)
	go forward(ctx, inner, tokens, first, finish)
	return s
}

// forward copies inner's tokens to out (dropping them once ctx is done, but always
// draining inner) and finishes with inner's usage.
func forward(ctx context.Context, inner *Stream, out chan<- Token, first func(), finish func(Usage, error)) {
	live := true
	for t := range inner.Tokens {
		if first != nil {
			first()
			first = nil
		}
		if !live {
			continue
		}
		select {
		case out <- t:
		case <-ctx.Done():
			live = false
		}
	}
	if first != nil {
		first()
	}
	u, err := inner.Wait(context.Background())
	finish(u, err)
}
