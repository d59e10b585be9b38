package grammar

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"
)

// An automaton node (kDFA) is a deterministic automaton over the bytes of one JSON
// value: a string's text, quotes included (pattern, format, lengths with them), or a
// number's (bounds, multipleOf). A frame's aux is its state. Every state can reach a
// final one (trim), so a matcher never enters a state it cannot finish; a final state
// with edges may still end (a number followed by ',' or '}'), and one without edges
// ends at once (a string's closing quote).
//
// Automata are built as NFAs of byte sets and ε-edges (Thompson's construction), then
// made deterministic by the subset construction, capped at maxDFAStates states each.

// Limits of the automata.
const (
	maxDFAStates = 1 << 15 // states of one automaton
	maxNFAStates = 1 << 16
)

// errEmpty is an automaton that accepts nothing.
var errEmpty = fmt.Errorf("%w: no value matches", ErrSchema)

type dfa struct {
	states []dstate
}

type dstate struct {
	edges []dedge
	final bool
}

type dedge struct {
	set byteSet
	to  int32
}

// stepDFA feeds c to a kDFA frame.
func (g *Grammar) stepDFA(f *frame, nd *node, c byte) (action, int32) {
	d := &g.dfas[nd.dfa]
	st := &d.states[f.aux]
	for i := range st.edges {
		if e := &st.edges[i]; e.set.has(c) {
			f.aux = e.to
			if t := &d.states[e.to]; t.final && len(t.edges) == 0 {
				return actPop, 0
			}
			return actConsume, 0
		}
	}
	if st.final {
		return actPopRefeed, 0
	}
	return actReject, 0
}

// nfa is a Thompson automaton under construction.
type nfa struct {
	states []nstate
	err    error
}

type nstate struct {
	eps   []int32
	edges []dedge
}

// frag is a piece of an NFA: its start and its one exit (a state without edges).
type frag struct{ in, out int32 }

func (a *nfa) state() int32 {
	if len(a.states) >= maxNFAStates {
		if a.err == nil {
			a.err = fmt.Errorf("%w: an automaton of more than %d states", ErrUnsupported, maxNFAStates)
		}
		return 0
	}
	a.states = append(a.states, nstate{})
	return int32(len(a.states) - 1)
}

func (a *nfa) eps(from, to int32) {
	if a.err == nil {
		a.states[from].eps = append(a.states[from].eps, to)
	}
}

// set is a fragment accepting one byte of s.
func (a *nfa) set(s byteSet) frag {
	in, out := a.state(), a.state()
	if a.err == nil {
		a.states[in].edges = append(a.states[in].edges, dedge{s, out})
	}
	return frag{in, out}
}

func (a *nfa) bytes(text string) frag {
	f := a.empty()
	for i := 0; i < len(text); i++ {
		var s byteSet
		s.add(text[i], text[i])
		f = a.cat(f, a.set(s))
	}
	return f
}

func (a *nfa) empty() frag {
	s := a.state()
	return frag{s, s}
}

func (a *nfa) cat(x, y frag) frag {
	a.eps(x.out, y.in)
	return frag{x.in, y.out}
}

func (a *nfa) alt(fs ...frag) frag {
	in, out := a.state(), a.state()
	for _, f := range fs {
		a.eps(in, f.in)
		a.eps(f.out, out)
	}
	return frag{in, out}
}

func (a *nfa) opt(x frag) frag { return a.alt(x, a.empty()) }

func (a *nfa) star(x frag) frag {
	in, out := a.state(), a.state()
	a.eps(in, x.in)
	a.eps(in, out)
	a.eps(x.out, x.in)
	a.eps(x.out, out)
	return frag{in, out}
}

// repeat is x{min,max} (max < 0: unbounded), with build making a fresh copy of x.
func (a *nfa) repeat(build func() frag, min, max int) frag {
	f := a.empty()
	for i := 0; i < min && a.err == nil; i++ {
		f = a.cat(f, build())
	}
	if max < 0 {
		return a.cat(f, a.star(build()))
	}
	// Each further copy may be the last: an ε-edge to the end before it, so that the
	// automaton and its closures stay linear in max.
	end := a.state()
	cur := f.out
	for i := min; i < max && a.err == nil; i++ {
		x := build()
		a.eps(cur, x.in)
		a.eps(cur, end)
		cur = x.out
	}
	a.eps(cur, end)
	return frag{f.in, end}
}

// determinize makes the DFA of fragment f (its exit the one final state), trimmed.
func (a *nfa) determinize(f frag) (*dfa, error) {
	if a.err != nil {
		return nil, a.err
	}
	mark := make([]uint32, len(a.states)) // visited in the closure of stamp
	stamp := uint32(0)
	var stack []int32
	closure := func(set []int32) []int32 {
		stamp++
		var out []int32
		stack = append(stack[:0], set...)
		for len(stack) > 0 {
			s := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if mark[s] == stamp {
				continue
			}
			mark[s] = stamp
			out = append(out, s)
			stack = append(stack, a.states[s].eps...)
		}
		slices.Sort(out)
		return out
	}
	keyOf := func(set []int32) string {
		b := make([]byte, 0, 4*len(set))
		for _, s := range set {
			b = binary.LittleEndian.AppendUint32(b, uint32(s))
		}
		return string(b)
	}
	d := &dfa{}
	index := map[string]int32{}
	var sets [][]int32
	add := func(set []int32) (int32, error) {
		k := keyOf(set)
		if i, ok := index[k]; ok {
			return i, nil
		}
		if len(d.states) >= maxDFAStates {
			return 0, fmt.Errorf("%w: an automaton of more than %d states", ErrUnsupported, maxDFAStates)
		}
		i := int32(len(d.states))
		index[k] = i
		sets = append(sets, set)
		final := false
		for _, s := range set {
			if s == f.out {
				final = true
			}
		}
		d.states = append(d.states, dstate{final: final})
		return i, nil
	}
	if _, err := add(closure([]int32{f.in})); err != nil {
		return nil, err
	}
	for i := 0; i < len(d.states); i++ {
		var targets [256][]int32
		for _, s := range sets[i] {
			for _, e := range a.states[s].edges {
				for w := 0; w < 4; w++ {
					for x := e.set[w]; x != 0; x &= x - 1 {
						c := w<<6 | bits.TrailingZeros64(x)
						targets[c] = append(targets[c], e.to)
					}
				}
			}
		}
		// Bytes with the same NFA targets go to the same state: one closure per group.
		groups := map[string]int{} // the targets' key -> the edge of d.states[i]
		for c := 0; c < 256; c++ {
			if len(targets[c]) == 0 {
				continue
			}
			k := keyOf(targets[c])
			e, ok := groups[k]
			if !ok {
				t, err := add(closure(targets[c]))
				if err != nil {
					return nil, err
				}
				// Another group may close to the same state: share its edge.
				e = -1
				for j, x := range d.states[i].edges {
					if x.to == t {
						e = j
					}
				}
				if e < 0 {
					e = len(d.states[i].edges)
					d.states[i].edges = append(d.states[i].edges, dedge{to: t})
				}
				groups[k] = e
			}
			d.states[i].edges[e].set.add(byte(c), byte(c))
		}
	}
	return d.trim()
}

// trim removes the states that cannot reach a final state, and renumbers the rest
// (the start stays 0). A DFA whose start cannot reach one matches nothing.
func (d *dfa) trim() (*dfa, error) {
	n := len(d.states)
	rev := make([][]int32, n)
	for i, s := range d.states {
		for _, e := range s.edges {
			rev[e.to] = append(rev[e.to], int32(i))
		}
	}
	live := make([]bool, n)
	var work []int32
	for i, s := range d.states {
		if s.final {
			live[i] = true
			work = append(work, int32(i))
		}
	}
	for len(work) > 0 {
		s := work[len(work)-1]
		work = work[:len(work)-1]
		for _, p := range rev[s] {
			if !live[p] {
				live[p] = true
				work = append(work, p)
			}
		}
	}
	if n == 0 || !live[0] {
		return nil, errEmpty
	}
	// Renumber the live states reachable from the start, in order of discovery.
	id := make([]int32, n)
	for i := range id {
		id[i] = -1
	}
	order := []int32{0}
	id[0] = 0
	for k := 0; k < len(order); k++ {
		for _, e := range d.states[order[k]].edges {
			if live[e.to] && id[e.to] < 0 {
				id[e.to] = int32(len(order))
				order = append(order, e.to)
			}
		}
	}
	out := &dfa{states: make([]dstate, len(order))}
	for k, old := range order {
		s := d.states[old]
		ns := dstate{final: s.final}
		for _, e := range s.edges {
			if live[e.to] {
				ns.edges = append(ns.edges, dedge{e.set, id[e.to]})
			}
		}
		out.states[k] = ns
	}
	return out, nil
}

// complement is the DFA of the byte strings d refuses (not trimmed: intersect it).
func (d *dfa) complement() *dfa {
	n := int32(len(d.states))
	out := &dfa{states: make([]dstate, n+1)}
	var all byteSet
	all.add(0, 255)
	for i, s := range d.states {
		var covered byteSet
		ns := dstate{final: !s.final}
		for _, e := range s.edges {
			ns.edges = append(ns.edges, e)
			for w := range covered {
				covered[w] |= e.set[w]
			}
		}
		var rest byteSet
		for w := range rest {
			rest[w] = ^covered[w]
		}
		if rest != (byteSet{}) {
			ns.edges = append(ns.edges, dedge{rest, n})
		}
		out.states[i] = ns
	}
	out.states[n] = dstate{final: true, edges: []dedge{{all, n}}}
	return out
}

// intersect is the product of two DFAs: the texts both accept, trimmed.
func intersect(x, y *dfa) (*dfa, error) {
	type pair struct{ a, b int32 }
	index := map[pair]int32{{0, 0}: 0}
	pairs := []pair{{0, 0}}
	d := &dfa{states: []dstate{{}}}
	for i := 0; i < len(pairs); i++ {
		p := pairs[i]
		sx, sy := &x.states[p.a], &y.states[p.b]
		d.states[i].final = sx.final && sy.final
		for _, ex := range sx.edges {
			for _, ey := range sy.edges {
				var s byteSet
				empty := true
				for w := range s {
					s[w] = ex.set[w] & ey.set[w]
					if s[w] != 0 {
						empty = false
					}
				}
				if empty {
					continue
				}
				q := pair{ex.to, ey.to}
				t, ok := index[q]
				if !ok {
					if len(pairs) >= maxDFAStates {
						return nil, fmt.Errorf("%w: an automaton of more than %d states", ErrUnsupported, maxDFAStates)
					}
					t = int32(len(pairs))
					index[q] = t
					pairs = append(pairs, q)
					d.states = append(d.states, dstate{})
				}
				d.states[i].edges = append(d.states[i].edges, dedge{s, t})
			}
		}
	}
	return d.trim()
}
