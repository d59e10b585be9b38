package grammar

import (
	"fmt"
	"regexp/syntax"
	"strings"
	"unicode"
	"unicode/utf8"
)

// A string's pattern is parsed by regexp/syntax (Perl flags: the syntax JSON Schema's
// ECMA-262 patterns mostly share) and compiled into an automaton over the string's
// JSON text: each character of a class becomes its UTF-8 bytes, or its escape where
// JSON needs one ("\"", "\\", control characters). The output matches the pattern as
// a whole, as if anchored (^ at its start and $ at its end are allowed and change
// nothing), which implies the unanchored search JSON Schema asks for. Supported:
// literals, classes ([a-z], [^...], \d \w \s and their negations, Unicode classes),
// ., groups, alternation, * + ? {m,n} (bounded: regexp/syntax refuses counts past
// 1000). Refused (ErrUnsupported): backreferences and lookaround (the parser refuses
// them), ^ or $ inside the pattern, \b and \B.

// maxPatternDepth bounds the recursion over a parsed pattern (regexp/syntax refuses
// patterns nested deeper than 1000 itself).
const maxPatternDepth = 1000

// regexFrag compiles the parsed regexp re into a fragment of a.
func (a *nfa) regexFrag(re *syntax.Regexp, depth int) (frag, error) {
	if depth > maxPatternDepth {
		return frag{}, &patternError{ErrUnsupported, fmt.Sprintf("nested deeper than %d", maxPatternDepth)}
	}
	if a.err != nil {
		return frag{}, a.err
	}
	switch re.Op {
	case syntax.OpEmptyMatch:
		return a.empty(), nil
	case syntax.OpLiteral:
		f := a.empty()
		for _, r := range re.Rune {
			ranges := []rune{r, r}
			if re.Flags&syntax.FoldCase != 0 {
				for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
					ranges = append(ranges, f, f)
				}
			}
			f = a.cat(f, a.class(ranges))
		}
		return f, nil
	case syntax.OpCharClass:
		return a.class(re.Rune), nil
	case syntax.OpAnyChar:
		return a.class([]rune{0, unicode.MaxRune}), nil
	case syntax.OpAnyCharNotNL:
		// ECMA-262's . stops at every line terminator, not only \n.
		return a.class([]rune{0, '\n' - 1, '\n' + 1, '\r' - 1, '\r' + 1, 0x2027, 0x202A, unicode.MaxRune}), nil
	case syntax.OpCapture:
		return a.regexFrag(re.Sub[0], depth+1)
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest:
		sub, err := a.regexFrag(re.Sub[0], depth+1)
		if err != nil {
			return frag{}, err
		}
		switch re.Op {
		case syntax.OpStar:
			return a.star(sub), nil
		case syntax.OpQuest:
			return a.opt(sub), nil
		}
		again, err := a.regexFrag(re.Sub[0], depth+1)
		if err != nil {
			return frag{}, err
		}
		return a.cat(sub, a.star(again)), nil
	case syntax.OpRepeat:
		var err error
		f := a.repeat(func() frag {
			x, e := a.regexFrag(re.Sub[0], depth+1)
			if e != nil && err == nil {
				err = e
			}
			return x
		}, re.Min, re.Max)
		return f, err
	case syntax.OpConcat:
		f := a.empty()
		for _, s := range re.Sub {
			x, err := a.regexFrag(s, depth+1)
			if err != nil {
				return frag{}, err
			}
			f = a.cat(f, x)
		}
		return f, nil
	case syntax.OpAlternate:
		var fs []frag
		for _, s := range re.Sub {
			x, err := a.regexFrag(s, depth+1)
			if err != nil {
				return frag{}, err
			}
			fs = append(fs, x)
		}
		return a.alt(fs...), nil
	case syntax.OpNoMatch:
		return frag{}, &patternError{ErrSchema, "it matches nothing"}
	}
	return frag{}, &patternError{ErrUnsupported, opName(re.Op) + " (the supported subset: literals, classes, ., groups, |, * + ? {m,n}, ^ and $ at the ends, lookaheads at the start)"}
}

// patternError is a pattern the grammar cannot compile: ErrUnsupported (outside the
// subset) or ErrSchema (matches nothing), and why.
type patternError struct {
	kind error
	why  string
}

func (e *patternError) Error() string { return e.why }
func (e *patternError) Unwrap() error { return e.kind }

func opName(op syntax.Op) string {
	switch op {
	case syntax.OpBeginLine, syntax.OpBeginText:
		return "^ inside the pattern"
	case syntax.OpEndLine, syntax.OpEndText:
		return "$ inside the pattern"
	case syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return `\b or \B`
	}
	return "an unsupported operator"
}

// compilePattern compiles a pattern into the fragment of a string's body (no quotes).
func (a *nfa) compilePattern(p string) (frag, error) {
	for _, l := range []string{"(?=", "(?!", "(?<=", "(?<!"} {
		if strings.Contains(p, l) {
			return frag{}, &patternError{ErrUnsupported, "a lookaround " + l + "...) (only lookaheads at the start are supported)"}
		}
	}
	re, err := syntax.Parse(p, syntax.Perl)
	if err != nil {
		return frag{}, &patternError{ErrUnsupported, err.Error()}
	}
	// Not simplified: repeats stay OpRepeat, which repeat builds linearly (Simplify
	// would nest x{1,1000} a thousand levels deep).
	// Strip ^ and $ at the ends: the whole string matches anyway.
	isBegin := func(r *syntax.Regexp) bool { return r.Op == syntax.OpBeginText || r.Op == syntax.OpBeginLine }
	isEnd := func(r *syntax.Regexp) bool { return r.Op == syntax.OpEndText || r.Op == syntax.OpEndLine }
	switch {
	case isBegin(re) || isEnd(re):
		return a.empty(), nil
	case re.Op == syntax.OpConcat:
		subs := re.Sub
		for len(subs) > 0 && isBegin(subs[0]) {
			subs = subs[1:]
		}
		for len(subs) > 0 && isEnd(subs[len(subs)-1]) {
			subs = subs[:len(subs)-1]
		}
		c := *re
		c.Sub = subs
		re = &c
	}
	return a.regexFrag(re, 0)
}

// class is a fragment accepting one character of the rune ranges (pairs lo, hi), as
// JSON writes it inside a string.
func (a *nfa) class(ranges []rune) frag {
	var fs []frag
	var ascii byteSet
	for i := 0; i+1 < len(ranges); i += 2 {
		lo, hi := ranges[i], ranges[i+1]
		// Characters JSON escapes, one by one (at most 34 of them).
		for r := lo; r <= hi && r < 0x80; r++ {
			switch {
			case r < 0x20 || r == 0x7f:
				esc := map[rune]string{'\b': `\b`, '\t': `\t`, '\n': `\n`, '\f': `\f`, '\r': `\r`}[r]
				if esc == "" {
					esc = fmt.Sprintf(`\u%04x`, r)
				}
				fs = append(fs, a.bytes(esc))
			case r == '"' || r == '\\':
				fs = append(fs, a.bytes(`\`+string(r)))
			default:
				ascii.add(byte(r), byte(r))
			}
		}
		if hi < 0x80 {
			continue
		}
		lo = max(lo, 0x80)
		// No surrogates: they are not characters.
		for _, rg := range [][2]rune{{lo, min(hi, 0xD7FF)}, {max(lo, 0xE000), hi}} {
			if rg[0] <= rg[1] {
				utf8Ranges(rg[0], rg[1], func(seq [][2]byte) {
					f := a.empty()
					for _, b := range seq {
						var s byteSet
						s.add(b[0], b[1])
						f = a.cat(f, a.set(s))
					}
					fs = append(fs, f)
				})
			}
		}
	}
	if ascii != (byteSet{}) {
		fs = append(fs, a.set(ascii))
	}
	if len(fs) == 0 {
		// An empty class matches nothing: a fragment that cannot be crossed.
		return frag{a.state(), a.state()}
	}
	if len(fs) == 1 {
		return fs[0]
	}
	return a.alt(fs...)
}

// utf8Ranges calls emit with sequences of byte ranges whose UTF-8 texts are exactly
// the runes lo..hi (lo >= 0x80, no surrogates inside).
func utf8Ranges(lo, hi rune, emit func([][2]byte)) {
	for _, b := range []rune{0x7FF, 0xFFFF} {
		if lo <= b && hi > b {
			utf8Ranges(lo, b, emit)
			utf8Ranges(b+1, hi, emit)
			return
		}
	}
	n := utf8.RuneLen(lo)
	for i := 1; i < n; i++ {
		m := rune(1)<<(6*i) - 1
		if lo&^m != hi&^m {
			if lo&m != 0 {
				utf8Ranges(lo, lo|m, emit)
				utf8Ranges((lo|m)+1, hi, emit)
				return
			}
			if hi&m != m {
				utf8Ranges(lo, (hi&^m)-1, emit)
				utf8Ranges(hi&^m, hi, emit)
				return
			}
		}
	}
	var bl, bh [4]byte
	utf8.EncodeRune(bl[:], lo)
	utf8.EncodeRune(bh[:], hi)
	seq := make([][2]byte, n)
	for i := range seq {
		seq[i] = [2]byte{bl[i], bh[i]}
	}
	emit(seq)
}

// jsonChar is a fragment of any one character of a JSON string (as class writes them).
func (a *nfa) jsonChar() frag { return a.class([]rune{0, unicode.MaxRune}) }

// checkPattern reports whether pattern p compiles (lookaheads at its start included).
func checkPattern(p string) error {
	rest, looks, err := leadingLookaheads(p)
	if err != nil {
		return err
	}
	var a nfa
	if _, err := a.compilePattern(rest); err != nil {
		return err
	}
	for _, l := range looks {
		if _, err := a.compilePattern(l.re); err != nil {
			return err
		}
	}
	return a.err
}
