package grammar

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// refGraph builds a schema from fuzzed bytes: up to 40 $defs, each a $ref, an anyOf
// or allOf of $refs, an array or object that recurses through its items or a
// property (required or not, minItems or not), a nullable wrapper, a type list, or
// a $ref nested in up to 255 allOfs; the root refers to the first. "" for no bytes.
func refGraph(data []byte) string {
	if len(data) == 0 {
		return ""
	}
	n := 1 + int(data[0])%40
	data = data[1:]
	next := func() int {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return int(b)
	}
	ref := func(k int) string { return fmt.Sprintf(`{"$ref":"#/$defs/d%d"}`, k%n) }
	defs := make([]string, n)
	for i := range defs {
		op, k, l := next(), next(), next()
		var s string
		switch op % 10 {
		case 0:
			s = ref(k)
		case 1:
			s = `{"anyOf":[` + ref(k) + "," + ref(l) + `]}`
		case 2:
			s = `{"allOf":[` + ref(k) + `]}`
		case 3:
			s = fmt.Sprintf(`{"type":"array","items":%s,"minItems":%d}`, ref(k), l%2)
		case 4:
			req := ""
			if l%2 == 1 {
				req = `,"required":["p"]`
			}
			s = `{"type":"object","properties":{"p":` + ref(k) + `}` + req + `}`
		case 5:
			s = `{"anyOf":[{"type":"null"},` + ref(k) + `]}`
		case 6:
			s = `{"type":["string","null","integer"]}`
		case 7:
			s = strings.Repeat(`{"allOf":[`, l) + ref(k) + strings.Repeat(`]}`, l)
		case 8:
			s = `{"anyOf":[` + ref(k) + `,{"type":"array","items":` + ref(l) + `}]}`
		default:
			s = `{"type":"integer"}`
		}
		defs[i] = fmt.Sprintf(`"d%d":%s`, i, s)
	}
	return `{"$defs":{` + strings.Join(defs, ",") + `},"$ref":"#/$defs/d0"}`
}

// FuzzCompileSchemaCycles feeds the compiler schemas as text (seeds: issue 30's,
// which overflowed the matcher's stack) and $ref graphs built from fuzzed bytes
// (refGraph: cycles through $ref, anyOf and allOf, recursion through items and
// properties, chains and nesting past the limits). Compiling either refuses
// (ErrSchema or ErrUnsupported) or gives a grammar whose anyOfs are flat and hold at
// most MaxAlts alternatives, so that entering a value forks a bounded number of
// times and never recurses; its matcher then takes up to 64 fuzzed bytes and their
// masks without panicking.
func FuzzCompileSchemaCycles(f *testing.F) {
	for _, s := range issue30Schemas {
		f.Add(s, []byte(nil), []byte(`"x"`))
	}
	f.Add(`{"type":"object","properties":{"children":{"type":"array","items":{"$ref":"#"}}}}`, []byte(nil), []byte(`{"children":[{"children":[]}]}`))
	f.Add(`{"type":"object","properties":{"x":{"$ref":"#"}},"required":["x"]}`, []byte(nil), []byte(`{"x":{"x":{`))
	f.Add("", []byte{2, 0, 1, 0, 0, 0, 0}, []byte(`1`))                        // a → b → a
	f.Add("", []byte{1, 5, 0, 0}, []byte(`null`))                              // a: anyOf [null, a]
	f.Add("", []byte{3, 3, 1, 0, 8, 2, 0, 9, 0, 0}, []byte(`[[1],[[2]]]`))     // recursion through items
	f.Add("", []byte{1, 7, 0, 200}, []byte(`1`))                               // a $ref in 200 allOfs
	f.Add("", []byte{39, 1, 1, 1, 1, 2, 2, 1, 3, 3}, []byte(`[1, 2]`))         // a chain of anyOf [a, a]
	f.Add("", []byte{4, 4, 1, 1, 1, 2, 0, 3, 3, 1, 6, 0, 0}, []byte(`{"p":[`)) // required, minItems, nullable
	v, _ := testVocab()
	f.Fuzz(func(t *testing.T, schema string, graph, feed []byte) {
		for _, s := range []string{schema, refGraph(graph)} {
			if s == "" {
				continue
			}
			g, err := CompileSchema([]byte(s))
			if err != nil {
				if !errors.Is(err, ErrSchema) && !errors.Is(err, ErrUnsupported) {
					t.Fatalf("%s: an error of no kind: %v", s, err)
				}
				continue
			}
			if err := g.checkFlat(); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
			m := v.NewMatcher(g)
			for i, c := range feed[:min(len(feed), 64)] {
				if i%8 == 0 {
					m.Mask()
				}
				if !m.Feed(c) {
					break
				}
			}
			m.Mask()
		}
	})
}
