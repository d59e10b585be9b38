package main

import (
	"fmt"
	"os"
	"time"

	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/engine/grammar"
	"github.com/lmlite/lmlite/engine/sample"
	"github.com/lmlite/lmlite/engine/tokenizer"
)

// grammarBench constrains the bench's decode with a grammar, as the engine does per
// sequence: each step takes the sequence's token mask, samples over it (greedy) and
// advances the grammar; a sequence whose output completes starts a new one.
type grammarBench struct {
	g         *grammar.Grammar
	vocab     *grammar.Vocab
	ms        []*grammar.Matcher
	smp       []*sample.Sampler
	completed int
}

func newGrammarBench(f *gguf.File, spec string, parallel int) (*grammarBench, error) {
	if spec == "" {
		return nil, nil
	}
	var g *grammar.Grammar
	if spec == "json" {
		g = grammar.JSONObject()
	} else {
		src, err := os.ReadFile(spec)
		if err != nil {
			return nil, fmt.Errorf("--grammar: %w", err)
		}
		if g, err = grammar.CompileSchema(src); err != nil {
			return nil, fmt.Errorf("--grammar: %w", err)
		}
	}
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		return nil, err
	}
	pieces := make([]string, tok.VocabSize())
	var eog []int32
	for id := range pieces {
		pieces[id] = tok.Piece(int32(id))
		if tok.IsEOG(int32(id)) {
			eog = append(eog, int32(id))
		}
	}
	gb := &grammarBench{g: g, vocab: grammar.NewVocab(pieces, eog, 0)}
	for range parallel {
		gb.ms = append(gb.ms, gb.vocab.NewMatcher(g))
		gb.smp = append(gb.smp, sample.New(sample.Params{}))
	}
	return gb, nil
}

// step picks each sequence's next token under its mask and returns the time spent
// on the grammar (masks and advancing it) and on the masked sampling.
func (gb *grammarBench) step(out [][]float32, next []int32) (grammarTime, sampleTime time.Duration) {
	for s := range next {
		m := gb.ms[s]
		t0 := time.Now()
		bits, n := m.Mask()
		t1 := time.Now()
		grammarTime += t1.Sub(t0)
		if n == 0 {
			gb.ms[s] = gb.vocab.NewMatcher(gb.g)
			next[s] = next[(s+1)%len(next)]
			continue
		}
		id := gb.smp[s].SampleMasked(out[s], nil, bits)
		t2 := time.Now()
		sampleTime += t2.Sub(t1)
		if !m.Accept(id) || m.Done() {
			gb.completed++
			gb.ms[s] = gb.vocab.NewMatcher(gb.g)
		}
		grammarTime += time.Since(t2)
		next[s] = id
	}
	return grammarTime, sampleTime
}
