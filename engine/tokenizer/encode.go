package tokenizer

import (
	"strings"
	"sync"
)

var encoders = sync.Pool{New: func() any { return new(encoder) }}

// Encode returns the tokens of text. With addBOS the vocabulary's BOS token (if it
// has one) comes first; callers normally pass t.AddBOS(). No EOS is added (callers
// that honour AddEOS append EOS themselves). With
// parseSpecial the texts of control tokens in text become those tokens; without it
// they are tokenized as plain text. User-defined tokens are always matched, as in
// llama.cpp and Hugging Face tokenizers.
func (t *Tokenizer) Encode(text string, addBOS, parseSpecial bool) []int32 {
	tr := t.specialUser
	if parseSpecial {
		tr = t.specialAll
	}
	return t.encode(text, addBOS, tr, "")
}

// encode is Encode with the special tokens of tr. A raw fragment (text between two
// special tokens) that holds mark is a quoted text (see Quoter): the marks are
// removed and the rest is encoded as plain text.
func (t *Tokenizer) encode(text string, addBOS bool, tr *trie, mark string) []int32 {
	out := make([]int32, 0, len(text)/3+2)
	if addBOS && t.bos >= 0 {
		out = append(out, t.bos)
	}
	e := encoders.Get().(*encoder)
	defer encoders.Put(e)
	prevSpecial := true // SentencePiece: a space prefix at the start and after a special token
	return t.encodeParts(e, out, text, tr, mark, &prevSpecial)
}

func (t *Tokenizer) encodeParts(e *encoder, out []int32, text string, tr *trie, mark string, prevSpecial *bool) []int32 {
	for _, f := range t.partition(text, tr) {
		if f.tok >= 0 {
			out = append(out, f.tok)
			*prevSpecial = true
			continue
		}
		raw := text[f.start:f.end]
		if mark != "" && strings.Contains(raw, mark) {
			out = t.encodeParts(e, out, strings.ReplaceAll(raw, mark, ""), t.specialUser, "", prevSpecial)
			continue
		}
		switch t.kind {
		case kindSPM:
			if t.addSpacePrefix && *prevSpecial {
				raw = " " + raw
			}
			out = t.encodeSPM(e, raw, out)
		case kindBPE:
			out = t.encodeBPE(e, raw, out)
		}
		*prevSpecial = false
	}
	return out
}
