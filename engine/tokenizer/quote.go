package tokenizer

import (
	"errors"
	"sort"
	"strings"
	"unicode/utf8"
)

// Quoting: texts from a request inside a prompt that is parsed for special tokens.
//
// A chat prompt is the chat template's output: the template's markup (<|im_start|>,
// <|eot_id|> ...) must become control tokens, while the messages it embeds are
// plain text, even when a user types "<|im_end|><|im_start|>system". The template
// may transform the messages (strip, split, slice), so their place in the output
// cannot be tracked; instead, before rendering, every text from the request is
// quoted: a mark (one private-use character found in none of the prompt's texts) is
// put after the first character of every control-token text in it, and at its
// edges where a control-token text could be completed by the markup beside it. No
// control-token text is left in the quoted texts, so in the rendered prompt they can
// come only from the template. Encode then parses the special tokens of the prompt
// and encodes each raw piece that holds a mark, marks removed, as plain text.
// Where a text holds no control-token text it is not changed, so the template sees
// what the user wrote.
//
// A control token whose text is one character cannot be broken by a mark; a quoted
// prompt treats such tokens as plain text, also in the markup. Residual risk: a
// template that builds a control-token text by rearranging a message (reversing it,
// say) makes it a control token.

// ErrNoMark is returned by NewQuoter when every candidate mark occurs in the texts.
var ErrNoMark = errors.New("tokenizer: no quoting mark is free")

// Marks are taken from Supplementary Private Use Area-A, the first one free.
const (
	markFirst = 0xF0000
	markLast  = 0xFFFFD
)

// A Quoter quotes the texts of one prompt and encodes the prompt. It is for one
// prompt: the mark it picks is free in the texts given to NewQuoter only.
type Quoter struct {
	t    *Tokenizer
	mark string
}

// NewQuoter returns a Quoter for a prompt made of avoid: every text that may end up
// in the prompt other than through Quote (the template's source, its variables)
// and every text that will be quoted. Its mark occurs in none of them and in no
// special token.
func (t *Tokenizer) NewQuoter(avoid ...string) (*Quoter, error) {
	used := map[rune]bool{}
	note := func(s string) {
		for i := 0; i < len(s); {
			if s[i] < 0xF3 { // every rune from U+F0000 starts with 0xF3 or 0xF4
				i++
				continue
			}
			r, n := utf8.DecodeRuneInString(s[i:])
			if r >= markFirst && r <= markLast {
				used[r] = true
			}
			i += n
		}
	}
	for _, s := range avoid {
		note(s)
	}
	for _, id := range t.specialAll.order {
		note(t.texts[id])
	}
	for r := rune(markFirst); r <= markLast; r++ {
		if !used[r] {
			return &Quoter{t: t, mark: string(r)}, nil
		}
	}
	return nil, ErrNoMark
}

// Mark is the quoting mark (for tests and diagnostics).
func (q *Quoter) Mark() string { return q.mark }

// Quote returns s with the mark after the first character of every control- or
// unknown-token text in it, before s when s begins with the end of such a text,
// and after s when s ends with the beginning of one. s is returned as it is when
// it needs no mark.
func (q *Quoter) Quote(s string) string {
	t := q.t
	tr := t.quotable
	if len(tr.order) == 0 || s == "" {
		return s
	}
	var at []int // byte offsets in s where a mark goes
	for p := 0; p < len(s); p++ {
		if !tr.first[s[p]] {
			continue
		}
		n := int32(0)
		for i := p; i < len(s); i++ {
			nx, ok := tr.nodes[n].next[s[i]]
			if !ok {
				break
			}
			n = nx
			if tr.nodes[n].k >= 0 {
				_, size := utf8.DecodeRuneInString(s[p:])
				at = append(at, p+size)
				break
			}
			if i == len(s)-1 { // s ends with the start of a control-token text
				at = append(at, len(s))
			}
		}
	}
	// s begins with the end of a control-token text: walk the texts backwards.
	rv := t.quotableRev
	for k := 1; k <= len(s) && k <= rv.depth; k++ {
		n, whole := int32(0), true
		for i := k - 1; i >= 0; i-- {
			nx, ok := rv.nodes[n].next[s[i]]
			if !ok {
				whole = false
				break
			}
			n = nx
		}
		if whole {
			at = append(at, 0)
			break
		}
	}
	if len(at) == 0 {
		return s
	}
	sort.Ints(at)
	var sb strings.Builder
	sb.Grow(len(s) + len(at)*len(q.mark))
	prev := 0
	for i, p := range at {
		if i > 0 && p == at[i-1] {
			continue
		}
		sb.WriteString(s[prev:p])
		sb.WriteString(q.mark)
		prev = p
	}
	sb.WriteString(s[prev:])
	return sb.String()
}

// Encode returns the tokens of a prompt whose request texts were quoted with q:
// special tokens are parsed in the prompt (except one-character control tokens),
// and the raw text around a mark is plain text, marks removed. With addBOS the
// vocabulary's BOS token (if it has one) comes first.
func (q *Quoter) Encode(text string, addBOS bool) []int32 {
	return q.t.encode(text, addBOS, q.t.specialQuoted, q.mark)
}

// EncodeCapped is Encode giving up once the prompt is known to be over limit tokens,
// as Tokenizer.EncodeCapped does.
func (q *Quoter) EncodeCapped(text string, addBOS bool, limit int) (toks []int32, over bool) {
	return q.t.encodeCapped(text, addBOS, q.t.specialQuoted, q.mark, limit)
}

// revTrie holds texts backwards, for matching the end of a text.
type revTrie struct {
	nodes []trieNode
	depth int // the longest text
}

func newRevTrie(texts []string) *revTrie {
	tr := &revTrie{nodes: []trieNode{{k: -1}}}
	for _, w := range texts {
		tr.depth = max(tr.depth, len(w))
		n := int32(0)
		for i := len(w) - 1; i >= 1; i-- { // proper suffixes only: the whole text is a match
			nx, ok := tr.nodes[n].next[w[i]]
			if !ok {
				if tr.nodes[n].next == nil {
					tr.nodes[n].next = map[byte]int32{}
				}
				nx = int32(len(tr.nodes))
				tr.nodes = append(tr.nodes, trieNode{k: -1})
				tr.nodes[n].next[w[i]] = nx
			}
			n = nx
		}
	}
	return tr
}
