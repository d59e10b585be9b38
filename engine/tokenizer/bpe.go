package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// GPT-2's byte-to-unicode table: byte-level BPE vocabularies spell every byte as a
// printable character, the printable ASCII and Latin-1 bytes as themselves and the
// others as U+0100 onwards, in byte order.
var (
	byteToRune [256]rune
	runeToByte = map[rune]byte{}
)

func init() {
	n := rune(0)
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = 256 + n
			n++
		}
		runeToByte[byteToRune[b]] = byte(b)
	}
}

// encodeByteLevel spells s's bytes in GPT-2's byte-to-unicode alphabet.
func encodeByteLevel(sb *strings.Builder, s string) {
	sb.Reset()
	sb.Grow(2 * len(s))
	for i := 0; i < len(s); i++ {
		sb.WriteRune(byteToRune[s[i]])
	}
}

// decodeByteLevel undoes encodeByteLevel. A character outside the alphabet (a token
// that was not byte-encoded) is kept as it is.
func decodeByteLevel(w string) string {
	var b []byte
	for _, r := range w {
		if c, ok := runeToByte[r]; ok {
			b = append(b, c)
		} else {
			b = utf8.AppendRune(b, r)
		}
	}
	return string(b)
}

// symbol is a run of the word being merged, a node of a doubly linked list.
type symbol struct {
	start, n   int // bytes of the word; n == 0 once merged into its left neighbour
	prev, next int // -1 at the ends
}

// bigram is a candidate merge of two neighbouring symbols. For BPE the key is the
// merge's rank (lower first), for SPM the joined token's score (higher first); ties
// go to the leftmost pair. size detects a stale candidate: the symbols only grow.
type bigram struct {
	left, right int
	size        int
	rank        int32   // BPE
	score       float32 // SPM
}

// bigramHeap is a binary heap of bigrams ordered by less.
type bigramHeap struct {
	items []bigram
	less  func(a, b *bigram) bool
}

func (h *bigramHeap) push(b bigram) {
	h.items = append(h.items, b)
	i := len(h.items) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(&h.items[i], &h.items[p]) {
			break
		}
		h.items[i], h.items[p] = h.items[p], h.items[i]
		i = p
	}
}

func (h *bigramHeap) pop() bigram {
	top := h.items[0]
	last := len(h.items) - 1
	h.items[0] = h.items[last]
	h.items = h.items[:last]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < last && h.less(&h.items[l], &h.items[m]) {
			m = l
		}
		if r < last && h.less(&h.items[r], &h.items[m]) {
			m = r
		}
		if m == i {
			break
		}
		h.items[i], h.items[m] = h.items[m], h.items[i]
		i = m
	}
	return top
}

func bpeLess(a, b *bigram) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.left < b.left)
}

func spmLess(a, b *bigram) bool {
	return a.score > b.score || (a.score == b.score && a.left < b.left)
}

// encoder holds one Encode call's scratch space.
type encoder struct {
	syms []symbol
	heap bigramHeap
	sb   strings.Builder

	limit int  // EncodeCapped's limit; 0: none
	past  bool // the text is known to be over limit
}

// over reports whether the text being encoded into out is past the encoder's limit.
func (e *encoder) over(out []int32) bool { return e.past || (e.limit > 0 && len(out) > e.limit) }

// splitChars makes one symbol per UTF-8 character of word, measuring characters by
// their first byte as llama.cpp does (so invalid UTF-8 never loops).
func (e *encoder) splitChars(word string) {
	e.syms = e.syms[:0]
	for off := 0; off < len(word); {
		n := utf8Len(word[off])
		if n > len(word)-off {
			n = len(word) - off
		}
		i := len(e.syms)
		e.syms = append(e.syms, symbol{start: off, n: n, prev: i - 1, next: i + 1})
		off += n
	}
	if k := len(e.syms); k > 0 {
		e.syms[k-1].next = -1
	}
}

// utf8Len is the length of the UTF-8 sequence that starts with byte c (1 for a stray
// continuation byte).
func utf8Len(c byte) int {
	switch {
	case c < 0xC0:
		return 1
	case c < 0xE0:
		return 2
	case c < 0xF0:
		return 3
	default:
		return 4
	}
}

// merge runs the merge loop over e.syms: pop the best candidate, join its symbols,
// offer the new symbol's pairs with its neighbours, until no candidate is left.
func (e *encoder) merge(add func(left, right int)) {
	for i := 1; i < len(e.syms); i++ {
		add(i-1, i)
	}
	for len(e.heap.items) > 0 {
		b := e.heap.pop()
		l, r := &e.syms[b.left], &e.syms[b.right]
		if l.n == 0 || r.n == 0 || l.n+r.n != b.size {
			continue
		}
		l.n += r.n
		r.n = 0
		l.next = r.next
		if r.next >= 0 {
			e.syms[r.next].prev = b.left
		}
		if l.prev >= 0 {
			add(l.prev, b.left)
		}
		if l.next >= 0 {
			add(b.left, l.next)
		}
	}
}

// encodeBPE appends the tokens of raw text s (no special tokens in it) to out.
func (t *Tokenizer) encodeBPE(e *encoder, s string, out []int32) []int32 {
	runes := []rune(s)
	ends := t.pre.split(runes)
	start := 0
	for _, end := range ends {
		if e.over(out) {
			return out
		}
		encodeByteLevel(&e.sb, string(runes[start:end]))
		start = end
		out = t.bpeWord(e, e.sb.String(), out)
	}
	return out
}

// bpeWord appends the tokens of one byte-encoded word.
func (t *Tokenizer) bpeWord(e *encoder, word string, out []int32) []int32 {
	if t.ignoreMerges {
		if id, ok := t.toID[word]; ok {
			return append(out, id)
		}
	}
	e.splitChars(word)
	e.heap.items = e.heap.items[:0]
	e.heap.less = bpeLess
	e.merge(func(left, right int) {
		l, r := e.syms[left], e.syms[right]
		rank, ok := t.ranks[mergeKey{word[l.start : l.start+l.n], word[r.start : r.start+r.n]}]
		if ok {
			e.heap.push(bigram{left: left, right: right, size: l.n + r.n, rank: rank})
		}
	})
	return t.emitSymbols(e, word, out)
}

// emitSymbols appends the tokens of the symbols left in e.syms after merging word. A
// symbol that is not a token is spelled byte by byte with t.byteTokens; bytes
// without a token are dropped.
func (t *Tokenizer) emitSymbols(e *encoder, word string, out []int32) []int32 {
	for i := 0; len(e.syms) > 0 && i >= 0; i = e.syms[i].next {
		s := e.syms[i]
		w := word[s.start : s.start+s.n]
		if id, ok := t.toID[w]; ok {
			out = append(out, id)
			continue
		}
		for j := 0; j < len(w); j++ {
			if id := t.byteTokens[w[j]]; id >= 0 {
				out = append(out, id)
			}
		}
	}
	return out
}
