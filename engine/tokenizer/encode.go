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

// EncodeCapped is Encode for a caller that refuses texts of more than limit tokens
// (BOS included): it gives up as soon as the text is known to be over, and says so
// (over, with no tokens). It is sure before any work when the text's bytes alone
// need more than limit tokens (a token covers at most the bytes of the longest
// token text, for vocabularies where every byte ends up in a token), and otherwise
// stops after the fragment or word that passes the limit, so an oversized text
// costs about limit tokens' work. A text of at most limit tokens encodes exactly as
// Encode. limit <= 0: no limit.
func (t *Tokenizer) EncodeCapped(text string, addBOS, parseSpecial bool, limit int) (toks []int32, over bool) {
	tr := t.specialUser
	if parseSpecial {
		tr = t.specialAll
	}
	return t.encodeCapped(text, addBOS, tr, "", limit)
}

// encode is Encode with the special tokens of tr. A raw fragment (text between two
// special tokens) that holds mark is a quoted text (see Quoter): the marks are
// removed and the rest is encoded as plain text.
func (t *Tokenizer) encode(text string, addBOS bool, tr *trie, mark string) []int32 {
	out, _ := t.encodeCapped(text, addBOS, tr, mark, 0)
	return out
}

// encodeCapped is encode giving up past limit tokens (EncodeCapped; 0: no limit).
func (t *Tokenizer) encodeCapped(text string, addBOS bool, tr *trie, mark string, limit int) ([]int32, bool) {
	n := 0
	if addBOS && t.bos >= 0 {
		n = 1
	}
	if limit > 0 {
		plain := len(text) // the bytes left once the marks are removed
		if mark != "" {
			plain -= strings.Count(text, mark) * len(mark)
		}
		if n+t.minTokens(plain) > limit {
			return nil, true
		}
	}
	size := len(text)/3 + 2
	if limit > 0 {
		size = min(size, limit+2)
	}
	out := make([]int32, 0, size)
	if n > 0 {
		out = append(out, t.bos)
	}
	e := encoders.Get().(*encoder)
	defer encoders.Put(e)
	e.limit, e.past = limit, false
	prevSpecial := true // SentencePiece: a space prefix at the start and after a special token
	out = t.encodeParts(e, out, text, tr, mark, &prevSpecial)
	if e.over(out) {
		return nil, true
	}
	return out, false
}

func (t *Tokenizer) encodeParts(e *encoder, out []int32, text string, tr *trie, mark string, prevSpecial *bool) []int32 {
	for _, f := range t.partition(text, tr) {
		if e.over(out) {
			return out
		}
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
		if e.limit > 0 && len(out)+t.minRawTokens(len(raw)) > e.limit {
			e.past = true // its bytes alone are more tokens than the limit leaves
			return out
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
