package grammar

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// TestIntegerBoundsExact: an integer with minimum, maximum, their exclusive forms and
// multipleOf accepts exactly the integers that meet them, digit by digit (issue 31:
// zod's z.number().int().min(0).max(120) was a 400).
func TestIntegerBoundsExact(t *testing.T) {
	for _, tc := range []struct {
		kw     string
		lo, hi int64 // the allowed range
		mult   int64
	}{
		{`"minimum":0,"maximum":120`, 0, 120, 1},
		{`"minimum":-57,"maximum":1003`, -57, 1003, 1},
		{`"exclusiveMinimum":-10,"exclusiveMaximum":10`, -9, 9, 1},
		{`"minimum":0.5,"maximum":99.5`, 1, 99, 1},
		{`"minimum":-1000,"maximum":-3`, -1000, -3, 1},
		{`"minimum":7`, 7, maxInt, 1},
		{`"maximum":-7`, -maxInt, -7, 1},
		{`"multipleOf":7`, -maxInt, maxInt, 7},
		{`"minimum":-100,"maximum":1000,"multipleOf":12`, -100, 1000, 12},
		{`"exclusiveMinimum":0,"multipleOf":1000`, 1, maxInt, 1000},
	} {
		schema := `{"type":"integer",` + tc.kw + `}`
		g := mustCompile(t, schema)
		check := func(x int64) {
			want := x >= tc.lo && x <= tc.hi && x%tc.mult == 0
			allowed, complete := accepts(g, strconv.FormatInt(x, 10))
			if allowed && complete != want || !allowed && want {
				t.Errorf("%s: %d allowed %v complete %v, want %v", schema, x, allowed, complete, want)
			}
		}
		for x := int64(-2100); x <= 2100; x++ {
			check(x)
		}
		for _, x := range []int64{tc.lo - 1, tc.lo, tc.hi, tc.hi + 1, maxInt, -maxInt, 123456789012, -98765432100} {
			if x >= -maxInt && x <= maxInt {
				check(x)
			}
		}
		for _, bad := range []string{"-0", "01", "1.5", "1e2", "--1"} {
			if _, complete := accepts(g, bad); complete {
				t.Errorf("%s: %s accepted", schema, bad)
			}
		}
	}
}

// TestNumberBoundsSound: a number with bounds writes only values within them:
// integers in range, or fractions whose integer part's whole interval is in range.
func TestNumberBoundsSound(t *testing.T) {
	for _, tc := range []struct {
		schema   string
		ok, fail []string
	}{
		{`{"type":"number","minimum":0,"maximum":1}`, []string{"0", "1", "0.5", "0.001"}, []string{"-0.5", "1.5", "2", "1e0", "0.50", "-1"}},
		{`{"type":"number","exclusiveMinimum":0,"exclusiveMaximum":10}`, []string{"1", "9", "0.1", "9.99"}, []string{"0", "0.0", "10", "10.5", "-0.1"}},
		{`{"type":"number","minimum":-2.5,"maximum":3}`, []string{"-2", "-1.5", "3", "2.75", "-0.5"}, []string{"-3", "-2.5", "3.5", "4"}},
		{`{"type":"number","multipleOf":0.5,"minimum":0}`, []string{"0", "1", "7"}, []string{"0.5", "-1"}},
		{`{"type":"number","minimum":0,"exclusiveMinimum":true,"maximum":2,"exclusiveMaximum":true}`, []string{"1", "0.5", "1.5"}, []string{"0", "2", "0.0"}}, // draft 4, as OpenAPI 3.0 writes it
	} {
		g := mustCompile(t, tc.schema)
		for _, s := range tc.ok {
			if allowed, complete := accepts(g, s); !allowed || !complete {
				t.Errorf("%s: %s refused", tc.schema, s)
			}
		}
		for _, s := range tc.fail {
			if _, complete := accepts(g, s); complete {
				t.Errorf("%s: %s accepted", tc.schema, s)
			}
		}
	}
}

// TestStringKeywords: patterns, formats and lengths, alone and together.
func TestStringKeywords(t *testing.T) {
	for _, tc := range []struct {
		schema   string
		ok, fail []string
	}{
		{`{"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"}`, []string{`"AB-123"`}, []string{`"AB-12"`, `"ab-123"`, `"AB-1234"`}},
		{`{"type":"string","pattern":"(cat|dog)s?"}`, []string{`"cat"`, `"dogs"`}, []string{`"cow"`, `"cats!"`}},
		{`{"type":"string","pattern":"[^a-z]+"}`, []string{`"A1 é\""`, `"\n"`}, []string{`"a"`, `""`}},
		{`{"type":"string","pattern":"a.c"}`, []string{`"abc"`, `"a日c"`, `"a\"c"`}, []string{`"ac"`, `"a\nc"`}},
		{`{"type":"string","pattern":"x+","maxLength":3,"minLength":2}`, []string{`"xx"`, `"xxx"`}, []string{`"x"`, `"xxxx"`}},
		{`{"type":"string","format":"email"}`, []string{`"ann.lee+x@mail.example.com"`}, []string{`"ann"`, `"@x.com"`, `"a@b"`}},
		{`{"type":"string","format":"hostname"}`, []string{`"example.com"`, `"a-b.c"`}, []string{`"-a.com"`, `"a..b"`, `"a_b"`}},
		{`{"type":"string","format":"ipv4"}`, []string{`"192.168.0.1"`, `"0.0.0.0"`}, []string{`"256.1.1.1"`, `"01.1.1.1"`, `"1.1.1"`}},
		{`{"type":"string","format":"ipv6"}`, []string{`"::1"`, `"fe80::1:2"`, `"1:2:3:4:5:6:7:8"`, `"::"`}, []string{`"1:2:3:4:5:6:7:8:9"`, `":::"`, `"1::2::3"`}},
		{`{"type":"string","format":"duration"}`, []string{`"P1D"`, `"PT5M"`, `"P1Y2M3DT4H5M6S"`, `"P2W"`}, []string{`"P"`, `"PT"`, `"P1H"`, `"1D"`}},
		{`{"type":"string","pattern":"[a-z]{3,1000}"}`, []string{`"abc"`}, []string{`"ab"`, `"abC"`}},
		{`{"type":"string","pattern":"^(?!ab)(?=.*z)[a-z]+$"}`, []string{`"az"`, `"baz"`}, []string{`"abz"`, `"bay"`}},
		{zodEmail, []string{`"ann.lee@mail.example.com"`}, []string{`".ann@x.com"`, `"a..b@x.com"`}},
		{`{"type":"string","format":"uuid"}`, []string{`"123e4567-e89b-12d3-a456-426614174000"`}, []string{`"123"`}},
		{`{"type":"string","format":"date","maxLength":10}`, []string{`"2024-02-28"`}, []string{`"2024-2-28"`}},
		{`{"type":"string","format":"date","maxLength":9}`, nil, []string{`"2024-02-28"`}},
	} {
		g, err := CompileSchema([]byte(tc.schema))
		if tc.ok == nil {
			if err == nil {
				t.Errorf("%s: compiled, want no value", tc.schema)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.schema, err)
		}
		val := validator(t, tc.schema)
		for _, s := range tc.ok {
			if allowed, complete := accepts(g, s); !allowed || !complete {
				t.Errorf("%s: %s refused", tc.schema, s)
			}
			inst, _ := jsonschema.UnmarshalJSON(strings.NewReader(s))
			if err := val.Validate(inst); err != nil {
				t.Errorf("%s: %s accepted here but invalid: %v", tc.schema, s, err)
			}
		}
		for _, s := range tc.fail {
			if _, complete := accepts(g, s); complete {
				t.Errorf("%s: %s accepted", tc.schema, s)
			}
		}
	}
}

// zodEmail is what zod v4's toJSONSchema writes for z.email(): a format and a pattern
// that starts with two lookaheads.
const zodEmail = `{"type":"string","format":"email","pattern":"^(?!\\.)(?!.*\\.\\.)([A-Za-z0-9_'+\\-\\.]*)[A-Za-z0-9_+-]@([A-Za-z0-9][A-Za-z0-9\\-]*\\.)+[A-Za-z]{2,}$"}`

// TestPatternErrorsNamePath: a pattern outside the subset is a 400 naming its path.
func TestPatternErrorsNamePath(t *testing.T) {
	_, err := CompileSchema([]byte(`{"type":"object","properties":{"code":{"type":"string","pattern":"(a)\\1"}}}`))
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "#/properties/code") {
		t.Errorf("got %v, want ErrUnsupported naming #/properties/code", err)
	}
}

// TestValueKeywordsNeverIgnored: a value keyword where the grammar would not apply it
// (no type, beside anyOf or $ref) is refused, and an enum beside a type or value
// keywords keeps only the values that meet them: never an output that breaks them.
func TestValueKeywordsNeverIgnored(t *testing.T) {
	for _, s := range []string{`{"minimum":3}`, `{"anyOf":[{"type":"integer"}],"maximum":3}`, `{"$ref":"#/$defs/a","$defs":{"a":{"type":"string"}},"pattern":"x"}`} {
		if _, err := CompileSchema([]byte(s)); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: %v, want ErrUnsupported", s, err)
		}
		loose, err := Loosen([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := CompileSchema(loose); err != nil {
			t.Errorf("%s loosened to %s: %v", s, loose, err)
		}
	}
	g := mustCompile(t, `{"type":"integer","enum":[1,5,9,"x"],"maximum":6}`)
	for in, want := range map[string]bool{"1": true, "5": true, "9": false, `"x"`: false} {
		if _, complete := accepts(g, in); complete != want {
			t.Errorf("enum beside maximum: %s complete %v, want %v", in, complete, want)
		}
	}
	if _, err := CompileSchema([]byte(`{"type":"string","enum":["ab","abc"],"maxLength":1}`)); !errors.Is(err, ErrSchema) {
		t.Errorf("an enum none of whose values meets maxLength: %v, want ErrSchema", err)
	}
}

// TestLoosenDropsUnsupported: a schema that is not strict loses the keywords the
// grammar cannot enforce and keeps the rest (bounds included).
func TestLoosenDropsUnsupported(t *testing.T) {
	s := `{"type":"object","properties":{"a":{"type":"integer","minimum":1,"maximum":3,"not":{"const":2}},"b":{"oneOf":[{"type":"string"}],"type":"string","pattern":"(?<=x)y"}},"required":["a"],"minProperties":1}`
	if _, err := CompileSchema([]byte(s)); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("strict: %v, want ErrUnsupported", err)
	}
	loose, err := Loosen([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	g := mustCompile(t, string(loose))
	if l, err := Loosen([]byte(zodEmail)); err != nil || !strings.Contains(string(l), "pattern") {
		t.Errorf("Loosen dropped a pattern with lookaheads at its start: %s %v", l, err)
	}
	if _, complete := accepts(g, `{"a":2,"b":"y"}`); !complete {
		t.Errorf("%s: refused a valid value", loose)
	}
	if _, complete := accepts(g, `{"a":4}`); complete {
		t.Errorf("%s: the bounds were dropped", loose)
	}
}

// keywordSchema builds a random schema of the supported keywords from fuzz bytes.
func keywordSchema(data []byte) string {
	pos := 0
	next := func() int {
		if pos >= len(data) {
			return 0
		}
		pos++
		return int(data[pos-1])
	}
	patterns := []string{`^[a-z]+$`, `\d{2,4}-[A-F]?`, `(ab|cd)*x`, `[^"\\\\]{0,3}`, `.\s\w`, `é+|日本`}
	formats := []string{"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
	var value func(depth int) string
	value = func(depth int) string {
		k := next() % 6
		switch {
		case k == 0 || k == 1:
			typ := []string{"integer", "number"}[k]
			var kw []string
			lo := next() - 128
			if next()%2 == 0 {
				kw = append(kw, fmt.Sprintf(`"%s":%d`, []string{"minimum", "exclusiveMinimum"}[next()%2], lo))
			}
			if next()%2 == 0 {
				kw = append(kw, fmt.Sprintf(`"%s":%d`, []string{"maximum", "exclusiveMaximum"}[next()%2], lo+next()*next()))
			}
			if next()%3 == 0 {
				kw = append(kw, fmt.Sprintf(`"multipleOf":%d`, 1+next()%40))
			}
			return fmt.Sprintf(`{"type":%q%s}`, typ, prefixComma(kw))
		case k == 2:
			var kw []string
			if c := next() % 4; c == 1 {
				kw = append(kw, fmt.Sprintf(`"pattern":%q`, patterns[next()%len(patterns)]))
			} else if c == 2 {
				kw = append(kw, fmt.Sprintf(`"format":%q`, formats[next()%len(formats)]))
			}
			if next()%2 == 0 {
				kw = append(kw, fmt.Sprintf(`"minLength":%d`, next()%4))
			}
			if next()%2 == 0 {
				kw = append(kw, fmt.Sprintf(`"maxLength":%d`, 4+next()%60))
			}
			return `{"type":"string"` + prefixComma(kw) + `}`
		case k == 3 && depth < 3:
			lo := next() % 3
			return fmt.Sprintf(`{"type":"array","items":%s,"minItems":%d,"maxItems":%d}`, value(depth+1), lo, lo+next()%3)
		case k == 4 && depth < 3:
			n := 1 + next()%4
			var props, req []string
			for i := range n {
				props = append(props, fmt.Sprintf(`"p%d":%s`, i, value(depth+1)))
				if next()%2 == 0 {
					req = append(req, fmt.Sprintf(`"p%d"`, i))
				}
			}
			return `{"type":"object","properties":{` + strings.Join(props, ",") + `},"required":[` + strings.Join(req, ",") +
				`],"additionalProperties":false}`
		}
		if k == 5 && next()%2 == 0 {
			return fmt.Sprintf(`{"type":"integer","enum":[%d,%d,"x",%d],"maximum":%d}`, next()-128, next(), next()*3, next()-64)
		}
		return `{"enum":["a",1,null]}`
	}
	return value(0)
}

func prefixComma(kw []string) string {
	if len(kw) == 0 {
		return ""
	}
	return "," + strings.Join(kw, ",")
}

// FuzzKeywordSchemas: random schemas of the whole strict subset (bounds, multipleOf,
// patterns, formats, lengths, item counts), built from the fuzz bytes; outputs walked
// through each grammar's masks validate with an independent validator
// (santhosh-tekuri/jsonschema, formats asserted). A schema with no value (bounds
// that exclude every integer) must be a compile error, never a grammar.
func FuzzKeywordSchemas(f *testing.F) {
	f.Add([]byte{0, 1, 0, 0, 100, 3, 5}, []byte{1, 2, 3}, uint8(20))
	f.Add([]byte{4, 3, 2, 1, 2, 5, 0, 0, 1, 9, 1, 7, 0, 3}, []byte{200, 7, 99}, uint8(60))
	f.Add([]byte{2, 2, 1, 0, 4, 1, 30}, []byte{9, 8}, uint8(10))
	f.Add([]byte{4, 3, 2, 2, 3, 2, 1, 5, 2, 2, 0, 7}, []byte{42}, uint8(40))
	for i := range 9 {
		f.Add([]byte{2, 2, byte(i), 1, 2, 1, 40}, []byte{byte(i), 77}, uint8(30))
	}
	v, _ := testVocab()
	f.Fuzz(func(t *testing.T, shape, choices []byte, budget uint8) {
		schema := keywordSchema(shape)
		g, err := CompileSchema([]byte(schema))
		if err != nil {
			if !errors.Is(err, ErrSchema) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("%s: %v", schema, err)
			}
			return
		}
		val := validator(t, schema)
		out := generateRandom(t, v, g, choices, int(budget))
		if !json.Valid([]byte(out)) {
			t.Fatalf("%s: output is not JSON: %s", schema, out)
		}
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(out))
		if err != nil {
			t.Fatal(err)
		}
		if err := val.Validate(inst); err != nil {
			t.Fatalf("%s: output %s does not validate: %v", schema, out, err)
		}
	})
}

// generateRandom is generate with, after budget steps, a pseudo-random allowed token
// (seeded by choices) where no closing token is allowed: a pattern such as (ab|cd)*x
// ends only on a token the closers do not hold.
func generateRandom(t testing.TB, v *Vocab, g *Grammar, choices []byte, budget int) string {
	m := v.NewMatcher(g)
	var out strings.Builder
	var seed uint64
	for _, c := range choices {
		seed = seed*131 + uint64(c)
	}
	rng := rand.New(rand.NewPCG(seed, uint64(budget)))
	closers := []string{"\"", "}", "]", "0", "null", "false", ":", ",", "{\"", "1"}
	for step := 0; !m.Done(); step++ {
		if step > budget+4000 {
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
			id = pick(bits, rng.IntN(n))
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

// TestFormatsValidate: outputs walked at random through each format's grammar (and
// with lengths) are valid for the independent validator, formats asserted.
func TestFormatsValidate(t *testing.T) {
	v, _ := testVocab()
	for _, f := range []string{"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"} {
		for _, schema := range []string{fmt.Sprintf(`{"type":"string","format":%q}`, f), fmt.Sprintf(`{"type":"string","format":%q,"minLength":3,"maxLength":20}`, f)} {
			g, err := CompileSchema([]byte(schema))
			if err != nil {
				t.Logf("%s: %v", schema, err) // lengths no value of the format meets (date-time, uuid)
				continue
			}
			val := validator(t, schema)
			for seed := range 60 {
				out := generateRandom(t, v, g, []byte{byte(seed), byte(seed >> 3)}, seed%40)
				inst, err := jsonschema.UnmarshalJSON(strings.NewReader(out))
				if err != nil {
					t.Fatalf("%s: %q does not parse: %v", schema, out, err)
				}
				if err := val.Validate(inst); err != nil {
					t.Fatalf("%s: %s does not validate: %v", schema, out, err)
				}
			}
		}
	}
}
