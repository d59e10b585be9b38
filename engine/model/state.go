package model

import (
	"fmt"

	"github.com/lmlite/lmlite/engine/kernels"
)

// State is one sequence being run through a Model: its position and its KV cache
// (binary16, as llama.cpp's default cache, grown as the sequence grows up to the
// context size). A State is not safe for concurrent use; use one per sequence.
type State struct {
	m   *Model
	ctx int
	pos int
	k   [][]uint16 // per layer: position-major, kvDim values per position
	v   [][]uint16

	w     scratch
	parts [1]part
	attn  Attention
	loras []LoRA
}

// NewState returns an empty sequence with room for ctx tokens (ctx <= 0: the model's
// context length).
func (m *Model) NewState(ctx int) *State {
	if ctx <= 0 {
		ctx = m.cfg.Context
	}
	return &State{m: m, ctx: ctx, k: make([][]uint16, m.cfg.Layers), v: make([][]uint16, m.cfg.Layers)}
}

// SetAttention sets the attention numerics of the state's tokens from now on
// (AttnF16 unless set): set it once, before the first Forward, for a sequence
// whose tokens should all share it.
func (s *State) SetAttention(a Attention) { s.attn = a }

// SetLoRA sets the adapters applied to the state's tokens from now on (none
// unless set): set it once, before the first Forward, as a sequence's KV holds the
// adapted model's keys and values.
func (s *State) SetLoRA(loras []LoRA) { s.loras = loras }

// Pos is the number of tokens the state holds (the position of the next token).
func (s *State) Pos() int { return s.pos }

// Context is the number of tokens the state can hold.
func (s *State) Context() int { return s.ctx }

// Truncate drops the cached tokens from position n on, so that the sequence can
// continue differently from there.
func (s *State) Truncate(n int) {
	if n < s.pos {
		s.pos = max(n, 0)
	}
}

// Forward runs tokens through the model at positions Pos() onwards as one batch
// (prefill is matrix-matrix work) and appends them to the KV cache. It returns the
// logits of the last token (Vocab values), or of every token (len(tokens)·Vocab,
// token-major) when wantAll is set, in a new slice. Each token's logits are the same
// bits whatever batch it was computed in, and the same as a Batch computes for the
// same sequence.
func (s *State) Forward(tokens []int32, wantAll bool) ([]float32, error) {
	n := len(tokens)
	if n == 0 {
		return nil, fmt.Errorf("model: Forward of no tokens")
	}
	if s.pos+n > s.ctx {
		return nil, fmt.Errorf("%w: %d tokens after %d do not fit in a context of %d", ErrContextFull, n, s.pos, s.ctx)
	}
	s.growCache(n)
	want := 1
	if wantAll {
		want = n
	}
	s.parts[0] = part{kv: (*contiguous)(s), start: s.pos, tokens: tokens, logits: want, attn: s.attn, loras: s.loras}
	out, err := s.w.forward(s.m, s.parts[:])
	if err != nil {
		return nil, err
	}
	s.pos += n
	return append([]float32(nil), out...), nil
}

// contiguous is a State's cache as a kvStore: one block of ctx positions per layer.
type contiguous State

func (c *contiguous) row(pos, l int) (k, v []uint16) {
	kvd := c.m.cfg.kvDim()
	return c.k[l][pos*kvd : (pos+1)*kvd], c.v[l][pos*kvd : (pos+1)*kvd]
}

func (c *contiguous) layer(l int, ks, vs [][]uint16) ([][]uint16, [][]uint16) {
	return append(ks, c.k[l]), append(vs, c.v[l])
}

func (c *contiguous) blockTokens() int { return c.ctx }

// types: a State's cache is binary16 (quantized caches are the engine's paged pools).
func (c *contiguous) types() (k, v kernels.KVType) { return kernels.KVF16, kernels.KVF16 }

// growCache makes the cache hold pos+n positions.
func (s *State) growCache(n int) {
	c := &s.m.cfg
	need := (s.pos + n) * c.kvDim()
	for li := range s.k {
		if cap(s.k[li]) < need {
			newCap := min(max(need, 2*cap(s.k[li]), 64*c.kvDim()), s.ctx*c.kvDim())
			k := make([]uint16, need, newCap)
			v := make([]uint16, need, newCap)
			copy(k, s.k[li][:s.pos*c.kvDim()])
			copy(v, s.v[li][:s.pos*c.kvDim()])
			s.k[li], s.v[li] = k, v
		} else {
			s.k[li] = s.k[li][:need]
			s.v[li] = s.v[li][:need]
		}
	}
}
