package tokenizer

import "strings"

// encodeSPM appends the tokens of raw text s (already space-prefixed as the caller
// decided) to out: SentencePiece's BPE over scores, as llama.cpp's SPM tokenizer does
// it. Spaces become '▁'; characters start as one symbol each; the neighbouring pair
// whose join is the highest-scoring token merges first; a final symbol that is not a
// token is spelled in byte tokens.
func (t *Tokenizer) encodeSPM(e *encoder, s string, out []int32) []int32 {
	text := strings.ReplaceAll(s, " ", "▁")
	e.splitChars(text)
	e.heap.items = e.heap.items[:0]
	e.heap.less = spmLess
	e.merge(func(left, right int) {
		l, r := e.syms[left], e.syms[right]
		id, ok := t.toID[text[l.start:r.start+r.n]]
		if ok {
			e.heap.push(bigram{left: left, right: right, size: l.n + r.n, score: t.score[id]})
		}
	})
	return t.emitSymbols(e, text, out)
}
