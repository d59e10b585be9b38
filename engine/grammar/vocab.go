package grammar

import (
	"slices"
	"strings"
	"sync"
)

// DefaultMaskCacheBytes is the default bound of a Vocab's mask cache.
const DefaultMaskCacheBytes = 16 << 20

// Vocab is a model's vocabulary as byte strings, for token masks: a trie of the
// tokens' bytes, walked against a matcher's state to find the tokens the grammar
// allows next, and a cache of the masks found, keyed by grammar and state. The
// cache is shared by every matcher of the vocabulary (all requests of a model); it
// is bounded and emptied when full. A mask is a pure function of the grammar and
// the state, so the cache changes the cost of a step, never its result. A Vocab is
// safe for concurrent use.
type Vocab struct {
	size   int
	pieces []string
	eog    []uint64 // bit set of the end-of-generation tokens
	nodes  []vnode  // the trie; nodes[0] is the root (the empty string)
	ids    []int32  // token ids sorted by bytes: a node's tokens are ids[tok0:tok0+tokN]

	mu    sync.Mutex // guards cache and bytes
	cache map[string]mask
	bytes int
	limit int
}

type vnode struct {
	first, next int32 // first child, next sibling (-1: none)
	tok0, tokN  int32
	b           byte
}

type mask struct {
	bits []uint64
	n    int
}

// NewVocab indexes a vocabulary: pieces[id] is the bytes token id stands for (""
// for control tokens, which a grammar never allows), eog the end-of-generation
// tokens (allowed where the output may end). cacheBytes bounds the mask cache (0:
// DefaultMaskCacheBytes).
func NewVocab(pieces []string, eog []int32, cacheBytes int) *Vocab {
	if cacheBytes <= 0 {
		cacheBytes = DefaultMaskCacheBytes
	}
	v := &Vocab{size: len(pieces), pieces: pieces, eog: make([]uint64, (len(pieces)+63)/64),
		cache: map[string]mask{}, limit: cacheBytes}
	for _, id := range eog {
		if id >= 0 && int(id) < len(pieces) {
			v.eog[id>>6] |= 1 << (id & 63)
		}
	}
	for id, p := range pieces {
		if p != "" && !v.isEOG(int32(id)) {
			v.ids = append(v.ids, int32(id))
		}
	}
	slices.SortStableFunc(v.ids, func(a, b int32) int { return strings.Compare(pieces[a], pieces[b]) })
	v.nodes = append(v.nodes, vnode{first: -1, next: -1})
	path := []int32{0}  // path[d]: the node of the previous token's first d bytes
	last := []int32{-1} // last child of each node, while building
	prev := ""
	for i, id := range v.ids {
		p := pieces[id]
		l := 0
		for l < len(p) && l < len(prev) && p[l] == prev[l] {
			l++
		}
		path = path[:l+1]
		for d := l; d < len(p); d++ {
			parent := path[d]
			n := int32(len(v.nodes))
			v.nodes = append(v.nodes, vnode{first: -1, next: -1, b: p[d], tok0: -1})
			last = append(last, -1)
			if last[parent] < 0 {
				v.nodes[parent].first = n
			} else {
				v.nodes[last[parent]].next = n
			}
			last[parent] = n
			path = append(path, n)
		}
		at := path[len(p)]
		if v.nodes[at].tokN == 0 {
			v.nodes[at].tok0 = int32(i)
		}
		v.nodes[at].tokN++
		prev = p
	}
	return v
}

// Size is the number of tokens; masks have (Size+63)/64 words.
func (v *Vocab) Size() int { return v.size }

func (v *Vocab) isEOG(id int32) bool { return v.eog[id>>6]&(1<<(id&63)) != 0 }

// NewMatcher returns a matcher at the start of g's output over this vocabulary.
func (v *Vocab) NewMatcher(g *Grammar) *Matcher {
	m := &Matcher{g: g, v: v}
	m.reset()
	return m
}

// Mask returns the tokens the grammar allows next, as a bit set (bit id%64 of word
// id/64), and how many there are: the end-of-generation tokens where the output may
// end, and every token whose bytes continue the output. The bit set is shared:
// read it, never write it. Once the state has been seen (by any matcher of the
// vocabulary with the same grammar) it comes from the cache without allocating.
func (m *Matcher) Mask() ([]uint64, int) {
	v := m.v
	m.key = m.appendKey(append(m.key[:0], m.g.key...))
	v.mu.Lock()
	e, ok := v.cache[string(m.key)]
	v.mu.Unlock()
	if ok {
		return e.bits, e.n
	}
	e = mask{bits: make([]uint64, (v.size+63)/64)}
	if !m.Done() {
		m.level(0).copyFrom(m)
		e.n = m.walk(0, 0, e.bits)
	}
	if m.Accepting() && !m.ended {
		for w, x := range v.eog {
			e.bits[w] |= x
			for ; x != 0; x &= x - 1 {
				e.n++
			}
		}
	}
	v.mu.Lock()
	if v.bytes+len(e.bits)*8 > v.limit {
		clear(v.cache)
		v.bytes = 0
	}
	v.cache[string(m.key)] = e
	v.bytes += len(e.bits)*8 + len(m.key)
	v.mu.Unlock()
	return e.bits, e.n
}

// level is the scratch matcher of trie depth d.
func (m *Matcher) level(d int) *Matcher {
	for len(m.levels) <= d {
		m.levels = append(m.levels, &Matcher{g: m.g})
	}
	return m.levels[d]
}

// walk visits the children of trie node at depth d, whose state is level d, sets
// the bits of the tokens the grammar allows and returns their count.
func (m *Matcher) walk(at int32, d int, bits []uint64) int {
	v := m.v
	n := 0
	parent := m.level(d)
	for ch := v.nodes[at].first; ch >= 0; ch = v.nodes[ch].next {
		lv := m.level(d + 1)
		lv.copyFrom(parent)
		if !lv.Feed(v.nodes[ch].b) {
			continue
		}
		nd := &v.nodes[ch]
		for _, id := range v.ids[max(nd.tok0, 0) : max(nd.tok0, 0)+nd.tokN] {
			bits[id>>6] |= 1 << (id & 63)
			n++
		}
		if nd.first >= 0 {
			n += m.walk(ch, d+1, bits)
		}
	}
	return n
}

// Accept advances the matcher by token id's bytes (or ends it with an
// end-of-generation token) and reports whether the grammar allows the token.
func (m *Matcher) Accept(id int32) bool {
	v := m.v
	if id < 0 || int(id) >= v.size {
		return false
	}
	if v.isEOG(id) {
		if m.ended || !m.Accepting() {
			return false
		}
		m.ended = true
		return true
	}
	p := v.pieces[id]
	if p == "" {
		return false
	}
	for i := 0; i < len(p); i++ {
		if !m.Feed(p[i]) {
			return false
		}
	}
	return true
}
