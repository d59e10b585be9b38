package model

import (
	"fmt"

	"github.com/lmlite/lmlite/engine/kernels"
	"github.com/lmlite/lmlite/kvcache"
)

// Item is one sequence's share of a Batch step: its tokens at positions Start,
// Start+1, … are run through the model and their K and V rows written into KV.
type Item struct {
	KV     *kvcache.Seq // the sequence's block table; must hold Start+len(Tokens) tokens (Grow first)
	Start  int          // position of Tokens[0]: the tokens before it are in KV already
	Tokens []int32
	Logits int // how many of the last tokens' logits rows to return: 0 (a prefill chunk), 1 (sample), up to len(Tokens)

	// Pool asks for the tokens' final hidden states (after the output norm) pooled
	// into Embed (Dim values, the caller's): PoolMean adds each token's state to it
	// (the caller divides by the count), PoolLast sets it to the item's last token's,
	// PoolFirst sets it at position 0. The sums run token by token in position order
	// in float64, so chunking a prompt differently gives the same bits.
	Pool  Pooling
	Embed []float64

	// Attn is the sequence's attention numerics, the same for all its steps
	// (AttentionFor its request's prompt): a token's bits depend on it.
	Attn Attention

	// LoRA is the sequence's adapters (none: the bare base), the same for all its
	// steps: each applies to this item's rows only, so items on different adapters
	// share one step and a row's bits never depend on its neighbours' adapters.
	LoRA []LoRA
}

// Attention is a sequence's attention numerics, chosen once per request so that a
// token's bits never depend on how its batch was made.
type Attention uint8

const (
	// AttnF16 is llama.cpp's one-query flash attention step for step (the binary16
	// accumulator), which llama.cpp runs for decoding and for prompts of fewer
	// than 64 tokens: the numerics of the parity test.
	AttnF16 Attention = iota
	// AttnF32 accumulates in float32 over chunks of 64 positions
	// (kernels.AttendBlocksTileF32), the class of llama.cpp's tiled path for
	// ubatches of 64 queries or more; about half the cost per position.
	AttnF32
)

// AttnF32MinPrompt is llama.cpp's own threshold for its float32 tiled attention
// (GGML_FA_TILE_Q): the prompt length from which a request runs in AttnF32 mode by
// default (AttnF32MinPromptFor).
const AttnF32MinPrompt = 64

// AttentionFor is the attention of a sequence whose request's prompt has
// promptTokens tokens, when prompts of minPrompt tokens or more run in AttnF32 mode,
// prompt and generated tokens alike (minPrompt <= 0: none does; AttnF16 for all).
// minPrompt is a model's AttnF32MinPromptFor.
func AttentionFor(promptTokens, minPrompt int) Attention {
	if minPrompt > 0 && promptTokens >= minPrompt {
		return AttnF32
	}
	return AttnF16
}

// AttnF32MinPromptFor is the minPrompt of AttentionFor for a model of head size hd
// whose configuration says configured (a model's attention_f32_min_prompt):
// configured > 0 as it is, < 0 none (0: AttnF16 for every request), and 0 the
// default: AttnF32MinPrompt where the float32 attention runs on its assembly
// (kernels.FastAttnF32: AVX-512, head size 64), where it is faster than binary16
// for prefill and decoding alike (docs/PERFORMANCE.md); none elsewhere, where its
// Go reference would be slower than the binary16 kernels. The default thus depends
// on the CPU: replicas on CPUs with and without AVX-512 give a long prompt
// different bits (each is deterministic on its own).
func AttnF32MinPromptFor(configured, hd int) int {
	return attnF32Min(configured, kernels.FastAttnF32(hd))
}

// attnF32Min is AttnF32MinPromptFor where fast says whether the float32 kernels
// run on assembly.
func attnF32Min(configured int, fast bool) int {
	switch {
	case configured > 0:
		return configured
	case configured == 0 && fast:
		return AttnF32MinPrompt
	}
	return 0
}

// Pooling is how an embedding is made of a sequence's hidden states (llama.cpp's
// pooling_type values).
type Pooling int

const (
	PoolNone  Pooling = 0
	PoolMean  Pooling = 1
	PoolFirst Pooling = 2 // "cls": the first token's state
	PoolLast  Pooling = 3
)

// Batch runs many sequences through a Model in one pass over the weights: the
// iteration-level batch of the engine's scheduler, decodes and prefill chunks
// together, each sequence's KV in a paged kvcache.Pool. A Batch holds the
// activations' memory; it is not safe for concurrent use (one per replica).
type Batch struct {
	m     *Model
	w     scratch
	parts []part
	rows  [][]float32
}

// NewBatch returns a Batch for m.
func (m *Model) NewBatch() *Batch { return &Batch{m: m} }

// KVConfig is the KV geometry of the model, for kvcache.New; the caller sets the
// block size, the number of blocks and the warm tier.
func (m *Model) KVConfig() kvcache.Config {
	return kvcache.Config{Layers: m.cfg.Layers, KVHeads: m.cfg.KVHeads, HeadDim: m.cfg.HeadDim}
}

// Forward runs the items as one batch and returns, for each item, its wanted logits
// rows (Logits × Vocab values, token-major; nil when Logits is 0). The results live in
// the Batch's memory until the next Forward. Each sequence's logits are the same bits
// as when it runs alone, or through a State: nothing in a row's computation depends
// on the rest of the batch.
func (b *Batch) Forward(items []Item) ([][]float32, error) {
	if len(items) == 0 {
		return nil, fmt.Errorf("model: Forward of an empty batch")
	}
	b.parts = b.parts[:0]
	for i, it := range items {
		if it.KV == nil {
			return nil, fmt.Errorf("model: batch item %d has no KV sequence", i)
		}
		end := it.Start + len(it.Tokens)
		if it.Start < it.KV.Cached() || end > it.KV.Cap() {
			return nil, fmt.Errorf("model: batch item %d writes positions [%d, %d) but its KV holds [%d, %d) writable", i, it.Start, end, it.KV.Cached(), it.KV.Cap())
		}
		if end > b.m.cfg.Context {
			return nil, fmt.Errorf("%w: batch item %d reaches position %d of a context of %d", ErrContextFull, i, end, b.m.cfg.Context)
		}
		if it.Pool != PoolNone && len(it.Embed) != b.m.cfg.Dim {
			return nil, fmt.Errorf("model: batch item %d pools into %d values, the model's dimension is %d", i, len(it.Embed), b.m.cfg.Dim)
		}
		b.parts = append(b.parts, part{kv: paged{it.KV}, start: it.Start, tokens: it.Tokens, logits: it.Logits, pool: it.Pool, embed: it.Embed, attn: it.Attn, loras: it.LoRA})
	}
	out, err := b.w.forward(b.m, b.parts)
	if err != nil {
		return nil, err
	}
	b.rows = b.rows[:0]
	v := b.m.cfg.Vocab
	for _, it := range items {
		var r []float32
		if it.Logits > 0 {
			r, out = out[:it.Logits*v:it.Logits*v], out[it.Logits*v:]
		}
		b.rows = append(b.rows, r)
	}
	return b.rows, nil
}

// paged is a kvcache.Seq as a kvStore.
type paged struct{ s *kvcache.Seq }

func (p paged) row(pos, l int) (k, v []uint16) { return p.s.Row(pos, l) }

func (p paged) layer(l int, ks, vs [][]uint16) ([][]uint16, [][]uint16) {
	return p.s.Layer(l, ks, vs)
}

func (p paged) blockTokens() int { return p.s.BlockTokens() }

func (p paged) types() (k, v kernels.KVType) {
	c := p.s.Config()
	return c.TypeK, c.TypeV
}
