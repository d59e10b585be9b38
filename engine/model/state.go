package model

import (
	"fmt"
	"math"

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

	// scratch, grown to the largest batch seen (about 2·Dim + 3·FFN floats per token:
	// callers bound it by chunking long prompts)
	x, xn, q, kk, vv, att, ffA, ffB, tmp []float32
}

// NewState returns an empty sequence with room for ctx tokens (ctx <= 0: the model's
// context length).
func (m *Model) NewState(ctx int) *State {
	if ctx <= 0 {
		ctx = m.cfg.Context
	}
	return &State{m: m, ctx: ctx, k: make([][]uint16, m.cfg.Layers), v: make([][]uint16, m.cfg.Layers)}
}

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
// token-major) when wantAll is set. Each token's logits are the same bits whatever
// batch it was computed in.
func (s *State) Forward(tokens []int32, wantAll bool) ([]float32, error) {
	c := &s.m.cfg
	n := len(tokens)
	if n == 0 {
		return nil, fmt.Errorf("model: Forward of no tokens")
	}
	if s.pos+n > s.ctx {
		return nil, fmt.Errorf("%w: %d tokens after %d do not fit in a context of %d", ErrContextFull, n, s.pos, s.ctx)
	}
	for _, t := range tokens {
		if t < 0 || int(t) >= c.Vocab {
			return nil, fmt.Errorf("%w: %d (vocabulary of %d)", ErrBadToken, t, c.Vocab)
		}
	}
	s.grow(n)
	dim, qd, kvd, hd := c.Dim, c.qDim(), c.kvDim(), c.HeadDim
	x := s.x[:n*dim]
	for i, t := range tokens {
		kernels.DequantizeRow(x[i*dim:(i+1)*dim], s.m.tokEmbd.Type, s.m.tokEmbd.Row(int(t)))
	}
	// Rotation angles of the batch's positions.
	half := c.RopeDims / 2
	cos, sin := make([]float32, n*half), make([]float32, n*half)
	for i := 0; i < n; i++ {
		kernels.RoPECache(cos[i*half:(i+1)*half], sin[i*half:(i+1)*half], s.pos+i, c.RopeDims, c.RopeBase, c.RopeScale, s.m.ropeFreqs)
	}
	scale := float32(1 / math.Sqrt(float64(hd)))
	xn, q, k, v, att := s.xn[:n*dim], s.q[:n*qd], s.kk[:n*kvd], s.vv[:n*kvd], s.att[:n*qd]
	for li := range s.m.layers {
		ly := &s.m.layers[li]
		for i := 0; i < n; i++ {
			kernels.RMSNorm(xn[i*dim:(i+1)*dim], x[i*dim:(i+1)*dim], ly.attnNorm, c.NormEps)
		}
		if c.Fused {
			qkv := s.tmp[:n*(qd+2*kvd)]
			kernels.MatMul(qkv, ly.wq, xn, n)
			for i := 0; i < n; i++ {
				row := qkv[i*(qd+2*kvd):]
				copy(q[i*qd:(i+1)*qd], row[:qd])
				copy(k[i*kvd:(i+1)*kvd], row[qd:qd+kvd])
				copy(v[i*kvd:(i+1)*kvd], row[qd+kvd:qd+2*kvd])
			}
		} else {
			kernels.MatMul(q, ly.wq, xn, n)
			kernels.MatMul(k, ly.wk, xn, n)
			kernels.MatMul(v, ly.wv, xn, n)
		}
		addBias(q, ly.bq)
		addBias(k, ly.bk)
		addBias(v, ly.bv)
		for i := 0; i < n; i++ {
			qi, ki := q[i*qd:(i+1)*qd], k[i*kvd:(i+1)*kvd]
			if ly.qNorm != nil {
				for h := 0; h < c.Heads; h++ {
					kernels.RMSNorm(qi[h*hd:(h+1)*hd], qi[h*hd:(h+1)*hd], ly.qNorm, c.NormEps)
				}
				for h := 0; h < c.KVHeads; h++ {
					kernels.RMSNorm(ki[h*hd:(h+1)*hd], ki[h*hd:(h+1)*hd], ly.kNorm, c.NormEps)
				}
			}
			cs, sn := cos[i*half:(i+1)*half], sin[i*half:(i+1)*half]
			kernels.RoPE(qi, c.Heads, hd, c.RopeDims, cs, sn, c.RopeNeox)
			kernels.RoPE(ki, c.KVHeads, hd, c.RopeDims, cs, sn, c.RopeNeox)
		}
		// Append K and V to the cache.
		kc, vc := s.k[li][:(s.pos+n)*kvd], s.v[li][:(s.pos+n)*kvd]
		for j, val := range k {
			kc[s.pos*kvd+j] = kernels.F32ToF16(val)
		}
		for j, val := range v {
			vc[s.pos*kvd+j] = kernels.F32ToF16(val)
		}
		s.attention(att, q, kc, vc, n, scale)
		kernels.MatMul(xn, ly.wo, att, n)
		addInto(x, xn)

		for i := 0; i < n; i++ {
			kernels.RMSNorm(xn[i*dim:(i+1)*dim], x[i*dim:(i+1)*dim], ly.ffnNorm, c.NormEps)
		}
		a := s.ffA[:n*c.FFN]
		if c.Fused {
			gu := s.ffB[:n*2*c.FFN]
			kernels.MatMul(gu, ly.up, xn, n)
			for i := 0; i < n; i++ {
				row := gu[i*2*c.FFN:]
				kernels.SwiGLU(a[i*c.FFN:(i+1)*c.FFN], row[:c.FFN], row[c.FFN:2*c.FFN])
			}
		} else {
			b := s.ffB[:n*c.FFN]
			kernels.MatMul(a, ly.gate, xn, n)
			kernels.MatMul(b, ly.up, xn, n)
			kernels.SwiGLU(a, a, b)
		}
		kernels.MatMul(xn, ly.down, a, n)
		addInto(x, xn)
	}
	s.pos += n

	first := n - 1
	if wantAll {
		first = 0
	}
	rows := n - first
	for i := first; i < n; i++ {
		kernels.RMSNorm(xn[(i-first)*dim:(i-first+1)*dim], x[i*dim:(i+1)*dim], s.m.outNorm, c.NormEps)
	}
	logits := make([]float32, rows*c.Vocab)
	kernels.MatMul(logits, s.m.output, xn[:rows*dim], rows)
	addBias(logits, s.m.outputB)
	return logits, nil
}

// attention computes every (token, head) pair of the batch: token i (at position
// pos+i) attends to the cached positions 0..pos+i (causal), its head h reading KV
// head h/(Heads/KVHeads).
func (s *State) attention(out, q []float32, kc, vc []uint16, n int, scale float32) {
	c := &s.m.cfg
	qd, kvd, hd := c.qDim(), c.kvDim(), c.HeadDim
	group := c.Heads / c.KVHeads
	if c.Arch == "phi3" {
		// llama.cpp scales phi3's queries before the product instead of the scores.
		for i := range q {
			q[i] *= scale
		}
		scale = 1
	}
	pairs := n * c.Heads
	kernels.Parallel(pairs, (s.pos+n)*hd, func(lo, hi int) {
		for p := lo; p < hi; p++ {
			i, h := p/c.Heads, p%c.Heads
			kvOff := (h / group) * hd
			kernels.Attend(out[i*qd+h*hd:i*qd+(h+1)*hd], q[i*qd+h*hd:i*qd+(h+1)*hd],
				kc[kvOff:], vc[kvOff:], s.pos+i+1, kvd, scale)
		}
	})
}

func addBias(x, b []float32) {
	if b == nil {
		return
	}
	for i := range x {
		x[i] += b[i%len(b)]
	}
}

func addInto(dst, src []float32) {
	for i := range dst {
		dst[i] += src[i]
	}
}

// grow makes the scratch buffers hold n tokens and the cache pos+n positions.
func (s *State) grow(n int) {
	c := &s.m.cfg
	g := func(b []float32, size int) []float32 {
		if cap(b) < size {
			return make([]float32, size)
		}
		return b[:size]
	}
	s.x = g(s.x, n*c.Dim)
	s.xn = g(s.xn, n*max(c.Dim, c.qDim()))
	s.q = g(s.q, n*c.qDim())
	s.kk = g(s.kk, n*c.kvDim())
	s.vv = g(s.vv, n*c.kvDim())
	s.att = g(s.att, n*c.qDim())
	s.ffA = g(s.ffA, n*c.FFN)
	if c.Fused {
		s.ffB = g(s.ffB, n*2*c.FFN)
		s.tmp = g(s.tmp, n*(c.qDim()+2*c.kvDim()))
	} else {
		s.ffB = g(s.ffB, n*c.FFN)
	}
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
