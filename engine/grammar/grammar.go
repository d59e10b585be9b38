package grammar

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Errors of the package, matched with errors.Is.
var (
	ErrSchema      = errors.New("grammar: bad JSON schema")
	ErrUnsupported = errors.New("grammar: unsupported JSON schema keyword")
	// ErrCycle is a schema that can refer back to itself through $ref, anyOf or allOf
	// before any byte of output (left recursion): no finite value matches it, and a
	// matcher would go round the cycle forever. It is an ErrSchema.
	// So is a schema whose every value must contain another of itself (a required
	// property or minItems that recurse): no finite value matches it either.
	ErrCycle = fmt.Errorf("%w: a recursion that never ends", ErrSchema)
)

// Limits of a compiled grammar.
const (
	MaxProperties    = 64      // properties of one object schema
	MaxNodes         = 4096    // schema nodes of one grammar
	MaxDepth         = 24      // nesting of free JSON values (objects and arrays) and of recursive $refs
	MaxNesting       = 128     // nesting of subschemas while compiling, $refs followed included
	MaxAlts          = 256     // alternatives of one anyOf, nested anyOfs and $refs flattened
	maxGrammarStates = 1 << 17 // states of all the automata of one grammar
	maxStacks        = 32      // live alternatives of a matcher (anyOf)
	maxPushDepth     = 16      // values a matcher enters for one byte, anyOfs included (a flat grammar needs 4)
	maxIntDigits     = 15      // digits of a number's integer part
	maxFracDigits    = 15      // digits of its fraction
	maxExpDigits     = 2       // digits of its exponent (so every number fits a float64)
)

// Grammar is a compiled JSON grammar: the bytes a constrained output may be. It is
// immutable and safe for concurrent use; a Matcher follows one output through it.
type Grammar struct {
	key   string // identifies the grammar in mask caches: a hash of its source
	nodes []node
	tries []tnode // the literal tries of every node, one slice
	dfas  []dfa   // the automata of kDFA nodes
	root  int32
	// Shared nodes of free JSON.
	anyNode, anyObj, anyArr, str, num, lits int32
	prefix, suffix                          []byte // literal text around the root value (Wrap)
}

// Key identifies the grammar: two grammars with the same key accept the same bytes.
func (g *Grammar) Key() string { return g.key }

type kind uint8

const (
	kAny     kind = iota // any JSON value
	kObject              // an object (props nil: any keys, values of node addl)
	kArray               // an array of items
	kString              // a string, with optional length bounds
	kFormat              // a string of fixed-length patterns (date, uuid, ...)
	kNumber              // a JSON number
	kInteger             // an integer
	kLiteral             // one of a set of JSON texts (enum, const, true, null, ...)
	kAnyOf               // one of alts (never a frame: the matcher forks)
	kDFA                 // a string or number as an automaton of its text (pattern, format, bounds: automaton.go)
)

type node struct {
	kind kind
	// kObject
	props    []int32 // value node of each property, in schema order
	keyTrie  []int32 // per position n: the trie of the keys that may come next ("name"), -1 if none
	canClose []bool  // per position n: no required property at index >= n
	addl     int32   // kObject without props: the value node
	// kArray
	items              int32
	minItems, maxItems int // maxItems < 0: no bound
	// kString
	minLen, maxLen int // maxLen < 0: no bound
	// kFormat
	alts [][]byteSet
	// kLiteral: the trie's root
	trie int32
	// kAnyOf
	anyOf []int32
	// kDFA: its automaton in Grammar.dfas
	dfa int32
}

// byteSet is a set of bytes.
type byteSet [4]uint64

func (s *byteSet) add(lo, hi byte) {
	for b := int(lo); b <= int(hi); b++ {
		s[b>>6] |= 1 << (b & 63)
	}
}

func (s *byteSet) has(b byte) bool { return s[b>>6]&(1<<(b&63)) != 0 }

// tnode is a node of a literal trie: its edges and, if a literal ends here, its value.
type tnode struct {
	edges []tedge
	val   int32 // -1: no literal ends here
}

type tedge struct {
	b  byte
	to int32
}

// builder compiles a schema.
type builder struct {
	g     *Grammar
	root  any
	refs  map[string]int32 // compiled $ref targets (for recursion)
	depth int              // objects, arrays and $refs open (MaxDepth)
	nest  int              // subschemas open (MaxNesting)
	where map[int32]string // each anyOf node's schema path (a $ref's placeholder: the $ref), for errors
	req   map[int32][]bool // each object node's required properties, in order (for finite)
}

// JSONObject returns the grammar of any JSON object: OpenAI's json_object format.
func JSONObject() *Grammar {
	b := newBuilder("json_object")
	b.g.root = b.g.anyObj
	return b.g
}

// JSONValue returns the grammar of any JSON value.
func JSONValue() *Grammar {
	b := newBuilder("json_value")
	b.g.root = b.g.anyNode
	return b.g
}

func newBuilder(key string) *builder {
	g := &Grammar{}
	b := &builder{g: g, refs: map[string]int32{}, where: map[int32]string{}, req: map[int32][]bool{}}
	g.anyNode = b.add(node{kind: kAny})
	g.str = b.add(node{kind: kString, maxLen: -1})
	g.num = b.add(node{kind: kNumber})
	g.lits = b.literal([]string{"true", "false", "null"})
	g.anyObj = b.add(node{kind: kObject, addl: g.anyNode})
	g.anyArr = b.add(node{kind: kArray, items: g.anyNode, maxItems: -1})
	sum := sha256.Sum256([]byte(key))
	g.key = hex.EncodeToString(sum[:12])
	return b
}

// CompileSchema compiles a JSON Schema: the subset that OpenAI's structured outputs
// accept. Objects (properties, required, additionalProperties), arrays (items,
// minItems, maxItems), strings (minLength, maxLength, pattern, and the formats
// date-time, time, date, duration, email, hostname, ipv4, ipv6 and uuid; other
// formats are annotations), numbers and integers (minimum, maximum, their exclusive
// forms, multipleOf: see the package doc for what is exact and what sound),
// booleans, null, enum, const, anyOf, allOf of one schema, type lists and $ref into
// the document ($defs, definitions, recursion included). Keywords it cannot enforce
// (oneOf, not, patternProperties, a backreference in a pattern, ...) are refused
// with ErrUnsupported naming the keyword and its schema path, so an output never
// fails a schema silently (Loosen drops them, for a schema that is not strict);
// annotations (title, description, default, $schema, ...) are ignored.
//
// An object's properties come in the schema's order, each optional one possibly left
// out; properties the schema does not declare are never written (additionalProperties
// allows them; omitting them is valid). Whitespace is limited to one space after ':'
// and ',', and numbers to 15 integer and 15 fraction digits.
func CompileSchema(schema []byte) (*Grammar, error) {
	root, err := decodeOrdered(schema)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSchema, err)
	}
	canon, err := canonical(root)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSchema, err)
	}
	b := newBuilder("schema:" + canon)
	b.root = root
	r, err := b.schema(root, "#")
	if err != nil {
		return nil, err
	}
	if err := b.flatten(); err != nil {
		return nil, err
	}
	if err := b.finite(r); err != nil {
		return nil, err
	}
	b.g.root = r
	return b.g, nil
}

// Wrap returns a grammar of prefix, then a value of g, then suffix: a tool call's
// markup around its JSON, for instance.
func (g *Grammar) Wrap(prefix, suffix string) *Grammar {
	w := *g
	w.prefix, w.suffix = []byte(prefix), []byte(suffix)
	sum := sha256.Sum256([]byte(g.key + "\x00" + prefix + "\x00" + suffix))
	w.key = hex.EncodeToString(sum[:12])
	return &w
}

func (b *builder) add(n node) int32 {
	b.g.nodes = append(b.g.nodes, n)
	return int32(len(b.g.nodes) - 1)
}

// addDFA adds a node of automaton d, within the grammar's budget of states.
func (b *builder) addDFA(d *dfa, path string) (int32, error) {
	total := len(d.states)
	for _, x := range b.g.dfas {
		total += len(x.states)
	}
	if total > maxGrammarStates {
		return 0, fmt.Errorf("%w: %s: the grammar's automata (patterns, formats, bounds) pass %d states", ErrUnsupported, path, maxGrammarStates)
	}
	b.g.dfas = append(b.g.dfas, *d)
	return b.add(node{kind: kDFA, dfa: int32(len(b.g.dfas) - 1)}), nil
}

// addAnyOf adds an anyOf node found at path (for errors about it).
func (b *builder) addAnyOf(n node, path string) int32 {
	i := b.add(n)
	b.where[i] = path
	return i
}

// literal adds a node accepting exactly one of texts.
func (b *builder) literal(texts []string) int32 {
	return b.add(node{kind: kLiteral, trie: b.trie(texts, nil)})
}

// trie adds a trie of texts (value vals[i], or i when vals is nil) and returns its root.
func (b *builder) trie(texts []string, vals []int32) int32 {
	g := b.g
	root := int32(len(g.tries))
	g.tries = append(g.tries, tnode{val: -1})
	for i, t := range texts {
		at := root
		for k := 0; k < len(t); k++ {
			next := int32(-1)
			for _, e := range g.tries[at].edges {
				if e.b == t[k] {
					next = e.to
				}
			}
			if next < 0 {
				next = int32(len(g.tries))
				g.tries = append(g.tries, tnode{val: -1})
				g.tries[at].edges = append(g.tries[at].edges, tedge{t[k], next})
			}
			at = next
		}
		v := int32(i)
		if vals != nil {
			v = vals[i]
		}
		if g.tries[at].val < 0 {
			g.tries[at].val = v
		}
	}
	return root
}

// Keywords that assert something this grammar cannot enforce: a strict schema with
// one is refused (ErrUnsupported); Loosen drops them from one that is not strict.
var unsupported = []string{"minProperties", "maxProperties", "patternProperties", "propertyNames", "dependentRequired", "dependentSchemas",
	"dependencies", "if", "then", "else", "not", "oneOf", "prefixItems", "contains", "minContains", "maxContains",
	"unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef", "contentSchema"}

func (b *builder) schema(s any, path string) (int32, error) {
	if len(b.g.nodes) > MaxNodes {
		return 0, fmt.Errorf("%w: more than %d schema nodes", ErrSchema, MaxNodes)
	}
	if b.nest++; b.nest > MaxNesting {
		return 0, fmt.Errorf("%w: %s: subschemas nested deeper than %d", ErrSchema, path, MaxNesting)
	}
	defer func() { b.nest-- }()
	switch v := s.(type) {
	case bool:
		if v {
			return b.g.anyNode, nil
		}
		return 0, fmt.Errorf("%w: %s is the schema false: nothing is valid", ErrSchema, path)
	case *object:
		return b.object(v.vals, v, path)
	}
	return 0, fmt.Errorf("%w: %s is not a schema", ErrSchema, path)
}

func (b *builder) object(s map[string]any, o *object, path string) (int32, error) {
	for _, k := range unsupported {
		if _, ok := s[k]; ok {
			if k == "uniqueItems" {
				continue
			}
			return 0, fmt.Errorf("%w: %q at %s", ErrUnsupported, k, path)
		}
	}
	if u, ok := s["uniqueItems"].(bool); ok && u {
		return 0, fmt.Errorf("%w: \"uniqueItems\" at %s", ErrUnsupported, path)
	}
	for _, k := range []string{"$ref", "allOf", "anyOf"} {
		if _, ok := s[k]; !ok {
			continue
		}
		for _, v := range valueKeywords {
			if _, ok := s[v]; ok {
				return 0, fmt.Errorf("%w: %q beside %q at %s (put it in each alternative)", ErrUnsupported, v, k, path)
			}
		}
	}
	if ref, ok := s["$ref"]; ok {
		r, ok := ref.(string)
		if !ok {
			return 0, fmt.Errorf("%w: %s/$ref is not a string", ErrSchema, path)
		}
		return b.ref(r)
	}
	_, hasConst := s["const"]
	_, hasEnum := s["enum"]
	if (hasConst || hasEnum) && needsFilter(s) {
		return b.filteredLiterals(o, path)
	}
	if c, ok := s["const"]; ok {
		t, err := canonical(c)
		if err != nil {
			return 0, fmt.Errorf("%w: %s/const: %v", ErrSchema, path, err)
		}
		return b.literal([]string{t}), nil
	}
	if e, ok := s["enum"]; ok {
		list, ok := e.([]any)
		if !ok || len(list) == 0 {
			return 0, fmt.Errorf("%w: %s/enum is not a non-empty array", ErrSchema, path)
		}
		texts := make([]string, len(list))
		for i, x := range list {
			t, err := canonical(x)
			if err != nil {
				return 0, fmt.Errorf("%w: %s/enum: %v", ErrSchema, path, err)
			}
			texts[i] = t
		}
		return b.literal(texts), nil
	}
	if all, ok := s["allOf"]; ok {
		list, ok := all.([]any)
		if !ok || len(list) != 1 {
			return 0, fmt.Errorf("%w: \"allOf\" of more than one schema at %s", ErrUnsupported, path)
		}
		return b.schema(list[0], path+"/allOf/0")
	}
	if any_, ok := s["anyOf"]; ok {
		list, ok := any_.([]any)
		if !ok || len(list) == 0 {
			return 0, fmt.Errorf("%w: %s/anyOf is not a non-empty array", ErrSchema, path)
		}
		n := node{kind: kAnyOf}
		for i, x := range list {
			r, err := b.schema(x, fmt.Sprintf("%s/anyOf/%d", path, i))
			if err != nil {
				return 0, err
			}
			n.anyOf = append(n.anyOf, r)
		}
		return b.addAnyOf(n, path+"/anyOf"), nil
	}
	switch t := s["type"].(type) {
	case nil:
		if _, ok := s["properties"]; ok {
			return b.typed("object", s, o, path)
		}
		for _, k := range valueKeywords {
			if _, ok := s[k]; ok {
				return 0, fmt.Errorf("%w: %q without a type at %s", ErrUnsupported, k, path)
			}
		}
		return b.g.anyNode, nil
	case string:
		return b.typed(t, s, o, path)
	case []any:
		n := node{kind: kAnyOf}
		for _, x := range t {
			name, ok := x.(string)
			if !ok {
				return 0, fmt.Errorf("%w: %s/type holds a non-string", ErrSchema, path)
			}
			r, err := b.typed(name, s, o, path)
			if err != nil {
				return 0, err
			}
			if len(b.g.nodes) > MaxNodes {
				return 0, fmt.Errorf("%w: more than %d schema nodes", ErrSchema, MaxNodes)
			}
			n.anyOf = append(n.anyOf, r)
		}
		if len(n.anyOf) == 0 {
			return 0, fmt.Errorf("%w: %s/type is empty", ErrSchema, path)
		}
		if len(n.anyOf) == 1 {
			return n.anyOf[0], nil
		}
		return b.addAnyOf(n, path+"/type"), nil
	}
	return 0, fmt.Errorf("%w: %s/type is neither a string nor an array", ErrSchema, path)
}

// valueKeywords constrain values of one type (numbers, strings, arrays): beside no
// type, a schema with one is refused (the free value would ignore it).
var valueKeywords = []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "pattern",
	"minLength", "maxLength", "minItems", "maxItems"}

// needsFilter reports whether an enum or const beside the keywords of s must be
// checked against them: a type or a value keyword.
func needsFilter(s map[string]any) bool {
	if _, ok := s["type"]; ok {
		return true
	}
	for _, k := range append(valueKeywords, "format") {
		if _, ok := s[k]; ok {
			return true
		}
	}
	return false
}

// filteredLiterals compiles an enum or const beside a type or value keywords: the
// literals that the rest of the schema accepts (as this grammar writes it: a number
// the bounds' automaton does not write, such as 1e0, is dropped, which is sound).
func (b *builder) filteredLiterals(o *object, path string) (int32, error) {
	var list []any
	if c, ok := o.vals["const"]; ok {
		list = []any{c}
	} else if e, ok := o.vals["enum"].([]any); ok && len(e) > 0 {
		list = e
	} else {
		return 0, fmt.Errorf("%w: %s/enum is not a non-empty array", ErrSchema, path)
	}
	rest := &object{vals: map[string]any{}}
	for _, k := range o.keys {
		if k != "enum" && k != "const" {
			rest.keys = append(rest.keys, k)
			rest.vals[k] = o.vals[k]
		}
	}
	data, err := json.Marshal(rest)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %v", ErrSchema, path, err)
	}
	g, err := CompileSchema(data)
	if err != nil {
		return 0, fmt.Errorf("%w (beside the enum or const at %s)", err, path)
	}
	var texts []string
	for _, x := range list {
		t, err := canonical(x)
		if err != nil {
			return 0, fmt.Errorf("%w: %s/enum: %v", ErrSchema, path, err)
		}
		m := NewMatcher(g)
		ok := true
		for i := 0; i < len(t) && ok; i++ {
			ok = m.Feed(t[i])
		}
		if ok && m.Accepting() {
			texts = append(texts, t)
		}
	}
	if len(texts) == 0 {
		return 0, fmt.Errorf("%w: %s: no value of the enum or const meets the schema's other keywords", ErrSchema, path)
	}
	return b.literal(texts), nil
}

func (b *builder) typed(t string, s map[string]any, o *object, path string) (int32, error) {
	switch t {
	case "null":
		return b.literal([]string{"null"}), nil
	case "boolean":
		return b.literal([]string{"true", "false"}), nil
	case "number", "integer":
		d, ok, err := b.numberDFA(s, t == "integer", path)
		switch {
		case err != nil:
			return 0, err
		case ok:
			return b.addDFA(d, path)
		case t == "number":
			return b.g.num, nil
		}
		return b.add(node{kind: kInteger}), nil
	case "string":
		return b.str(s, path)
	case "array":
		return b.array(s, path)
	case "object":
		return b.obj(s, path)
	}
	return 0, fmt.Errorf("%w: %s/type %q", ErrSchema, path, t)
}

func (b *builder) str(s map[string]any, path string) (int32, error) {
	minLen, err := intKey(s, "minLength", 0, path)
	if err != nil {
		return 0, err
	}
	maxLen, err := intKey(s, "maxLength", -1, path)
	if err != nil {
		return 0, err
	}
	if maxLen >= 0 && minLen > maxLen {
		return 0, fmt.Errorf("%w: %s: minLength %d > maxLength %d", ErrSchema, path, minLen, maxLen)
	}
	for _, k := range []struct {
		name string
		v    int
	}{{"minLength", minLen}, {"maxLength", maxLen}} {
		if k.v > MaxLength {
			return 0, fmt.Errorf("%w: %s/%s %d is more than %d", ErrUnsupported, path, k.name, k.v, MaxLength)
		}
	}
	if d, ok, err := b.stringDFA(s, minLen, maxLen, path); err != nil {
		return 0, err
	} else if ok {
		return b.addDFA(d, path)
	}
	if minLen == 0 && maxLen < 0 {
		return b.g.str, nil
	}
	return b.add(node{kind: kString, minLen: minLen, maxLen: maxLen}), nil
}

func (b *builder) array(s map[string]any, path string) (int32, error) {
	minItems, err := intKey(s, "minItems", 0, path)
	if err != nil {
		return 0, err
	}
	maxItems, err := intKey(s, "maxItems", -1, path)
	if err != nil {
		return 0, err
	}
	if maxItems >= 0 && minItems > maxItems {
		return 0, fmt.Errorf("%w: %s: minItems %d > maxItems %d", ErrSchema, path, minItems, maxItems)
	}
	if max(minItems, maxItems) > MaxItems {
		return 0, fmt.Errorf("%w: %s: minItems or maxItems %d is more than %d", ErrUnsupported, path, max(minItems, maxItems), MaxItems)
	}
	items := b.g.anyNode
	if it, ok := s["items"]; ok {
		if b.depth++; b.depth > MaxDepth {
			return 0, fmt.Errorf("%w: %s nests deeper than %d", ErrSchema, path, MaxDepth)
		}
		items, err = b.schema(it, path+"/items")
		b.depth--
		if err != nil {
			return 0, err
		}
	}
	return b.add(node{kind: kArray, items: items, minItems: minItems, maxItems: maxItems}), nil
}

func (b *builder) obj(s map[string]any, path string) (int32, error) {
	var props map[string]any
	var order []string
	if p, ok := s["properties"].(*object); ok {
		props, order = p.vals, p.keys
	} else if _, ok := s["properties"]; ok {
		return 0, fmt.Errorf("%w: %s/properties is not an object", ErrSchema, path)
	}
	if len(props) == 0 {
		addl := b.g.anyNode
		if a, ok := s["additionalProperties"]; ok {
			if f, ok := a.(bool); ok && !f {
				// No property may appear: only {}.
				return b.literal([]string{"{}"}), nil
			}
			r, err := b.schema(a, path+"/additionalProperties")
			if err != nil {
				return 0, err
			}
			addl = r
		}
		if addl == b.g.anyNode {
			return b.g.anyObj, nil
		}
		return b.add(node{kind: kObject, addl: addl}), nil
	}
	if len(props) > MaxProperties {
		return 0, fmt.Errorf("%w: %s has %d properties, more than %d", ErrUnsupported, path, len(props), MaxProperties)
	}
	names := order
	required := map[string]bool{}
	if r, ok := s["required"]; ok {
		list, ok := r.([]any)
		if !ok {
			return 0, fmt.Errorf("%w: %s/required is not an array", ErrSchema, path)
		}
		for _, x := range list {
			name, ok := x.(string)
			if !ok {
				return 0, fmt.Errorf("%w: %s/required holds a non-string", ErrSchema, path)
			}
			if _, ok := props[name]; !ok {
				return 0, fmt.Errorf("%w: %s/required names %q, which is not in properties", ErrUnsupported, path, name)
			}
			required[name] = true
		}
	}
	idx := b.add(node{kind: kObject}) // reserved first: properties may refer back to it
	n := node{kind: kObject, addl: -1}
	if b.depth++; b.depth > MaxDepth {
		return 0, fmt.Errorf("%w: %s nests deeper than %d", ErrSchema, path, MaxDepth)
	}
	for _, name := range names {
		r, err := b.schema(props[name], path+"/properties/"+name)
		if err != nil {
			return 0, err
		}
		n.props = append(n.props, r)
	}
	b.depth--
	quoted := make([]string, len(names))
	for i, name := range names {
		q, _ := canonical(name)
		quoted[i] = q[1:] // the key after its opening quote, closing quote included
	}
	n.keyTrie = make([]int32, len(names)+1)
	n.canClose = make([]bool, len(names)+1)
	for pos := 0; pos <= len(names); pos++ {
		n.canClose[pos] = true
		for j := pos; j < len(names); j++ {
			if required[names[j]] {
				n.canClose[pos] = false
			}
		}
		var texts []string
		var vals []int32
		for j := pos; j < len(names); j++ {
			texts = append(texts, quoted[j])
			vals = append(vals, int32(j))
			if required[names[j]] {
				break
			}
		}
		n.keyTrie[pos] = -1
		if len(texts) > 0 {
			n.keyTrie[pos] = b.trie(texts, vals)
		}
	}
	b.g.nodes[idx] = n
	req := make([]bool, len(names))
	for i, name := range names {
		req[i] = required[name]
	}
	b.req[idx] = req
	return idx, nil
}

func (b *builder) ref(r string) (int32, error) {
	if n, ok := b.refs[r]; ok {
		return n, nil
	}
	if !strings.HasPrefix(r, "#") {
		return 0, fmt.Errorf("%w: $ref %q outside the document", ErrUnsupported, r)
	}
	target := b.root
	ptr := strings.TrimPrefix(r, "#")
	if ptr != "" {
		if !strings.HasPrefix(ptr, "/") {
			return 0, fmt.Errorf("%w: $ref %q is not a JSON pointer", ErrUnsupported, r)
		}
		for _, tok := range strings.Split(ptr[1:], "/") {
			tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
			switch t := target.(type) {
			case *object:
				var ok bool
				if target, ok = t.vals[tok]; !ok {
					return 0, fmt.Errorf("%w: $ref %q: no %q", ErrSchema, r, tok)
				}
			case []any:
				i, err := strconv.Atoi(tok)
				if err != nil || i < 0 || i >= len(t) {
					return 0, fmt.Errorf("%w: $ref %q: no %q", ErrSchema, r, tok)
				}
				target = t[i]
			default:
				return 0, fmt.Errorf("%w: $ref %q: no %q", ErrSchema, r, tok)
			}
		}
	}
	// A placeholder anyOf of one alternative, filled in once the target is compiled,
	// so that recursive references find it.
	ph := b.addAnyOf(node{kind: kAnyOf}, r)
	b.refs[r] = ph
	if b.depth++; b.depth > MaxDepth {
		return 0, fmt.Errorf("%w: $ref %q nests deeper than %d", ErrSchema, r, MaxDepth)
	}
	t, err := b.schema(target, r)
	b.depth--
	if err != nil {
		return 0, err
	}
	b.g.nodes[ph].anyOf = []int32{t}
	return ph, nil
}

func intKey(s map[string]any, k string, def int, path string) (int, error) {
	v, ok := s[k]
	if !ok {
		return def, nil
	}
	n, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf("%w: %s/%s is not a number", ErrSchema, path, k)
	}
	i, err := strconv.Atoi(n.String())
	if err != nil || i < 0 || i > 1<<20 {
		return 0, fmt.Errorf("%w: %s/%s is not a small non-negative integer", ErrSchema, path, k)
	}
	return i, nil
}

// canonical is the compact JSON text of a decoded value (map keys sorted, no HTML
// escaping), as the grammar writes literals.
func canonical(v any) (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}
