package engine

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/engine/model"
)

// poolingOf is how a model embeds: the GGUF's <arch>.pooling_type (none, mean, cls,
// last; rank is not an embedding), or mean when the configuration turns embeddings
// on without one; PoolNone when it does not embed.
func poolingOf(f *gguf.File, mc ModelConfig) model.Pooling {
	if v, ok := f.GetUint(f.Architecture() + ".pooling_type"); ok {
		switch p := model.Pooling(v); p {
		case model.PoolMean, model.PoolFirst, model.PoolLast:
			return p
		}
	}
	if mc.Embeddings {
		return model.PoolMean
	}
	return model.PoolNone
}

// pooled finishes a pooling: the mean (for PoolMean over n tokens), L2-normalized,
// in float32.
func pooled(acc []float64, p model.Pooling, n int) []float32 {
	scale := 1.0
	if p == model.PoolMean && n > 0 {
		scale = 1 / float64(n)
	}
	norm := 0.0
	for _, v := range acc {
		norm += (v * scale) * (v * scale)
	}
	if norm > 0 {
		scale /= math.Sqrt(norm)
	}
	out := make([]float32, len(acc))
	for i, v := range acc {
		out[i] = float32(v * scale)
	}
	return out
}

// Embed returns the embeddings of the inputs. Inputs that can never run (empty,
// outside the vocabulary, not shorter than MaxModelLen) fail at once, as does a
// model that does not embed (ErrNoEmbeddings; ModelStatus.Embeddings says which do).
// An input's vector is the same bits alone, in any batch, and however its prompt is
// chunked: its hidden states are always computed (never taken from the prefix cache).
func (b *Block) Embed(ctx context.Context, modelID string, req EmbedRequest) (Embeddings, error) {
	in, ok := b.models[modelID]
	if !ok {
		return Embeddings{}, fmt.Errorf("%w: %q", ErrUnknownModel, modelID)
	}
	if in.pool == model.PoolNone {
		return Embeddings{}, fmt.Errorf("%w: %s (set embeddings: true in its model config)", ErrNoEmbeddings, modelID)
	}
	if len(req.Inputs) == 0 {
		return Embeddings{}, fmt.Errorf("engine: no input to embed")
	}
	total := 0
	for i, p := range req.Inputs {
		if len(p) == 0 {
			return Embeddings{}, fmt.Errorf("engine: input %d is empty", i)
		}
		for _, id := range p {
			if id < 0 || int(id) >= in.tok.VocabSize() {
				return Embeddings{}, fmt.Errorf("engine: input %d: token %d is outside the vocabulary of %d", i, id, in.tok.VocabSize())
			}
		}
		if len(p) >= in.cfg.MaxModelLen {
			return Embeddings{}, fmt.Errorf("%w: input %d has %d tokens, max_model_len of model %s is %d", ErrTooLong, i, len(p), modelID, in.cfg.MaxModelLen)
		}
		total += len(p)
	}
	g := b.begin(in, len(req.Inputs), false)
	if g.err != nil {
		return Embeddings{}, g.err
	}
	defer func() { b.end(endMsg{in: in, n: len(req.Inputs), now: b.now()}) }()
	h := g.h
	if h == nil {
		var err error
		if h, _, err = await(ctx, g.la); err != nil {
			return Embeddings{}, err
		}
	}
	start := time.Now()
	jobs := make([]*job, len(req.Inputs))
	for i, p := range req.Inputs {
		r := in.pick(Request{Prompt: p, CacheSalt: "\x00embed"}, h)
		j := &job{ctx: ctx, req: Request{Prompt: p, Tenant: req.Tenant, Weight: req.Weight, Priority: req.Priority, CacheSalt: "\x00embed"},
			start: start, max: 1, out: NewStream(), u: Usage{PromptTokens: len(p)}, tokens: p,
			pool: in.pool, embed: make([]float64, in.dim)}
		j.finish = j.out.Finish // the accounting is Embed's own (above)
		jobs[i] = j
		r.submit(j)
	}
	out := Embeddings{Vectors: make([][]float32, len(jobs)), PromptTokens: total}
	var firstErr error
	for i, j := range jobs {
		u, err := j.out.Wait(context.Background()) // the runner ends a cancelled job at its next step
		if err == nil && u.FinishReason != FinishStop {
			err = fmt.Errorf("engine: embedding %d ended: %s", i, u.FinishReason)
			if ctx.Err() != nil {
				err = ctx.Err()
			}
		}
		if err != nil && firstErr == nil {
			firstErr = err
		}
		out.Vectors[i] = j.vec
	}
	if firstErr != nil {
		return Embeddings{}, firstErr
	}
	return out, nil
}
