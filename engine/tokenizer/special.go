package tokenizer

import (
	"math"
	"sort"
)

// trie finds every occurrence of a set of special-token texts in one pass.
type trie struct {
	nodes []trieNode
	order []int32   // the tokens, longest text first: the partition's order
	first [256]bool // the first bytes of the texts: a walk starts only at one
}

type trieNode struct {
	next map[byte]int32
	k    int32 // order[k] is the token ending here; -1 if none
}

func (t *Tokenizer) newTrie(ids []int32) *trie {
	// llama.cpp partitions by the longest special tokens first.
	ids = append([]int32(nil), ids...)
	sort.SliceStable(ids, func(a, b int) bool { return len(t.texts[ids[a]]) > len(t.texts[ids[b]]) })
	tr := &trie{nodes: []trieNode{{k: -1}}, order: ids}
	for k, id := range ids {
		w := t.texts[id]
		n := int32(0)
		for i := 0; i < len(w); i++ {
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
		tr.nodes[n].k = int32(k)
		if len(w) > 0 {
			tr.first[w[0]] = true
		}
	}
	return tr
}

// fragment is a piece of the text to encode: raw text [start, end) or one token.
type fragment struct {
	start, end int
	tok        int32 // -1 for raw text
}

// occurrence is one match of a special token in the text.
type occurrence struct {
	pos   int32
	order int32 // the token is tr.order[order]
}

// partition splits text into raw fragments and special tokens the way llama.cpp's
// tokenizer_st_partition does: special tokens are taken in order of decreasing
// length, each at its leftmost non-overlapping occurrences within what is still raw
// text; a token with the lstrip/rstrip attribute swallows the whitespace beside it.
func (t *Tokenizer) partition(text string, tr *trie) []fragment {
	if len(tr.order) == 0 || len(text) > math.MaxInt32 { // (positions are int32)
		if text == "" {
			return nil
		}
		return []fragment{{0, len(text), -1}}
	}
	var occ []occurrence
	for p := 0; p < len(text); p++ {
		if !tr.first[text[p]] {
			continue
		}
		n := int32(0)
		for i := p; i < len(text); i++ {
			nx, ok := tr.nodes[n].next[text[i]]
			if !ok {
				break
			}
			n = nx
			if k := tr.nodes[n].k; k >= 0 {
				occ = append(occ, occurrence{int32(p), k})
			}
		}
	}
	if len(occ) == 0 {
		if text == "" {
			return nil
		}
		return []fragment{{0, len(text), -1}}
	}
	// By token in partition order, then by position: a counting sort, stable, and
	// the occurrences were found in order of position.
	next := make([]int, len(tr.order)+1) // where the next occurrence of each token goes
	for _, o := range occ {
		next[o.order+1]++
	}
	for k := 1; k < len(next); k++ {
		next[k] += next[k-1]
	}
	sorted := make([]occurrence, len(occ))
	for _, o := range occ {
		sorted[next[o.order]] = o
		next[o.order]++
	}
	occ = sorted
	// taken[i] is 0 for raw text, 1 for text swallowed by a special token.
	taken := make([]byte, len(text))
	var toks []fragment
	for _, o := range occ {
		tok := tr.order[o.order]
		pos := int(o.pos)
		end := pos + len(t.texts[tok])
		free := true
		for i := pos; i < end; i++ {
			if taken[i] != 0 {
				free = false
				break
			}
		}
		if !free {
			continue
		}
		for i := pos; i < end; i++ {
			taken[i] = 1
		}
		start := pos
		if t.lstrip[tok] {
			for start > 0 && taken[start-1] == 0 && isSpaceByte(text[start-1]) {
				start--
				taken[start] = 1
			}
		}
		if t.rstrip[tok] {
			for end < len(text) && taken[end] == 0 && isSpaceByte(text[end]) {
				taken[end] = 1
				end++
			}
		}
		toks = append(toks, fragment{pos, pos + len(t.texts[tok]), tok})
	}
	sort.Slice(toks, func(a, b int) bool { return toks[a].start < toks[b].start })
	var out []fragment
	emitRaw := func(from, to int) {
		// the raw text between two tokens, minus what a strip swallowed
		for from < to && taken[from] != 0 {
			from++
		}
		for to > from && taken[to-1] != 0 {
			to--
		}
		if from < to {
			out = append(out, fragment{from, to, -1})
		}
	}
	prev := 0
	for _, f := range toks {
		emitRaw(prev, f.start)
		out = append(out, f)
		prev = f.end
	}
	emitRaw(prev, len(text))
	return out
}

// isSpaceByte is C's isspace in the C locale, which llama.cpp's strip uses.
func isSpaceByte(c byte) bool {
	return c == ' ' || (c >= '\t' && c <= '\r')
}
