package grammar

import (
	"fmt"
	"strings"
)

// flatten replaces each anyOf's alternatives by the nodes that are not anyOfs it
// reaches through nested anyOfs and $refs (a $ref is an anyOf of one alternative),
// in order and without repeats. So a matcher forks once where a value starts and
// never follows anyOfs into anyOfs: the work of entering a value is bounded by
// MaxAlts, however the schema nests or shares its alternatives (a chain of
// anyOf [a, a] would otherwise fork 2^n times).
//
// An anyOf that reaches itself is a cycle that writes no byte: {"$ref": "#"}, or
// a → b → a through $ref, anyOf or allOf. No finite value matches it, and a matcher
// would go round it forever, so it is refused (ErrCycle) with the cycle's schema
// paths. Recursion that writes first (an array's items, an object's property) is no
// cycle: those nodes are frames that consume a byte before they push the next value.
//
// The walk recurses once per anyOf on the current path, so at most once per node
// (MaxNodes and a few more).
func (b *builder) flatten() error {
	g := b.g
	const (
		unseen uint8 = iota
		onPath
		done
	)
	mark := make([]uint8, len(g.nodes))
	leaves := make([][]int32, len(g.nodes))
	var path []int32
	var visit func(n int32) error
	visit = func(n int32) error {
		switch mark[n] {
		case done:
			return nil
		case onPath:
			i := len(path) - 1
			for path[i] != n {
				i--
			}
			return b.cycleError(append(path[i:], n))
		}
		mark[n] = onPath
		path = append(path, n)
		var out []int32
		for _, alt := range g.nodes[n].anyOf {
			if g.nodes[alt].kind != kAnyOf {
				out = appendNew(out, alt)
				continue
			}
			if err := visit(alt); err != nil {
				return err
			}
			for _, l := range leaves[alt] {
				out = appendNew(out, l)
			}
		}
		if len(out) > MaxAlts {
			return fmt.Errorf("%w: %s has more than %d alternatives (anyOf, type lists and $refs flattened)",
				ErrUnsupported, b.where[n], MaxAlts)
		}
		path = path[:len(path)-1]
		mark[n] = done
		leaves[n] = out
		return nil
	}
	for n := range g.nodes {
		if g.nodes[n].kind == kAnyOf {
			if err := visit(int32(n)); err != nil {
				return err
			}
		}
	}
	for n := range g.nodes {
		if g.nodes[n].kind == kAnyOf {
			g.nodes[n].anyOf = leaves[n]
		}
	}
	return nil
}

// appendNew appends n to list unless it holds it already.
func appendNew(list []int32, n int32) []int32 {
	for _, x := range list {
		if x == n {
			return list
		}
	}
	return append(list, n)
}

// cycleError names the schema paths of a cycle of anyOf nodes (its first node again
// at its end).
func (b *builder) cycleError(cycle []int32) error {
	var names []string
	for _, n := range cycle {
		w := b.where[n]
		if w == "" {
			w = "#"
		}
		if len(names) == 0 || names[len(names)-1] != w {
			names = append(names, w)
		}
	}
	if len(names) == 1 {
		names = append(names, names[0])
	}
	return fmt.Errorf("%w: a cycle of $ref, anyOf or allOf that writes nothing: %s (a value would contain itself before any byte of it; recursion must go through an object's property or an array's items)",
		ErrCycle, strings.Join(names, " → "))
}

// checkFlat reports a grammar whose anyOfs are not flat (an alternative is itself an
// anyOf), which CompileSchema never makes: a grammar read from elsewhere (its wire
// form) must be flat too, so no matcher follows anyOfs into anyOfs.
func (g *Grammar) checkFlat() error {
	for _, n := range g.nodes {
		if n.kind != kAnyOf {
			continue
		}
		if len(n.anyOf) > MaxAlts {
			return fmt.Errorf("grammar: an anyOf of %d alternatives", len(n.anyOf))
		}
		for _, alt := range n.anyOf {
			if g.nodes[alt].kind == kAnyOf {
				return fmt.Errorf("grammar: an anyOf nested in an anyOf")
			}
		}
	}
	return nil
}

// finite refuses a grammar whose root has no finite value: every value must contain
// another of itself, through required properties or arrays with minItems (the tool
// call {"name": ..., "arguments": {"$ref": "#"}}, for instance). A matcher would
// write such an output until the token limit. It finds the nodes that have a finite
// value, from the free values up (an object once its required properties have one,
// an array with minItems once its items have one, an anyOf once an alternative
// has): a worklist over the nodes' parents, linear in the grammar's size.
func (b *builder) finite(root int32) error {
	g := b.g
	ok := make([]bool, len(g.nodes))
	need := make([]int, len(g.nodes)) // children still without a finite value that a node needs
	parents := make([][]int32, len(g.nodes))
	var work []int32
	for i := range g.nodes {
		n := &g.nodes[i]
		switch n.kind {
		case kObject:
			for j, p := range n.props {
				if b.req[int32(i)][j] {
					need[i]++
					parents[p] = append(parents[p], int32(i))
				}
			}
		case kArray:
			if n.minItems > 0 {
				need[i] = 1
				parents[n.items] = append(parents[n.items], int32(i))
			}
		case kAnyOf:
			need[i] = 1
			for _, a := range n.anyOf {
				parents[a] = append(parents[a], int32(i))
			}
		}
		if need[i] == 0 {
			ok[i] = true
			work = append(work, int32(i))
		}
	}
	for len(work) > 0 {
		c := work[len(work)-1]
		work = work[:len(work)-1]
		for _, p := range parents[c] {
			if ok[p] {
				continue
			}
			if need[p]--; need[p] == 0 {
				ok[p] = true
				work = append(work, p)
			}
		}
	}
	if !ok[root] {
		return fmt.Errorf("%w: no finite value matches the schema: each value must contain another through required properties or minItems", ErrCycle)
	}
	return nil
}
