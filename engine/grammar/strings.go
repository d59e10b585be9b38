package grammar

import (
	"errors"
	"fmt"
	"strings"
	"sync"
)

// Bounds of counts: the largest minLength or maxLength of a string, and minItems
// or maxItems of an array (each count is a state of the matcher).
const (
	MaxLength = 4096
	MaxItems  = 4096
)

// formatRegex are the formats written as patterns (the rest, dates, times and uuid,
// are the fixed-length alternatives of format.go). Each is a practical subset of its
// RFC's shape: every string it accepts is valid, not every valid string is accepted.
var formatRegex = map[string]string{
	// RFC 5321's dot-atom local part (letters, digits, _ + -; at most 3 dot-separated
	// parts of 16) @ a domain of 1 to 3 labels and a top-level label of letters.
	"email": `[A-Za-z0-9_+-]{1,16}(\.[A-Za-z0-9_+-]{1,16}){0,2}@([A-Za-z0-9]([A-Za-z0-9-]{0,30}[A-Za-z0-9])?\.){1,3}[A-Za-z]{2,12}`,
	// RFC 1123 labels (letters, digits, inner hyphens; at most 50 bytes), 1 to 4 of them.
	"hostname": `[A-Za-z0-9]([A-Za-z0-9-]{0,48}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,48}[A-Za-z0-9])?){0,3}`,
	// Dotted decimal without leading zeros.
	"ipv4": `(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}`,
	// RFC 4291 text, lower-case hex, "::" compression; no embedded IPv4, no zone.
	"ipv6": `(H:){7}H|(H:){1,7}:|(H:){1,6}:H|(H:){1,5}(:H){1,2}|(H:){1,4}(:H){1,3}|(H:){1,3}(:H){1,4}|(H:){1,2}(:H){1,5}|H:(:H){1,6}|:((:H){1,7}|:)`,
	// RFC 3339 appendix A's duration, at most 4 digits per component.
	"duration": `P((D{1,4}D|D{1,4}M(D{1,4}D)?|D{1,4}Y(D{1,4}M(D{1,4}D)?)?)(T(D{1,4}H(D{1,4}M(D{1,4}S)?)?|D{1,4}M(D{1,4}S)?|D{1,4}S))?|T(D{1,4}H(D{1,4}M(D{1,4}S)?)?|D{1,4}M(D{1,4}S)?|D{1,4}S)|D{1,4}W)`,
}

func init() {
	formatRegex["ipv6"] = strings.ReplaceAll(formatRegex["ipv6"], "H", "[0-9a-f]{1,4}")
	// D (a digit) is written last: the duration's designators D and H are letters too.
	d := formatRegex["duration"]
	d = strings.NewReplacer("D{1,4}", "[0-9]{1,4}").Replace(d)
	formatRegex["duration"] = d
}

// stringDFA compiles a string schema with a pattern, a format or both, and lengths:
// the automaton of its JSON text, quotes included. ok is false when the schema has
// none of them (a plain string node does).
func (b *builder) stringDFA(s map[string]any, minLen, maxLen int, path string) (d *dfa, ok bool, err error) {
	var bodies []func(a *nfa) (frag, error)
	negate := []bool{false} // per body: a negative lookahead's
	if p, has := s["pattern"]; has {
		ps, isStr := p.(string)
		if !isStr {
			return nil, false, fmt.Errorf("%w: %s/pattern is not a string", ErrSchema, path)
		}
		rest, looks, err := leadingLookaheads(ps)
		if pe := (*patternError)(nil); errors.As(err, &pe) {
			return nil, false, fmt.Errorf("%w: \"pattern\" at %s: %s", pe.kind, path, pe.why)
		}
		bodies = append(bodies, func(a *nfa) (frag, error) { return a.compilePattern(rest) })
		for _, l := range looks {
			bodies = append(bodies, func(a *nfa) (frag, error) {
				f, err := a.compilePattern(l.re)
				return a.cat(f, a.star(a.jsonChar())), err
			})
			negate = append(negate, l.negative)
		}
	}
	if f, has := s["format"].(string); has {
		if fd := formatDFA(f); fd != nil {
			d = fd
		}
	}
	if len(bodies) == 0 && d == nil {
		return nil, false, nil
	}
	for i, body := range bodies {
		var a nfa
		f, err := body(&a)
		if pe := (*patternError)(nil); errors.As(err, &pe) {
			return nil, false, fmt.Errorf("%w: \"pattern\" at %s: %s", pe.kind, path, pe.why)
		} else if err != nil {
			return nil, false, fmt.Errorf("%w at %s", err, path)
		}
		x, err := a.determinize(a.cat(a.cat(a.bytes(`"`), f), a.bytes(`"`)))
		if errors.Is(err, errEmpty) {
			return nil, false, fmt.Errorf("%w: no string matches the pattern at %s", ErrSchema, path)
		} else if err != nil {
			return nil, false, fmt.Errorf("%w at %s", err, path)
		}
		if i < len(negate) && negate[i] {
			x = x.complement()
		}
		if d == nil {
			d = x
		} else if d, err = intersect(d, x); errors.Is(err, errEmpty) {
			return nil, false, fmt.Errorf("%w: no string meets the pattern (its lookaheads, the format) at %s", ErrSchema, path)
		} else if err != nil {
			return nil, false, fmt.Errorf("%w: the pattern (its lookaheads, the format) at %s", err, path)
		}
	}
	if minLen > 0 || maxLen >= 0 {
		l, err := lengthDFA(minLen, maxLen)
		if err != nil {
			return nil, false, fmt.Errorf("%w at %s", err, path)
		}
		if d, err = intersect(d, l); errors.Is(err, errEmpty) {
			return nil, false, fmt.Errorf("%w: no string of the pattern or format meets minLength and maxLength at %s", ErrSchema, path)
		} else if err != nil {
			return nil, false, fmt.Errorf("%w: the lengths with the pattern or format at %s", err, path)
		}
	}
	return d, true, nil
}

var formatDFAs struct {
	sync.Mutex
	m map[string]*dfa
}

// formatDFA is the automaton of a string of format f (quotes included), nil for a
// format the grammar does not enforce. Each is made once (email's takes tens of
// milliseconds) and shared: automata are never changed once made.
func formatDFA(f string) *dfa {
	re, isRegex := formatRegex[f]
	alts := formats[f]
	if !isRegex && alts == nil {
		return nil
	}
	formatDFAs.Lock()
	defer formatDFAs.Unlock()
	if d := formatDFAs.m[f]; d != nil {
		return d
	}
	var a nfa
	body := a.fixed(alts)
	if isRegex {
		var err error
		if body, err = a.compilePattern(re); err != nil {
			panic("grammar: format " + f + ": " + err.Error())
		}
	}
	d, err := a.determinize(a.cat(a.cat(a.bytes(`"`), body), a.bytes(`"`)))
	if err != nil {
		panic("grammar: format " + f + ": " + err.Error())
	}
	if formatDFAs.m == nil {
		formatDFAs.m = map[string]*dfa{}
	}
	formatDFAs.m[f] = d
	return d
}

// fixed is a fragment of a format's fixed-length alternatives.
func (a *nfa) fixed(alts [][]byteSet) frag {
	var fs []frag
	for _, alt := range alts {
		f := a.empty()
		for _, s := range alt {
			f = a.cat(f, a.set(s))
		}
		fs = append(fs, f)
	}
	return a.alt(fs...)
}

// lengthDFA is the automaton of a JSON string of minLen to maxLen characters (maxLen
// < 0: no bound), quotes included, characters as class writes them.
func lengthDFA(minLen, maxLen int) (*dfa, error) {
	var a nfa
	ch, err := a.determinize(a.jsonChar())
	if err != nil {
		return nil, err
	}
	top := maxLen
	if maxLen < 0 {
		top = minLen
	}
	n := len(ch.states)
	if (top+1)*n+2 > 4*maxDFAStates {
		return nil, fmt.Errorf("%w: lengths up to %d with a pattern or format (the automaton would pass %d states)", ErrUnsupported, top, 4*maxDFAStates)
	}
	id := func(c, s int) int32 { return int32(1 + c*n + s) }
	end := int32(1 + (top+1)*n)
	d := &dfa{states: make([]dstate, end+1)}
	var quote byteSet
	quote.add('"', '"')
	d.states[0].edges = []dedge{{quote, id(0, 0)}}
	d.states[end].final = true
	for c := 0; c <= top; c++ {
		for s, st := range ch.states {
			if st.final {
				continue
			}
			out := &d.states[id(c, s)]
			if s == 0 && c >= minLen {
				out.edges = append(out.edges, dedge{quote, end})
			}
			for _, e := range st.edges {
				if !ch.states[e.to].final {
					out.edges = append(out.edges, dedge{e.set, id(c, int(e.to))})
					continue
				}
				nc := c + 1
				if nc > top {
					if maxLen >= 0 {
						continue
					}
					nc = top
				}
				out.edges = append(out.edges, dedge{e.set, id(nc, 0)})
			}
		}
	}
	return d.trim()
}

type lookahead struct {
	re       string
	negative bool
}

// leadingLookaheads splits the lookaheads at the start of pattern p (after an
// optional ^) from the rest: (?=R) and (?!R) there say whether the string starts
// with a match of R, which is an automaton too (zod's email pattern starts with two).
// Lookaheads elsewhere stay in the pattern, where the parser refuses them.
func leadingLookaheads(p string) (string, []lookahead, error) {
	var out []lookahead
	rest := strings.TrimPrefix(p, "^")
	for strings.HasPrefix(rest, "(?=") || strings.HasPrefix(rest, "(?!") {
		depth, class := 0, false
		end := -1
		for i := 0; i < len(rest) && end < 0; i++ {
			switch c := rest[i]; {
			case c == '\\':
				i++
			case class:
				class = c != ']'
			case c == '[':
				class = true
			case c == '(':
				depth++
			case c == ')':
				if depth--; depth == 0 {
					end = i
				}
			}
		}
		if end < 0 {
			return "", nil, &patternError{ErrUnsupported, "an unclosed lookahead"}
		}
		out = append(out, lookahead{re: rest[3:end], negative: rest[2] == '!'})
		rest = rest[end+1:]
	}
	if len(out) == 0 {
		return p, nil, nil
	}
	return "^" + rest, out, nil
}
