package grammar

import (
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
)

// DefaultMaskCacheBytes is the default bound of a Vocab's mask cache.
const DefaultMaskCacheBytes = 16 << 20

// Vocab is a model's vocabulary as byte strings, for token masks: a trie of the
// tokens' bytes, walked against a matcher's state to find the tokens the grammar
// allows next, and a cache of the masks found, keyed by grammar and state. The
// cache is shared by every matcher of the vocabulary (all requests of a model); it
// is bounded per grammar (a quarter of the whole: a grammar that fills its share
// empties its own masks) and in all (the grammar used least recently goes first).
// A mask is a pure function of the grammar and the state, so the cache changes the
// cost of a step, never its result. A Vocab is safe for concurrent use.
type Vocab struct {
	size   int
	pieces []string
	eog    []uint64 // bit set of the end-of-generation tokens
	nodes  []vnode  // the trie; nodes[0] is the root (the empty string)
	ids    []int32  // token ids sorted by bytes: a node's tokens are ids[tok0:tok0+tokN]

	cache *maskCache
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
		cache: newMaskCache(cacheBytes)}
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
// Mask has no budget; MaskWithin has.
func (m *Matcher) Mask() ([]uint64, int) {
	bits, n, _, _ := m.MaskWithin(0, nil)
	return bits, n
}

// CachedMask is Mask when the vocabulary's cache holds the state's mask (a map
// lookup, without allocating), and ok false, having done nothing more, when not.
func (m *Matcher) CachedMask() (bits []uint64, n int, ok bool) {
	m.key = m.appendKey(m.key[:0])
	e, ok := m.v.cache.get(m.g.key, m.key)
	return e.bits, e.n, ok
}

// Errors of MaskWithin.
var (
	ErrBudget  = errors.New("grammar: the mask's work is over its budget")
	ErrStopped = errors.New("grammar: the mask's computation was stopped")
)

// MaskWithin is Mask with a budget: it stops with ErrBudget once the walk has taken
// more than limit steps (0: no limit), and with ErrStopped soon after stop is set (nil:
// never), and reports the steps it took (0 for a cached mask). A walk given a stop
// flag runs beside other work (the engine's batch step): every 4,096 steps (~0.15 ms)
// it also yields its processor (runtime.Gosched), so that a goroutine of the step's
// forward pass waiting for one gets it at once rather than at the scheduler's next
// preemption. A step is one trie
// node visited, weighed by the matcher's live alternatives (each is fed the node's
// byte): the walk's work, the same on every machine, so a budget stops a grammar at
// the same token every time. A mask not finished is not cached; the matcher's state
// is unchanged either way.
func (m *Matcher) MaskWithin(limit int64, stop *atomic.Bool) (bits []uint64, n int, steps int64, err error) {
	if bits, n, ok := m.CachedMask(); ok {
		return bits, n, 0, nil
	}
	v := m.v
	e := mask{bits: make([]uint64, (v.size+63)/64)}
	if !m.Done() {
		m.level(0).copyFrom(m)
		w := walker{limit: limit, stop: stop}
		e.n = m.walk(&w, 0, 0, e.bits)
		if w.err != nil {
			return nil, 0, w.steps, w.err
		}
		steps = w.steps
	}
	if m.Accepting() && !m.ended {
		for w, x := range v.eog {
			e.bits[w] |= x
			for ; x != 0; x &= x - 1 {
				e.n++
			}
		}
	}
	v.cache.put(m.g.key, m.key, e) // m.key: the state's, from CachedMask
	return e.bits, e.n, steps, nil
}

// MaskCacheStats reports the mask cache's lookups and contents.
func (v *Vocab) MaskCacheStats() MaskCacheStats { return v.cache.stats() }

// walker is one mask walk's budget and progress.
type walker struct {
	limit, steps int64
	stop         *atomic.Bool
	err          error
}

// stopCheckSteps is how often (in steps) a walk looks at its stop flag.
const stopCheckSteps = 1 << 12

// spend counts k steps and reports whether the walk must stop.
func (w *walker) spend(k int64) bool {
	before := w.steps
	w.steps += k
	switch {
	case w.limit > 0 && w.steps > w.limit:
		w.err = ErrBudget
	case w.stop != nil && (before == 0 || before/stopCheckSteps != w.steps/stopCheckSteps):
		if w.stop.Load() {
			w.err = ErrStopped
		} else if before != 0 {
			runtime.Gosched()
		}
	}
	return w.err != nil
}

// level is the scratch matcher of trie depth d.
func (m *Matcher) level(d int) *Matcher {
	for len(m.levels) <= d {
		m.levels = append(m.levels, &Matcher{g: m.g})
	}
	return m.levels[d]
}

// walk visits the children of trie node at depth d, whose state is level d, sets
// the bits of the tokens the grammar allows and returns their count; it stops,
// with w.err set, when w says so.
func (m *Matcher) walk(w *walker, at int32, d int, bits []uint64) int {
	v := m.v
	n := 0
	parent := m.level(d)
	cost := int64(max(len(parent.st.stacks), 1))
	for ch := v.nodes[at].first; ch >= 0; ch = v.nodes[ch].next {
		if w.spend(cost) {
			return n
		}
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
			if n += m.walk(w, ch, d+1, bits); w.err != nil {
				return n
			}
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
