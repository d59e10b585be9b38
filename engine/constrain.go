package engine

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/lmlite/lmlite/engine/grammar"
	"github.com/lmlite/lmlite/engine/tokenizer"
)

// This file holds what the OpenAI features need from a model beyond generation:
// compiled grammars (structured outputs), the vocabulary as bytes (token masks,
// logprobs' token text) and the end-of-generation tokens (ignore_eos).

// CompileSchema compiles a JSON Schema for Request.Grammar (see grammar.CompileSchema
// for the subset and its errors, grammar.ErrSchema and grammar.ErrUnsupported). A
// schema is compiled once: the same text returns the same Grammar. It does not
// depend on a model.
func (b *Block) CompileSchema(schema []byte) (*grammar.Grammar, error) {
	return b.schemas.Compile(schema)
}

// vocabInfo is a model's vocabulary as the features see it, built on first use.
type vocabInfo struct {
	once   sync.Once
	pieces []string // each token's bytes ("" for control tokens)
	eog    []int32  // the end-of-generation tokens
	vocab  *grammar.Vocab
	built  atomic.Bool // the fields above are set (read them without once)
}

func (v *vocabInfo) get(tok *tokenizer.Tokenizer) *vocabInfo {
	v.once.Do(func() {
		n := tok.VocabSize()
		v.pieces = make([]string, n)
		for id := range n {
			v.pieces[id] = tok.Piece(int32(id))
			if tok.IsEOG(int32(id)) {
				v.eog = append(v.eog, int32(id))
			}
		}
		v.vocab = grammar.NewVocab(v.pieces, v.eog, 0)
		v.built.Store(true)
	})
	return v
}

// maskStats is the vocabulary's mask cache's figures (zero before the first use).
func (v *vocabInfo) maskStats() grammar.MaskCacheStats {
	if !v.built.Load() {
		return grammar.MaskCacheStats{}
	}
	return v.vocab.MaskCacheStats()
}

// checkFeatures validates a request's feature fields.
func checkFeatures(req *Request) error {
	if req.TopLogprobs < 0 || req.TopLogprobs > MaxTopLogprobs {
		return fmt.Errorf("engine: top logprobs %d is outside [0, %d]", req.TopLogprobs, MaxTopLogprobs)
	}
	return nil
}
