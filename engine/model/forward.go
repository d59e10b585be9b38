package model

import (
	"fmt"
	"math"

	"github.com/lmlite/lmlite/engine/kernels"
)

// kvStore is one sequence's KV cache as the forward pass sees it: a State's
// contiguous rows or a paged kvcache.Seq.
type kvStore interface {
	// row returns the K and V rows of position pos in layer l: kvDim values each,
	// stored as types says (kernels.KVType.Units units; kernels.PutKVRow writes them).
	row(pos, l int) (k, v []uint16)
	// types is how the cache stores its K and V rows.
	types() (k, v kernels.KVType)
	// layer appends the cache's blocks of layer l in position order, each holding
	// blockTokens positions.
	layer(l int, ks, vs [][]uint16) ([][]uint16, [][]uint16)
	blockTokens() int
}

// part is one sequence's share of a forward pass: tokens at positions start, … and
// the number of trailing tokens whose logits are wanted.
type part struct {
	kv     kvStore
	start  int
	tokens []int32
	logits int
	pool   Pooling
	embed  []float64
	attn   Attention
	loras  []LoRA // the sequence's adapters (lora.go), applied to its rows only
}

// scratch holds the activations of a forward pass, grown to the largest batch seen.
// Callers bound it by chunking long prompts (about 2·Dim + 3·FFN floats per token).
type scratch struct {
	x, xn, q, kk, vv, att, ffA, ffB, tmp []float32
	cos, sin                             []float32
	tokPart, tokPos                      []int32 // per token of the batch: its part and position
	ks, vs                               [][][]uint16
	out                                  []float32 // logits rows
	emb                                  []float32 // one pooled token's normed state
	at                                   attnArgs  // the layer's attention, for attnRun
	attnRun, attnTileRun                 func(lo, hi int)

	// Mixture of experts (moe.go): router logits, each token's experts and gate
	// weights, the tokens of each expert, the gathered rows and the layer's output.
	rLogits, wts, eW, moeIn, moeOut, eOut []float32
	sel, eTok, eSlot, eStart, eFill       []int32
	shV, shS, ones                        []float32         // the shared expert's gate
	eIn, eA, eB                           []float32         // a run of experts' gathered rows, gate and up outputs
	prods                                 []kernels.Product // the products of a kernels.MatMuls

	loraT, loraD []float32         // the adapters' A·x and B·(A·x) of a projection, per (projection, adapter) (lora.go)
	loraA, loraB []kernels.Product // their products
	loraRow      []loraRows        // the (part, adapter) entries
	loraSets     []loraSet         // the rows on each adapter
	loraX        []float32         // the input rows of sets whose rows are apart
	loraOut      []loraOut         // each (target, set) product's B·(A·x)
	loraTs       [3]loraTarget     // lora's and lora3's targets
}

// forward runs the parts through the model as one batch: every matrix product takes
// all the batch's tokens at once, and each token attends to its own sequence's cache.
// It writes the tokens' K and V rows into their caches (which must have room) and
// returns the wanted logits rows, part by part, token-major (Vocab values per row),
// in w's memory. A token's results are the same bits whatever else is in the batch:
// every kernel's output row has a fixed order of operations.
func (w *scratch) forward(m *Model, parts []part) ([]float32, error) {
	c := &m.cfg
	n, rows := 0, 0
	anyLoRA := false
	for _, p := range parts {
		if len(p.tokens) == 0 {
			return nil, fmt.Errorf("model: Forward of no tokens")
		}
		if p.logits < 0 || p.logits > len(p.tokens) {
			return nil, fmt.Errorf("model: %d logits rows wanted of %d tokens", p.logits, len(p.tokens))
		}
		for _, t := range p.tokens {
			if t < 0 || int(t) >= c.Vocab {
				return nil, fmt.Errorf("%w: %d (vocabulary of %d)", ErrBadToken, t, c.Vocab)
			}
		}
		n += len(p.tokens)
		rows += p.logits
		if len(p.loras) > 0 {
			if err := m.checkLoRAs(p.loras); err != nil {
				return nil, err
			}
			anyLoRA = true
		}
	}
	w.grow(c, n, len(parts))
	dim, qd, kvd, hd := c.Dim, c.qDim(), c.kvDim(), c.HeadDim
	half := c.RopeDims / 2
	x := w.x[:n*dim]
	i := 0
	for pi, p := range parts {
		for j, t := range p.tokens {
			kernels.DequantizeRow(x[i*dim:(i+1)*dim], m.tokEmbd.Type, m.tokEmbd.Row(int(t)))
			pos := p.start + j
			w.tokPart[i], w.tokPos[i] = int32(pi), int32(pos)
			kernels.RoPECache(w.cos[i*half:(i+1)*half], w.sin[i*half:(i+1)*half], pos, c.RopeDims, c.RopeBase, c.RopeScale, m.ropeFreqs)
			i++
		}
	}
	scale := float32(1 / math.Sqrt(float64(hd)))
	xn, q, k, v, att := w.xn[:n*dim], w.q[:n*qd], w.kk[:n*kvd], w.vv[:n*kvd], w.att[:n*qd]
	for li := range m.layers {
		ly := &m.layers[li]
		for i := 0; i < n; i++ {
			kernels.RMSNorm(xn[i*dim:(i+1)*dim], x[i*dim:(i+1)*dim], ly.attnNorm, c.NormEps)
		}
		if c.Fused {
			qkv := w.tmp[:n*(qd+2*kvd)]
			kernels.MatMul(qkv, ly.wq, xn, n)
			if anyLoRA {
				w.lora(parts, li, projQ, qkv, qd+2*kvd, xn, dim)
			}
			for i := 0; i < n; i++ {
				row := qkv[i*(qd+2*kvd):]
				copy(q[i*qd:(i+1)*qd], row[:qd])
				copy(k[i*kvd:(i+1)*kvd], row[qd:qd+kvd])
				copy(v[i*kvd:(i+1)*kvd], row[qd+kvd:qd+2*kvd])
			}
		} else {
			// One parallel job for the three (sharing xn's quantized form).
			w.prods = append(w.prods[:0],
				kernels.Product{Dst: q, W: ly.wq, X: xn, NTok: n},
				kernels.Product{Dst: k, W: ly.wk, X: xn, NTok: n},
				kernels.Product{Dst: v, W: ly.wv, X: xn, NTok: n})
			kernels.MatMuls(w.prods)
			if anyLoRA {
				w.lora3(parts, li, loraTarget{projQ, q, qd}, loraTarget{projK, k, kvd}, loraTarget{projV, v, kvd}, xn, dim)
			}
		}
		addBias(q, ly.bq)
		addBias(k, ly.bk)
		addBias(v, ly.bv)
		for i := 0; i < n; i++ {
			qi, ki := q[i*qd:(i+1)*qd], k[i*kvd:(i+1)*kvd]
			if c.QKNormRow {
				kernels.RMSNorm(qi, qi, ly.qNorm, c.NormEps)
				kernels.RMSNorm(ki, ki, ly.kNorm, c.NormEps)
			} else if ly.qNorm != nil {
				for h := 0; h < c.Heads; h++ {
					kernels.RMSNorm(qi[h*hd:(h+1)*hd], qi[h*hd:(h+1)*hd], ly.qNorm, c.NormEps)
				}
				for h := 0; h < c.KVHeads; h++ {
					kernels.RMSNorm(ki[h*hd:(h+1)*hd], ki[h*hd:(h+1)*hd], ly.kNorm, c.NormEps)
				}
			}
			cs, sn := w.cos[i*half:(i+1)*half], w.sin[i*half:(i+1)*half]
			kernels.RoPE(qi, c.Heads, hd, c.RopeDims, cs, sn, c.RopeNeox)
			kernels.RoPE(ki, c.KVHeads, hd, c.RopeDims, cs, sn, c.RopeNeox)
		}
		// Append K and V to each token's cache, then collect the caches' blocks.
		for i := 0; i < n; i++ {
			kv := parts[w.tokPart[i]].kv
			kr, vr := kv.row(int(w.tokPos[i]), li)
			kt, vt := kv.types()
			kernels.PutKVRow(kr, kt, k[i*kvd:(i+1)*kvd])
			kernels.PutKVRow(vr, vt, v[i*kvd:(i+1)*kvd])
		}
		for pi, p := range parts {
			w.ks[pi], w.vs[pi] = p.kv.layer(li, w.ks[pi][:0], w.vs[pi][:0])
		}
		w.attention(m, parts, att, q, n, scale)
		kernels.MatMul(xn, ly.wo, att, n)
		if anyLoRA {
			w.lora(parts, li, projO, xn, dim, att, qd)
		}
		addInto(x, xn)

		for i := 0; i < n; i++ {
			kernels.RMSNorm(xn[i*dim:(i+1)*dim], x[i*dim:(i+1)*dim], ly.ffnNorm, c.NormEps)
		}
		if ly.moe != nil {
			w.moe(m, li, x, xn, n)
			continue
		}
		a := w.ffA[:n*c.FFN]
		if c.Fused {
			gu := w.ffB[:n*2*c.FFN]
			kernels.MatMul(gu, ly.up, xn, n)
			if anyLoRA {
				w.lora(parts, li, projUp, gu, 2*c.FFN, xn, dim)
			}
			for i := 0; i < n; i++ {
				row := gu[i*2*c.FFN:]
				kernels.SwiGLU(a[i*c.FFN:(i+1)*c.FFN], row[:c.FFN], row[c.FFN:2*c.FFN])
			}
		} else {
			b := w.ffB[:n*c.FFN]
			w.prods = append(w.prods[:0],
				kernels.Product{Dst: a, W: ly.gate, X: xn, NTok: n},
				kernels.Product{Dst: b, W: ly.up, X: xn, NTok: n})
			kernels.MatMuls(w.prods)
			if anyLoRA {
				w.lora3(parts, li, loraTarget{projGate, a, c.FFN}, loraTarget{projUp, b, c.FFN}, loraTarget{}, xn, dim)
			}
			kernels.SwiGLU(a, a, b)
		}
		kernels.MatMul(xn, ly.down, a, n)
		if anyLoRA {
			w.lora(parts, li, projDown, xn, dim, a, c.FFN)
		}
		addInto(x, xn)
	}

	// Pooled hidden states, before xn is reused for the logits rows.
	pi := 0
	for _, p := range parts {
		if p.pool != PoolNone {
			w.emb = growTo(w.emb, dim)
			h := w.emb[:dim]
			for j := range p.tokens {
				pos := p.start + j
				if p.pool == PoolFirst && pos != 0 || p.pool == PoolLast && j != len(p.tokens)-1 {
					continue
				}
				kernels.RMSNorm(h, x[(pi+j)*dim:(pi+j+1)*dim], m.outNorm, c.NormEps)
				for d, v := range h {
					if p.pool == PoolMean {
						p.embed[d] += float64(v)
					} else {
						p.embed[d] = float64(v)
					}
				}
			}
		}
		pi += len(p.tokens)
	}

	// The wanted rows: each part's last p.logits tokens.
	r, end := 0, 0
	for _, p := range parts {
		end += len(p.tokens)
		for i := end - p.logits; i < end; i++ {
			kernels.RMSNorm(xn[r*dim:(r+1)*dim], x[i*dim:(i+1)*dim], m.outNorm, c.NormEps)
			r++
		}
	}
	if cap(w.out) < rows*c.Vocab {
		w.out = make([]float32, rows*c.Vocab)
	}
	out := w.out[:rows*c.Vocab]
	if rows > 0 {
		kernels.MatMul(out, m.output, xn[:rows*dim], rows)
		if anyLoRA {
			w.lora(parts, -1, 0, out, c.Vocab, xn, dim)
		}
		addBias(out, m.outputB)
	}
	return out, nil
}

// attention computes every (token, head) pair of the batch: the token at position pos
// attends to its sequence's cached positions 0..pos (causal), its head h reading KV
// head h/(Heads/KVHeads).
func (w *scratch) attention(m *Model, parts []part, out, q []float32, n int, scale float32) {
	c := &m.cfg
	qd, hd := c.qDim(), c.HeadDim
	if c.Arch == "phi3" {
		// llama.cpp scales phi3's queries before the product instead of the scores.
		for i := range q[:n*qd] {
			q[i] *= scale
		}
		scale = 1
	}
	positions := 0
	for i := 0; i < n; i++ {
		positions += int(w.tokPos[i]) + 1
	}
	// The work function is a method value made once per scratch, its arguments in
	// w.at: a closure here would be allocated on every layer of every step.
	w.at = attnArgs{c: c, parts: parts, out: out, q: q, scale: scale, kvPer: 1}
	if w.attnRun == nil {
		w.attnRun = w.attendRange
		w.attnTileRun = w.attendTiles
	}
	if tiledAttention {
		// Items of attnTileTokens tokens × one KV head (kvPer of them over
		// quantized caches): the query heads of a GQA group, for a run of tokens,
		// go through the cache together.
		group := c.Heads / c.KVHeads
		tt := attnTileTokens(group)
		w.at.kvPer = kvHeadsPerItem(parts, c.KVHeads)
		items := (c.KVHeads + w.at.kvPer - 1) / w.at.kvPer
		kernels.Parallel((n+tt-1)/tt*items, positions/n*hd*tt*group*w.at.kvPer, w.attnTileRun)
	} else {
		kernels.Parallel(n*c.Heads, positions/n*hd, w.attnRun)
	}
	w.at = attnArgs{}
}

// tiledAttention selects attendTiles over attendRange: the same bits (the kernels
// guarantee it; TestTiledAttentionMatchesPerHead checks it on a model), fewer trips
// through the cache for long prompts and, on AVX-512 with head size 64, the group
// kernels (several queries scoring each key once, their accumulator updates
// interleaved). On since the quiet measurement logged in docs/PERFORMANCE-LOG.md
// ("Attention tiled over tokens and a GQA group's heads").
var tiledAttention = true

// attnTileTokens is how many tokens of the batch an item of attendTiles takes for
// one KV head: enough that the item's heads (tokens × group) fill a tile of the
// kernel (16 heads).
func attnTileTokens(group int) int { return max(1, 16/max(group, 1)) }

// kvHeadsPerItem is how many KV heads an item of attendTiles takes: over quantized
// V caches (every part's), the KV heads split among the kernels' workers, so that
// a decoding token's heads go through each block together
// (kernels.AttendBlocksTileKVHeads: a q8_0 head's row spans as many cache lines as
// an f16 head's, and the heads of a row share them); otherwise one.
func kvHeadsPerItem(parts []part, kvHeads int) int {
	for _, pt := range parts {
		if _, vt := pt.kv.types(); !vt.Quantized() {
			return 1
		}
	}
	items := max(1, min(kvHeads, kernels.Threads()))
	return (kvHeads + items - 1) / items
}

// attendTiles computes the items lo..hi-1 of the layer in w.at: item p is the KV
// heads kvPer·s.. (s = p%⌈KVHeads/kvPer⌉; one head unless the caches are
// quantized) of the tokens of block p/⌈KVHeads/kvPer⌉ (attnTileTokens tokens),
// whose runs of one sequence's tokens each go through kernels.AttendBlocksTile,
// a head at a time; a run of one token over a quantized cache takes the item's
// heads together through kernels.AttendBlocksTileKVHeads (the same bits).
func (w *scratch) attendTiles(lo, hi int) {
	a := &w.at
	c := a.c
	qd, kvd, hd := c.qDim(), c.kvDim(), c.HeadDim
	group := c.Heads / c.KVHeads
	tt := attnTileTokens(group)
	n := len(a.out) / qd
	items := (c.KVHeads + a.kvPer - 1) / a.kvPer
	for p := lo; p < hi; p++ {
		b, s := p/items, p%items
		kv0, kv1 := s*a.kvPer, min(c.KVHeads, (s+1)*a.kvPer)
		if kv1-kv0 > 1 {
			w.attendTileHeads(b*tt, min(n, (b+1)*tt), kv0, kv1)
			continue
		}
		kvh := kv0
		for i0, end := b*tt, min(n, (b+1)*tt); i0 < end; {
			pi := w.tokPart[i0]
			i1 := i0 + 1
			for i1 < end && w.tokPart[i1] == pi {
				i1++
			}
			o := i0*qd + kvh*group*hd
			kv := a.parts[pi].kv
			if kt, vt := kv.types(); kt.Quantized() || vt.Quantized() {
				// A quantized cache: llama.cpp's one-query path, whatever the mode.
				kernels.AttendBlocksTileKV(a.out[o:], a.q[o:], qd, hd, group, w.tokPos[i0:i1], w.ks[pi], w.vs[pi],
					kt, vt, kt.Units(kvh*hd), vt.Units(kvh*hd), kt.Units(kvd), vt.Units(kvd), kv.blockTokens(), a.scale)
				i0 = i1
				continue
			}
			attend := kernels.AttendBlocksTile
			if a.parts[pi].attn == AttnF32 {
				attend = kernels.AttendBlocksTileF32
			}
			attend(a.out[o:], a.q[o:], qd, hd, group, w.tokPos[i0:i1],
				w.ks[pi], w.vs[pi], kvh*hd, kvd, kv.blockTokens(), a.scale)
			i0 = i1
		}
	}
}

// attnArgs are one layer's attention arguments, for attendRange.
type attnArgs struct {
	c      *Config
	parts  []part
	out, q []float32
	scale  float32
	kvPer  int // KV heads per item of attendTiles
}

// attendTileHeads is attendTiles for the tokens i0..end-1 and the KV heads
// kv0..kv1-1 of quantized caches (kvHeadsPerItem): a run of one sequence's tokens
// takes the heads one by one through kernels.AttendBlocksTileKV, as attendTiles
// does, or, for one token, together through kernels.AttendBlocksTileKVHeads.
func (w *scratch) attendTileHeads(i0, end, kv0, kv1 int) {
	a := &w.at
	c := a.c
	qd, kvd, hd := c.qDim(), c.kvDim(), c.HeadDim
	group := c.Heads / c.KVHeads
	for i0 < end {
		pi := w.tokPart[i0]
		i1 := i0 + 1
		for i1 < end && w.tokPart[i1] == pi {
			i1++
		}
		kv := a.parts[pi].kv
		kt, vt := kv.types()
		if i1-i0 == 1 {
			o := i0*qd + kv0*group*hd
			kernels.AttendBlocksTileKVHeads(a.out[o:], a.q[o:], hd, group, kv1-kv0, w.tokPos[i0], w.ks[pi], w.vs[pi],
				kt, vt, kt.Units(kv0*hd), vt.Units(kv0*hd), kt.Units(kvd), vt.Units(kvd), kv.blockTokens(), a.scale)
		} else {
			for kvh := kv0; kvh < kv1; kvh++ {
				o := i0*qd + kvh*group*hd
				kernels.AttendBlocksTileKV(a.out[o:], a.q[o:], qd, hd, group, w.tokPos[i0:i1], w.ks[pi], w.vs[pi],
					kt, vt, kt.Units(kvh*hd), vt.Units(kvh*hd), kt.Units(kvd), vt.Units(kvd), kv.blockTokens(), a.scale)
			}
		}
		i0 = i1
	}
}

// attendRange computes the (token, head) pairs lo..hi-1 of the layer in w.at.
func (w *scratch) attendRange(lo, hi int) {
	a := &w.at
	c := a.c
	qd, kvd, hd := c.qDim(), c.kvDim(), c.HeadDim
	group := c.Heads / c.KVHeads
	for p := lo; p < hi; p++ {
		i, h := p/c.Heads, p%c.Heads
		pi := w.tokPart[i]
		kv := a.parts[pi].kv
		if kt, vt := kv.types(); kt.Quantized() || vt.Quantized() {
			kvh := h / group
			kernels.AttendBlocksKV(a.out[i*qd+h*hd:i*qd+(h+1)*hd], a.q[i*qd+h*hd:i*qd+(h+1)*hd], w.ks[pi], w.vs[pi],
				kt, vt, kt.Units(kvh*hd), vt.Units(kvh*hd), kt.Units(kvd), vt.Units(kvd), kv.blockTokens(), int(w.tokPos[i])+1, a.scale)
			continue
		}
		attend := kernels.AttendBlocks
		if a.parts[pi].attn == AttnF32 {
			attend = kernels.AttendBlocksF32
		}
		attend(a.out[i*qd+h*hd:i*qd+(h+1)*hd], a.q[i*qd+h*hd:i*qd+(h+1)*hd],
			w.ks[pi], w.vs[pi], (h/group)*hd, kvd, a.parts[pi].kv.blockTokens(), int(w.tokPos[i])+1, a.scale)
	}
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

// grow makes the scratch hold n tokens of parts sequences.
func (w *scratch) grow(c *Config, n, parts int) {
	w.x = growTo(w.x, n*c.Dim)
	w.xn = growTo(w.xn, n*max(c.Dim, c.qDim()))
	w.q = growTo(w.q, n*c.qDim())
	w.kk = growTo(w.kk, n*c.kvDim())
	w.vv = growTo(w.vv, n*c.kvDim())
	w.att = growTo(w.att, n*c.qDim())
	w.ffA = growTo(w.ffA, n*c.ffnWidth())
	if c.Fused {
		w.ffB = growTo(w.ffB, n*2*c.FFN)
		w.tmp = growTo(w.tmp, n*(c.qDim()+2*c.kvDim()))
	} else {
		w.ffB = growTo(w.ffB, n*c.ffnWidth())
	}
	w.growMoE(c, n)
	half := c.RopeDims / 2
	w.cos, w.sin = growTo(w.cos, n*half), growTo(w.sin, n*half)
	w.tokPart, w.tokPos = growTo(w.tokPart, n), growTo(w.tokPos, n)
	for len(w.ks) < parts {
		w.ks, w.vs = append(w.ks, nil), append(w.vs, nil)
	}
}

func growTo[T any](b []T, size int) []T {
	if cap(b) < size {
		return make([]T, size)
	}
	return b[:size]
}
