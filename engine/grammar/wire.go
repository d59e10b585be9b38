package grammar

import (
	"encoding/json"
	"fmt"
)

// A Grammar crosses process boundaries as JSON (the engine's workers mode sends a
// request's grammar to the worker that runs it): MarshalJSON writes the compiled
// form, UnmarshalJSON reads it back, so the worker needs neither the schema nor a
// second compile, and the key (which names the grammar in mask caches) is kept.

type wireGrammar struct {
	Key                                 string         `json:"key"`
	Nodes                               []wireNode     `json:"nodes"`
	Tries                               []wireTnode    `json:"tries"`
	DFAs                                [][]wireDstate `json:"dfas,omitempty"`
	Root                                int32          `json:"root"`
	Any, AnyObj, AnyArr, Str, Num, Lits int32
	Prefix, Suffix                      []byte `json:",omitempty"`
}

type wireNode struct {
	Kind     kind          `json:"k"`
	Props    []int32       `json:",omitempty"`
	KeyTrie  []int32       `json:",omitempty"`
	CanClose []bool        `json:",omitempty"`
	Addl     int32         `json:",omitempty"`
	Items    int32         `json:",omitempty"`
	MinItems int           `json:",omitempty"`
	MaxItems int           `json:",omitempty"`
	MinLen   int           `json:",omitempty"`
	MaxLen   int           `json:",omitempty"`
	Alts     [][][4]uint64 `json:",omitempty"`
	Trie     int32         `json:",omitempty"`
	AnyOf    []int32       `json:",omitempty"`
	DFA      int32         `json:",omitempty"`
}

type wireDstate struct {
	Final bool        `json:"f,omitempty"`
	Sets  [][4]uint64 `json:"s,omitempty"`
	To    []int32     `json:"t,omitempty"`
}

type wireTnode struct {
	Bytes []byte  `json:"b,omitempty"`
	To    []int32 `json:"t,omitempty"`
	Val   int32   `json:"v"`
}

// MarshalJSON writes the compiled grammar.
func (g *Grammar) MarshalJSON() ([]byte, error) {
	w := wireGrammar{Key: g.key, Root: g.root, Any: g.anyNode, AnyObj: g.anyObj, AnyArr: g.anyArr, Str: g.str, Num: g.num,
		Lits: g.lits, Prefix: g.prefix, Suffix: g.suffix}
	for _, n := range g.nodes {
		wn := wireNode{Kind: n.kind, Props: n.props, KeyTrie: n.keyTrie, CanClose: n.canClose, Addl: n.addl, Items: n.items,
			MinItems: n.minItems, MaxItems: n.maxItems, MinLen: n.minLen, MaxLen: n.maxLen, Trie: n.trie, AnyOf: n.anyOf, DFA: n.dfa}
		for _, alt := range n.alts {
			sets := make([][4]uint64, len(alt))
			for i, s := range alt {
				sets[i] = s
			}
			wn.Alts = append(wn.Alts, sets)
		}
		w.Nodes = append(w.Nodes, wn)
	}
	for _, d := range g.dfas {
		var ws []wireDstate
		for _, st := range d.states {
			w := wireDstate{Final: st.final}
			for _, e := range st.edges {
				w.Sets = append(w.Sets, e.set)
				w.To = append(w.To, e.to)
			}
			ws = append(ws, w)
		}
		w.DFAs = append(w.DFAs, ws)
	}
	for _, t := range g.tries {
		wt := wireTnode{Val: t.val}
		for _, e := range t.edges {
			wt.Bytes = append(wt.Bytes, e.b)
			wt.To = append(wt.To, e.to)
		}
		w.Tries = append(w.Tries, wt)
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads a grammar MarshalJSON wrote. Its indexes are checked, so a
// corrupt form is an error, never a panic later in the matcher.
func (g *Grammar) UnmarshalJSON(b []byte) error {
	var w wireGrammar
	if err := json.Unmarshal(b, &w); err != nil {
		return fmt.Errorf("grammar: %w", err)
	}
	nn, nt := int32(len(w.Nodes)), int32(len(w.Tries))
	isNode := func(i int32) bool { return i >= 0 && i < nn }
	isTrie := func(i int32) bool { return i >= -1 && i < nt }
	ng := Grammar{key: w.Key, root: w.Root, anyNode: w.Any, anyObj: w.AnyObj, anyArr: w.AnyArr, str: w.Str, num: w.Num,
		lits: w.Lits, prefix: w.Prefix, suffix: w.Suffix}
	for _, i := range []int32{w.Root, w.Any, w.AnyObj, w.AnyArr, w.Str, w.Num, w.Lits} {
		if !isNode(i) {
			return fmt.Errorf("grammar: node %d out of %d", i, nn)
		}
	}
	for _, wn := range w.Nodes {
		n := node{kind: wn.Kind, props: wn.Props, keyTrie: wn.KeyTrie, canClose: wn.CanClose, addl: wn.Addl, items: wn.Items,
			minItems: wn.MinItems, maxItems: wn.MaxItems, minLen: wn.MinLen, maxLen: wn.MaxLen, trie: wn.Trie, anyOf: wn.AnyOf, dfa: wn.DFA}
		if n.kind > kDFA || (n.kind == kDFA && (n.dfa < 0 || int(n.dfa) >= len(w.DFAs))) || (n.kind == kObject && n.props == nil && !isNode(n.addl)) || (n.kind == kArray && !isNode(n.items)) ||
			(n.kind == kLiteral && !isTrie(n.trie)) {
			return fmt.Errorf("grammar: a corrupt node")
		}
		for _, lists := range [][]int32{n.props, n.anyOf} {
			for _, i := range lists {
				if !isNode(i) {
					return fmt.Errorf("grammar: node %d out of %d", i, nn)
				}
			}
		}
		for _, i := range n.keyTrie {
			if !isTrie(i) {
				return fmt.Errorf("grammar: trie %d out of %d", i, nt)
			}
		}
		for _, alt := range wn.Alts {
			sets := make([]byteSet, len(alt))
			for i, s := range alt {
				sets[i] = s
			}
			n.alts = append(n.alts, sets)
		}
		ng.nodes = append(ng.nodes, n)
	}
	for _, ws := range w.DFAs {
		var d dfa
		for _, st := range ws {
			if len(st.Sets) != len(st.To) {
				return fmt.Errorf("grammar: a corrupt automaton")
			}
			ds := dstate{final: st.Final}
			for i := range st.Sets {
				if st.To[i] < 0 || int(st.To[i]) >= len(ws) {
					return fmt.Errorf("grammar: a corrupt automaton")
				}
				ds.edges = append(ds.edges, dedge{set: st.Sets[i], to: st.To[i]})
			}
			d.states = append(d.states, ds)
		}
		if len(d.states) == 0 {
			return fmt.Errorf("grammar: an empty automaton")
		}
		ng.dfas = append(ng.dfas, d)
	}
	for _, wt := range w.Tries {
		if len(wt.Bytes) != len(wt.To) {
			return fmt.Errorf("grammar: a corrupt trie")
		}
		t := tnode{val: wt.Val}
		for i := range wt.Bytes {
			if wt.To[i] < 0 || wt.To[i] >= nt {
				return fmt.Errorf("grammar: trie %d out of %d", wt.To[i], nt)
			}
			t.edges = append(t.edges, tedge{b: wt.Bytes[i], to: wt.To[i]})
		}
		ng.tries = append(ng.tries, t)
	}
	// The shared nodes of free JSON are what the matcher takes them for (a kAny frame
	// becomes one of them), and anyOfs are flat, as CompileSchema makes them: so no
	// grammar read here can send a matcher round a cycle that writes nothing.
	for _, s := range []struct {
		i    int32
		want kind
	}{{ng.anyNode, kAny}, {ng.anyObj, kObject}, {ng.anyArr, kArray}, {ng.str, kString}, {ng.num, kNumber}, {ng.lits, kLiteral}} {
		if ng.nodes[s.i].kind != s.want {
			return fmt.Errorf("grammar: a corrupt shared node")
		}
	}
	if err := ng.checkFlat(); err != nil {
		return err
	}
	*g = ng
	return nil
}
