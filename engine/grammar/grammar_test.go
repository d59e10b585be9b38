package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dlclark/regexp2"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// accepts feeds s to a fresh matcher of g and reports whether every byte is allowed
// and the output may end after it.
func accepts(g *Grammar, s string) (allowed, complete bool) {
	m := NewMatcher(g)
	for i := 0; i < len(s); i++ {
		if !m.Feed(s[i]) {
			return false, false
		}
	}
	return true, m.Accepting()
}

func mustCompile(t testing.TB, schema string) *Grammar {
	t.Helper()
	g, err := CompileSchema([]byte(schema))
	if err != nil {
		t.Fatalf("compile %s: %v", schema, err)
	}
	return g
}

// TestSchemaTable checks what each grammar allows: complete outputs, prefixes that
// may continue, and bytes it refuses.
func TestSchemaTable(t *testing.T) {
	person := `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"tags":{"type":"array","items":{"type":"string"},"maxItems":2}},"required":["name","age"],"additionalProperties":false}`
	tests := []struct {
		name     string
		schema   string // "" is JSONObject
		in       string
		allowed  bool
		complete bool
	}{
		{"object compact", person, `{"name":"Ann","age":31}`, true, true},
		{"object spaced", person, `{"name": "Ann", "age": 31, "tags": ["a", "b"]}`, true, true},
		{"optional last omitted", person, `{"name":"x","age":0}`, true, true},
		{"schema order", person, `{"age":3,`, false, false},
		{"required missing", person, `{"name":"x"}`, false, false},
		{"unknown key", person, `{"nam":`, false, false},
		{"two spaces", person, `{"name":  `, false, false},
		{"newline", person, "{\n", false, false},
		{"prefix continues", person, `{"name":"A`, true, false},
		{"maxItems", person, `{"name":"x","age":1,"tags":["a","b",`, false, false},
		{"integer no fraction", person, `{"name":"x","age":1.5`, false, false},
		{"leading zero", person, `{"name":"x","age":01`, false, false},
		{"control char", person, "{\"name\":\"a\tb", false, false},
		{"escape", person, `{"name":"a\"b\\c\u00e9","age":-0}`, true, true},
		{"surrogate escape refused", person, `{"name":"\ud83d`, false, false},
		{"utf8", person, `{"name":"日本","age":2}`, true, true},
		{"bad utf8", person, "{\"name\":\"\xff", false, false},
		{"overlong utf8", person, "{\"name\":\"\xc0\xaf", false, false},
		{"enum", `{"enum":["red","green",1,null]}`, `"green"`, true, true},
		{"enum number prefix", `{"enum":[1,10]}`, `1`, true, true},
		{"enum number longer", `{"enum":[1,10]}`, `10`, true, true},
		{"enum miss", `{"enum":["red"]}`, `"re`, true, false},
		{"enum wrong", `{"enum":["red"]}`, `"rex`, false, false},
		{"const object", `{"const":{"b":1,"a":[true]}}`, `{"b":1,"a":[true]}`, true, true},
		{"anyOf string or null", `{"anyOf":[{"type":"string"},{"type":"null"}]}`, `null`, true, true},
		{"anyOf string or null 2", `{"anyOf":[{"type":"string"},{"type":"null"}]}`, `"x"`, true, true},
		{"type list", `{"type":["integer","boolean"]}`, `false`, true, true},
		{"anyOf objects", `{"anyOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},{"type":"object","properties":{"b":{"type":"string"}},"required":["b"]}]}`, `{"b":"x"}`, true, true},
		{"ref", `{"$defs":{"p":{"type":"integer"}},"type":"array","items":{"$ref":"#/$defs/p"}}`, `[1,2,3]`, true, true},
		{"recursive ref", `{"$defs":{"n":{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#/$defs/n"}}},"required":["kids"]}},"$ref":"#/$defs/n"}`, `{"kids":[{"kids":[]},{"kids":[{"kids":[]}]}]}`, true, true},
		{"number forms", `{"type":"number"}`, `-12.50e+3`, true, true},
		{"number dot end", `{"type":"number"}`, `1.`, true, false},
		{"minItems", `{"type":"array","minItems":2}`, `[1]`, false, false},
		{"minItems ok", `{"type":"array","minItems":2}`, `[1,{"x":[null]}]`, true, true},
		{"maxLength", `{"type":"string","maxLength":3}`, `"abcd`, false, false},
		{"minLength", `{"type":"string","minLength":2}`, `"a"`, false, false},
		{"date", `{"type":"string","format":"date"}`, `"2024-02-28"`, true, true},
		{"date month 13", `{"type":"string","format":"date"}`, `"2024-13`, false, false},
		{"date-time", `{"type":"string","format":"date-time"}`, `"2024-12-01T23:59:00+05:30"`, true, true},
		{"date-time Z", `{"type":"string","format":"date-time"}`, `"2024-12-01T00:00:00Z"`, true, true},
		{"uuid", `{"type":"string","format":"uuid"}`, `"123e4567-e89b-12d3-a456-426614174000"`, true, true},
		{"json object", "", `{"a":[1,{"b":null}],"c":"d"}`, true, true},
		{"json object not array", "", `[`, false, false},
		{"additionalProperties false empty", `{"type":"object","additionalProperties":false}`, `{}`, true, true},
		{"map values", `{"type":"object","additionalProperties":{"type":"integer"}}`, `{"k":1,"j":2}`, true, true},
		{"map values wrong", `{"type":"object","additionalProperties":{"type":"integer"}}`, `{"k":"`, false, false},
		{"nothing after", `{"type":"integer"}`, `1 `, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := JSONObject()
			if tc.schema != "" {
				g = mustCompile(t, tc.schema)
			}
			allowed, complete := accepts(g, tc.in)
			if allowed != tc.allowed || complete != tc.complete {
				t.Errorf("%s: allowed %v complete %v, want %v %v", tc.in, allowed, complete, tc.allowed, tc.complete)
			}
		})
	}
}

func TestSchemaErrors(t *testing.T) {
	for _, tc := range []struct {
		schema string
		want   error
	}{
		{`{"type":"string","pattern":"(a)\\1"}`, ErrUnsupported},
		{`{"type":"string","pattern":"a(?=b)"}`, ErrUnsupported},
		{`{"type":"string","pattern":"a^b"}`, ErrUnsupported},
		{`{"type":"string","maxLength":4097}`, ErrUnsupported},
		{`{"type":"array","maxItems":5000}`, ErrUnsupported},
		{`{"type":"integer","multipleOf":1001}`, ErrUnsupported},
		{`{"type":"integer","minimum":3,"maximum":2}`, ErrSchema},
		{`{"type":"integer","minimum":1,"maximum":6,"multipleOf":7}`, ErrSchema},
		{`{"oneOf":[{"type":"string"}]}`, ErrUnsupported},
		{`{"type":"object","properties":{"a":{}},"required":["b"]}`, ErrUnsupported},
		{`{"$ref":"http://example.com/x"}`, ErrUnsupported},
		{`{"$ref":"#/$defs/missing"}`, ErrSchema},
		{`{"type":"frog"}`, ErrSchema},
		{`not json`, ErrSchema},
		{`{"type":"string"} x`, ErrSchema},
		{`false`, ErrSchema},
		{strings.Repeat(`{"type":"object","additionalProperties":`, 150) + `{"type":"string"}` + strings.Repeat(`}`, 150), ErrSchema}, // MaxNesting
		{`{"anyOf":[` + strings.Repeat(`{"type":"integer"},`, MaxAlts) + `{"type":"integer"}]}`, ErrUnsupported},                      // MaxAlts
	} {
		if _, err := CompileSchema([]byte(tc.schema)); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.schema, err, tc.want)
		}
	}
}

// TestWrap checks a grammar with markup around its value, as a tool call has.
func TestWrap(t *testing.T) {
	g := mustCompile(t, `{"type":"object","properties":{"x":{"type":"number"}},"required":["x"]}`).Wrap("<tool_call>\n", "\n</tool_call>")
	for _, tc := range []struct {
		in                string
		allowed, complete bool
	}{
		{"<tool_call>\n{\"x\":12}\n</tool_call>", true, true},
		{"<tool_call>\n{\"x\":12}", true, false},
		{"<tool_call>\n{\"x\":12}\n</tool_call>\n", false, false},
		{"<tool_call> ", false, false},
		{"{", false, false},
	} {
		allowed, complete := accepts(g, tc.in)
		if allowed != tc.allowed || complete != tc.complete {
			t.Errorf("%q: allowed %v complete %v, want %v %v", tc.in, allowed, complete, tc.allowed, tc.complete)
		}
	}
	// A number root ends where the suffix starts.
	n := mustCompile(t, `{"type":"number"}`).Wrap("", "</n>")
	if a, c := accepts(n, "3.5</n>"); !a || !c {
		t.Errorf("number then suffix: %v %v", a, c)
	}
}

// testVocab is a vocabulary of every byte and a set of multi-byte tokens a JSON
// model would have, with an end-of-generation token.
func testVocab() (*Vocab, int32) {
	var pieces []string
	for b := 0; b < 256; b++ {
		pieces = append(pieces, string([]byte{byte(b)}))
	}
	pieces = append(pieces, "{\"", "\":", "\": ", "\",", "\", \"", "\"}", "}}", "]}", "true", "false", "null",
		"name", "age", " \"", "12", "2024", "-0", ".5", "e+", "日", "本", "\xe6\x97", "\xa5", "\\n", "\\u00", "},{", "[\"",
		"<tool_call>", "\n", "</tool_call>", "", "<|eot|>")
	eog := int32(len(pieces) - 1)
	pieces[eog] = "" // a control token: no bytes
	return NewVocab(pieces, []int32{eog}, 0), eog
}

// TestMaskMatchesBytes checks the trie walk against feeding every token's bytes to
// a copy of the matcher, along random outputs.
func TestMaskMatchesBytes(t *testing.T) {
	v, eog := testVocab()
	g := mustCompile(t, `{"type":"object","properties":{"name":{"type":"string","maxLength":4},"n":{"anyOf":[{"type":"number"},{"type":"null"}]},"when":{"type":"string","format":"date"}},"required":["name","n"]}`)
	rng := rand.New(rand.NewPCG(1, 2))
	for run := 0; run < 20; run++ {
		m := v.NewMatcher(g)
		for step := 0; step < 60 && !m.Done(); step++ {
			bits, n := m.Mask()
			count := 0
			for id := range v.Size() {
				want := false
				if int32(id) == eog {
					want = m.Accepting()
				} else if p := v.pieces[id]; p != "" {
					c := v.NewMatcher(g)
					c.copyFrom(m)
					want = true
					for i := 0; i < len(p) && want; i++ {
						want = c.Feed(p[i])
					}
				}
				got := bits[id>>6]&(1<<(id&63)) != 0
				if got != want {
					t.Fatalf("step %d token %q: mask %v, bytes %v", step, v.pieces[id], got, want)
				}
				if got {
					count++
				}
			}
			if count != n || n == 0 {
				t.Fatalf("step %d: mask count %d, bits %d", step, n, count)
			}
			id := pick(bits, rng.IntN(n))
			if !m.Accept(id) {
				t.Fatalf("step %d: token %q from the mask refused", step, v.pieces[id])
			}
		}
	}
}

// pick returns the k-th set bit of bits.
func pick(bits []uint64, k int) int32 {
	for w, x := range bits {
		for ; x != 0; x &= x - 1 {
			if k == 0 {
				return int32(w*64 + bitIndex(x&-x))
			}
			k--
		}
	}
	return -1
}

func bitIndex(x uint64) int {
	n := 0
	for x > 1 {
		x >>= 1
		n++
	}
	return n
}

// TestMaskAllocs: a step whose state was seen before costs no allocation.
func TestMaskAllocs(t *testing.T) {
	v, _ := testVocab()
	g := mustCompile(t, `{"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}},"required":["a"]}`)
	m := v.NewMatcher(g)
	for _, c := range []byte(`{"a":[1,`) {
		m.Feed(c)
	}
	m.Mask()
	one, _ := v.ID("12")
	allocs := testing.AllocsPerRun(100, func() {
		m2 := m
		_ = m2
		m.Mask()
	})
	if allocs != 0 {
		t.Errorf("cached Mask: %v allocations", allocs)
	}
	// Feeding digits keeps the state's shape; after the first time, Accept + Mask
	// allocate nothing.
	m.Accept(one)
	m.Mask()
	m.Accept(v.byteToken(','))
	m.Mask()
	allocs = testing.AllocsPerRun(50, func() {
		m.Accept(one)
		m.Mask()
		m.Accept(v.byteToken(','))
		m.Mask()
	})
	if allocs != 0 {
		t.Errorf("steady state: %v allocations per two steps", allocs)
	}
}

// ID finds a token by its bytes (for tests).
func (v *Vocab) ID(p string) (int32, bool) {
	for id, q := range v.pieces {
		if q == p {
			return int32(id), true
		}
	}
	return -1, false
}

func (v *Vocab) byteToken(c byte) int32 { id, _ := v.ID(string([]byte{c})); return id }

// fuzzSchemas are the schemas the fuzz test generates outputs for.
var fuzzSchemas = []string{
	`{"type":"object","properties":{"name":{"type":"string","minLength":1,"maxLength":6},"age":{"type":"integer"},"score":{"type":"number"},"ok":{"type":"boolean"},"tags":{"type":"array","items":{"enum":["a","b","c"]},"minItems":1,"maxItems":3}},"required":["name","age","ok"],"additionalProperties":false}`,
	`{"$defs":{"node":{"type":"object","properties":{"v":{"anyOf":[{"type":"integer"},{"type":"null"}]},"kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["v","kids"],"additionalProperties":false}},"$ref":"#/$defs/node"}`,
	`{"anyOf":[{"type":"object","properties":{"kind":{"const":"circle"},"r":{"type":"number"}},"required":["kind","r"],"additionalProperties":false},{"type":"object","properties":{"kind":{"const":"rect"},"w":{"type":"number"},"h":{"type":"number"}},"required":["kind","w","h"],"additionalProperties":false}]}`,
	`{"type":"object","properties":{"when":{"type":"string","format":"date-time"},"day":{"type":"string","format":"date"},"at":{"type":"string","format":"time"},"id":{"type":"string","format":"uuid"}},"required":["when","day","at","id"]}`,
	`{"type":"object","additionalProperties":{"type":["string","null"]}}`,
	`{"type":"array","items":{"type":"object","properties":{"x":{"type":"number"},"y":{"type":"number"}},"required":["x"]},"maxItems":4}`,
	`{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"},"c":{"type":"string"}}}`,
}

// generate walks a random output through g over v: each step takes an allowed token
// (chosen from choices), preferring, after budget steps, tokens that close values.
func generate(t testing.TB, v *Vocab, g *Grammar, choices []byte, budget int) string {
	m := v.NewMatcher(g)
	var out strings.Builder
	closers := []string{"\"", "}", "]", "0", "null", "false", ":", ",", "{\"", "1"}
	for step := 0; !m.Done(); step++ {
		if step > budget+600 {
			t.Fatalf("no end after %d steps: %s", step, out.String())
		}
		bits, n := m.Mask()
		if n == 0 {
			t.Fatalf("no token allowed after %q", out.String())
		}
		var id int32 = -1
		if step >= budget {
			for _, c := range closers {
				if x, ok := v.ID(c); ok && bits[x>>6]&(1<<(x&63)) != 0 {
					id = x
					break
				}
			}
			if id < 0 && m.Accepting() {
				break
			}
		}
		if id < 0 {
			k := 0
			if len(choices) > 0 {
				k = int(choices[step%len(choices)]) * 7919 % n
				choices[step%len(choices)] += byte(step)
			}
			id = pick(bits, k)
		}
		if v.isEOG(id) {
			break
		}
		if !m.Accept(id) {
			t.Fatalf("token %q from the mask refused after %q", v.pieces[id], out.String())
		}
		out.WriteString(v.pieces[id])
	}
	return out.String()
}

type ecma regexp2.Regexp

func (re *ecma) MatchString(s string) bool {
	ok, err := (*regexp2.Regexp)(re).MatchString(s)
	return err == nil && ok
}

func (re *ecma) String() string { return (*regexp2.Regexp)(re).String() }

func ecmaRegexp(s string) (jsonschema.Regexp, error) {
	re, err := regexp2.Compile(s, regexp2.ECMAScript)
	if err != nil {
		return nil, err
	}
	return (*ecma)(re), nil
}

func validator(t testing.TB, schema string) *jsonschema.Schema {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	c.UseRegexpEngine(ecmaRegexp) // patterns as JSON Schema means them (ECMA-262), lookarounds included
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// FuzzOutputsValidate generates outputs under each schema from fuzzed choices and
// checks that every one parses as JSON and validates against its schema with an
// independent validator (santhosh-tekuri/jsonschema, formats asserted).
func FuzzOutputsValidate(f *testing.F) {
	f.Add(uint8(0), []byte{1, 2, 3}, uint8(20))
	f.Add(uint8(1), []byte{200, 7, 99, 5}, uint8(60))
	f.Add(uint8(2), []byte{9}, uint8(5))
	f.Add(uint8(3), []byte{0, 0, 0}, uint8(90))
	f.Add(uint8(4), []byte{250, 1}, uint8(40))
	f.Add(uint8(5), []byte{3, 1, 4, 1, 5}, uint8(30))
	f.Add(uint8(6), []byte{42}, uint8(10))
	f.Add(uint8(7), []byte{8, 8}, uint8(50))
	v, _ := testVocab()
	var grammars []*Grammar
	var validators []*jsonschema.Schema
	for _, s := range fuzzSchemas {
		grammars = append(grammars, mustCompile(f, s))
		validators = append(validators, validator(f, s))
	}
	grammars = append(grammars, JSONObject())
	validators = append(validators, validator(f, `{"type":"object"}`))
	f.Fuzz(func(t *testing.T, which uint8, choices []byte, budget uint8) {
		i := int(which) % len(grammars)
		out := generate(t, v, grammars[i], bytes.Clone(choices), int(budget))
		if !json.Valid([]byte(out)) {
			t.Fatalf("schema %d: output is not JSON: %s", i, out)
		}
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(out))
		if err != nil {
			t.Fatal(err)
		}
		if err := validators[i].Validate(inst); err != nil {
			t.Fatalf("schema %d: output %s does not validate: %v", i, out, err)
		}
	})
}

func TestCompileOnceKeys(t *testing.T) {
	a := mustCompile(t, `{"type":"object","properties":{"a":{"type":"string"}}}`)
	b := mustCompile(t, `{ "type": "object",  "properties": {"a": {"type":"string"}} }`)
	c := mustCompile(t, `{"type":"object","properties":{"b":{"type":"string"}}}`)
	if a.Key() != b.Key() {
		t.Errorf("the same schema spelled twice has two keys")
	}
	if a.Key() == c.Key() {
		t.Errorf("two schemas share a key")
	}
	if JSONObject().Key() == JSONValue().Key() {
		t.Errorf("json_object and json value share a key")
	}
}

// BenchmarkMask: a step of a constrained sequence whose states are cached (the
// steady state): Mask and Accept of a number's digits and separators in an array.
func BenchmarkMask(b *testing.B) {
	v, _ := testVocab()
	g := mustCompile(b, `{"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}},"required":["a"]}`)
	m := v.NewMatcher(g)
	for _, c := range []byte(`{"a":[1,`) {
		m.Feed(c)
	}
	one, _ := v.ID("12")
	comma := v.byteToken(',')
	b.ReportAllocs()
	for b.Loop() {
		m.Mask()
		m.Accept(one)
		m.Mask()
		m.Accept(comma)
	}
}

// issue30Schemas are schemas whose $refs and anyOfs cycle without writing a byte
// (issue 30): each one sent the matcher into unbounded recursion.
var issue30Schemas = []string{
	`{"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`,
	`{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`,
	`{"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"string"}]}},"$ref":"#/$defs/a"}`,
	`{"$defs":{"a":{"allOf":[{"$ref":"#/$defs/a"}]}},"$ref":"#/$defs/a"}`,
	`{"$ref":"#"}`,
	`{"anyOf":[{"type":"null"},{"$ref":"#"}]}`,
	`{"type":"object","properties":{"x":{"$defs":{"a":{"anyOf":[{"type":"integer"},{"$ref":"#/properties/x"}]}},"$ref":"#/properties/x/$defs/a"}}}`,
	`{"definitions":{"a":{"anyOf":[{"$ref":"#/definitions/b"}]},"b":{"allOf":[{"anyOf":[{"type":"null"},{"$ref":"#/definitions/a"}]}]}},"$ref":"#/definitions/a"}`,
}

// TestSchemaRejectsEpsilonCycles: a schema that can cycle through $ref, anyOf or allOf
// without writing a byte is a compile error (ErrCycle, an ErrSchema) that names the
// cycle, never a grammar.
func TestSchemaRejectsEpsilonCycles(t *testing.T) {
	for _, s := range issue30Schemas {
		g, err := CompileSchema([]byte(s))
		if !errors.Is(err, ErrCycle) || !errors.Is(err, ErrSchema) {
			t.Errorf("%s: got a grammar (%v) and error %v, want ErrCycle", s, g != nil, err)
			continue
		}
		if !strings.Contains(err.Error(), "#") {
			t.Errorf("%s: the error does not name the cycle: %v", s, err)
		}
	}
}

// TestRecursiveSchemasThatWriteFirstCompile: recursion that writes a byte before it
// recurses (a tree's children, a linked list's next) is no cycle: it compiles and
// matches nested values.
func TestRecursiveSchemasThatWriteFirstCompile(t *testing.T) {
	for _, tc := range []struct{ schema, in string }{
		{`{"type":"object","properties":{"children":{"type":"array","items":{"$ref":"#"}}}}`, `{"children":[{"children":[{}, {"children":[]}]}]}`},
		{`{"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"next":{"anyOf":[{"type":"null"},{"$ref":"#/$defs/node"}]}},"required":["v","next"]}},"$ref":"#/$defs/node"}`, `{"v":1,"next":{"v":2,"next":null}}`},
		{`{"anyOf":[{"type":"string"},{"type":"array","items":{"$ref":"#"}}]}`, `[["a"],[[]],"b"]`},
		{`{"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/b"},{"type":"integer"}]},"b":{"anyOf":[{"$ref":"#/$defs/c"},{"type":"null"}]},"c":{"type":"array","items":{"$ref":"#/$defs/a"}}},"$ref":"#/$defs/a"}`, `[1,[null,[2]]]`},
	} {
		g := mustCompile(t, tc.schema)
		if allowed, complete := accepts(g, tc.in); !allowed || !complete {
			t.Errorf("%s: %s allowed %v complete %v", tc.schema, tc.in, allowed, complete)
		}
	}
}

// TestMatcherBoundsAnyOfCycles: a grammar with an anyOf cycle (which CompileSchema
// refuses, built here by hand) cannot send a matcher into unbounded recursion: the
// matcher stops following anyOfs past maxPushDepth and keeps what it found.
func TestMatcherBoundsAnyOfCycles(t *testing.T) {
	b := newBuilder("cycle")
	a := b.add(node{kind: kAnyOf})
	c := b.add(node{kind: kAnyOf})
	b.g.nodes[a].anyOf = []int32{c, b.g.str}
	b.g.nodes[c].anyOf = []int32{a}
	arr := b.add(node{kind: kArray, items: a, maxItems: -1})
	for _, root := range []int32{a, arr} {
		g := *b.g
		g.root = root
		v, _ := testVocab()
		m := v.NewMatcher(&g)
		m.Mask()
		for _, in := range []byte(`["x"]`) {
			if root == a && in == '[' || root == a && in == ']' {
				continue
			}
			if !m.Feed(in) {
				t.Fatalf("root %d: %q refused", root, in)
			}
			m.Mask()
		}
		if !m.Accepting() {
			t.Errorf("root %d: not complete", root)
		}
	}
}

// TestWireRefusesNestedAnyOf: a grammar's wire form with an anyOf cycle (or any anyOf
// in an anyOf, which CompileSchema never writes) is refused when read.
func TestWireRefusesNestedAnyOf(t *testing.T) {
	b := newBuilder("cycle")
	a := b.add(node{kind: kAnyOf})
	b.g.nodes[a].anyOf = []int32{a}
	b.g.root = a
	data, err := json.Marshal(b.g)
	if err != nil {
		t.Fatal(err)
	}
	var g Grammar
	if err := json.Unmarshal(data, &g); err == nil {
		t.Fatal("a cyclic grammar was read")
	}
}

// TestSharedAlternativesStayFlat: anyOfs that share alternatives through $refs (a
// chain of anyOf [a, a], 2^20 paths) compile flat: each anyOf lists the values it
// reaches once, so entering a value forks a bounded number of times.
func TestSharedAlternativesStayFlat(t *testing.T) {
	var defs []string
	const n = 20
	for i := range n {
		defs = append(defs, fmt.Sprintf(`"a%d":{"anyOf":[{"$ref":"#/$defs/a%d"},{"$ref":"#/$defs/a%d"}]}`, i, i+1, i+1))
	}
	defs = append(defs, fmt.Sprintf(`"a%d":{"type":"integer"}`, n))
	s := `{"$defs":{` + strings.Join(defs, ",") + `},"type":"array","items":{"$ref":"#/$defs/a0"}}`
	g, err := CompileSchema([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.checkFlat(); err != nil {
		t.Fatal(err)
	}
	if allowed, complete := accepts(g, `[1, 2]`); !allowed || !complete {
		t.Errorf("[1, 2]: allowed %v complete %v", allowed, complete)
	}
}

// TestSchemaRejectsEndlessValues: a schema whose every value must contain another
// (a required property or minItems that recurse) has no finite value: ErrCycle. An
// optional recursion is fine.
func TestSchemaRejectsEndlessValues(t *testing.T) {
	for _, s := range []string{
		`{"type":"object","properties":{"x":{"$ref":"#"}},"required":["x"]}`,
		`{"type":"array","items":{"$ref":"#"},"minItems":1}`,
		`{"$defs":{"a":{"type":"object","properties":{"b":{"$ref":"#/$defs/b"}},"required":["b"]},"b":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"array","minItems":2,"items":{"$ref":"#/$defs/a"}}]}},"$ref":"#/$defs/a"}`,
	} {
		if _, err := CompileSchema([]byte(s)); !errors.Is(err, ErrCycle) {
			t.Errorf("%s: %v, want ErrCycle", s, err)
		}
	}
	for _, s := range []string{
		`{"type":"object","properties":{"x":{"$ref":"#"}}}`,
		`{"type":"array","items":{"$ref":"#"}}`,
		`{"type":"object","properties":{"x":{"anyOf":[{"type":"null"},{"$ref":"#"}]}},"required":["x"]}`,
	} {
		mustCompile(t, s)
	}
}
