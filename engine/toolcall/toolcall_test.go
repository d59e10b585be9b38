package toolcall

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestParseTable(t *testing.T) {
	tests := []struct {
		name    string
		syn     Syntax
		in      string
		content string
		calls   []Call
		err     error
	}{
		{"plain", Hermes, "Hello there.", "Hello there.", nil, nil},
		{"hermes one", Hermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", "",
			[]Call{{"get_weather", `{"city": "Paris"}`}}, nil},
		{"hermes two with text", Hermes, "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": [1, {\"y\": \"}\"}]}}\n</tool_call>", "Let me check.\n",
			[]Call{{"a", `{}`}, {"b", `{"x": [1, {"y": "}"}]}`}}, nil},
		{"hermes arguments first", Hermes, `<tool_call>{"arguments": {"q": 1}, "name": "s"}</tool_call>`, "", []Call{{"s", `{"q": 1}`}}, nil},
		{"hermes arguments as string", Hermes, `<tool_call>{"name": "s", "arguments": "{\"q\": 1}"}</tool_call>`, "", []Call{{"s", `{"q": 1}`}}, nil},
		{"hermes no arguments", Hermes, `<tool_call>{"name": "now"}</tool_call>`, "", []Call{{"now", `{}`}}, nil},
		{"hermes end marker cut", Hermes, `<tool_call>{"name": "now", "arguments": {}}`, "", []Call{{"now", `{}`}}, nil},
		{"hermes unclosed", Hermes, `<tool_call>{"name": "now", "arguments": {`, "", []Call{{"now", `{`}}, ErrMalformed},
		{"hermes not json", Hermes, `<tool_call>hello</tool_call>`, "", nil, ErrMalformed},
		{"hermes marker in text", Hermes, "use <tool_ and more", "use <tool_ and more", nil, nil},
		{"llama3 tag", Llama3, `<|python_tag|>{"name": "f", "parameters": {"a": 1}}`, "", []Call{{"f", `{"a": 1}`}}, nil},
		{"llama3 bare", Llama3, ` {"name": "f", "parameters": {"a": true}}; {"name": "g", "parameters": {}}`, "", []Call{{"f", `{"a": true}`}, {"g", `{}`}}, nil},
		{"llama3 text", Llama3, `The answer is 4.`, "The answer is 4.", nil, nil},
		{"mistral array", Mistral, `[TOOL_CALLS][{"name": "f", "arguments": {"a": 1}}, {"name": "g", "arguments": {"b": "x"}}]`, "", []Call{{"f", `{"a": 1}`}, {"g", `{"b": "x"}`}}, nil},
		{"mistral bare array", Mistral, `[{"name": "f", "arguments": {}}]`, "", []Call{{"f", `{}`}}, nil},
		{"mistral v11", Mistral, `[TOOL_CALLS]get_weather[ARGS]{"city": "Oslo"}`, "", []Call{{"get_weather", `{"city": "Oslo"}`}}, nil},
		{"phi4", Phi4, `<|tool_call|>[{"name": "f", "arguments": {"n": -1.5e3}}]<|/tool_call|>`, "", []Call{{"f", `{"n": -1.5e3}`}}, nil},
		{"phi4 bare", Phi4, `[{"name": "f", "arguments": {"n": 2}}]`, "", []Call{{"f", `{"n": 2}`}}, nil},
		{"phi4 functools", Phi4, `functools[{"name": "f", "arguments": {"n": 2}}, {"name": "g", "arguments": {}}]`, "", []Call{{"f", `{"n": 2}`}, {"g", `{}`}}, nil},
		{"phi4 func text", Phi4, `func is short for function.`, "func is short for function.", nil, nil},
		{"phi4 functools in text", Phi4, `See functools[x] later.`, "See functools[x] later.", nil, nil},
		{"text after a call", Hermes, "<tool_call>{\"name\": \"a\"}</tool_call>\n\nDone, a b c.", "Done, a b c.", []Call{{"a", `{}`}}, nil},
		{"primitive arguments", Hermes, `<tool_call>{"name": "f", "arguments": 12}</tool_call>`, "", []Call{{"f", `12`}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			content, calls, err := Parse(tc.syn, tc.in)
			if !errors.Is(err, tc.err) {
				t.Fatalf("error %v, want %v", err, tc.err)
			}
			if err != nil {
				return
			}
			if content != tc.content || !sameCalls(calls, tc.calls) {
				t.Errorf("content %q calls %+v, want %q %+v", content, calls, tc.content, tc.calls)
			}
			// Streamed one byte at a time, and in uneven pieces, the result is the same,
			// and each call's name comes before its arguments.
			for _, size := range []int{1, 2, 3, 7} {
				p := New(tc.syn)
				var ev []Event
				for i := 0; i < len(tc.in); i += size {
					ev = append(ev, p.Feed(tc.in[i:min(i+size, len(tc.in))])...)
				}
				tail, err := p.Finish()
				if err != nil {
					t.Fatalf("size %d: %v", size, err)
				}
				ev = append(ev, tail...)
				checkOrder(t, ev)
				c2, calls2 := Collect(ev)
				if c2 != tc.content || !sameCalls(calls2, tc.calls) {
					t.Errorf("size %d: content %q calls %+v", size, c2, calls2)
				}
			}
		})
	}
}

func sameCalls(a, b []Call) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// checkOrder: a call's first event carries its name; indexes count up from 0.
func checkOrder(t *testing.T, ev []Event) {
	t.Helper()
	named := map[int]bool{}
	for _, e := range ev {
		if !e.Call {
			continue
		}
		if e.Name != "" {
			if named[e.Index] {
				t.Fatalf("call %d named twice", e.Index)
			}
			if e.Index > 0 && !named[e.Index-1] {
				t.Fatalf("call %d before call %d", e.Index, e.Index-1)
			}
			named[e.Index] = true
		} else if !named[e.Index] {
			t.Fatalf("arguments of call %d before its name", e.Index)
		}
	}
}

func TestDetect(t *testing.T) {
	for tpl, want := range map[string]Syntax{
		"{{ '<tool_call>' }}":                Hermes,
		"[TOOL_CALLS] {{ x }}":               Mistral,
		"<|python_tag|>":                     Llama3,
		"{% if role == 'ipython' %}":         Llama3,
		"<|tool_call|>{{ x }}<|/tool_call|>": Phi4,
		"as functools[{...}]":                Phi4,
		"plain":                              Hermes,
	} {
		if got := Detect(tpl); got != want {
			t.Errorf("%q: %v, want %v", tpl, got, want)
		}
	}
}

// FuzzToolCalls: any text, cut anywhere, never panics; streamed in pieces it gives the
// same result as parsed whole; a call's name precedes its arguments; and calls
// written by encoding/json from fuzzed names and arguments come back as written.
func FuzzToolCalls(f *testing.F) {
	f.Add("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}</tool_call>", "f", "x\"}", uint8(3), uint8(0))
	f.Add("[TOOL_CALLS]f[ARGS]{}", "g", "{", uint8(1), uint8(2))
	f.Add("{\"name\": \"f\"}; {", "h", "]]", uint8(5), uint8(1))
	f.Add("<|tool_call|>[{\"name\":\"f\",\"arguments\":{}}", "n", "", uint8(2), uint8(3))
	f.Fuzz(func(t *testing.T, text, name, arg string, cut uint8, syn uint8) {
		s := Syntax(syn % 4)
		c1, calls1, err1 := Parse(s, text)
		size := int(cut%9) + 1
		p := New(s)
		var ev []Event
		for i := 0; i < len(text); i += size {
			ev = append(ev, p.Feed(text[i:min(i+size, len(text))])...)
		}
		tail, err2 := p.Finish()
		ev = append(ev, tail...)
		if (err1 == nil) != (err2 == nil) {
			t.Fatalf("whole: %v, streamed: %v", err1, err2)
		}
		if err1 == nil {
			checkOrder(t, ev)
			c2, calls2 := Collect(ev)
			if c1 != c2 || !sameCalls(calls1, calls2) {
				t.Fatalf("whole %q %+v, streamed %q %+v", c1, calls1, c2, calls2)
			}
		}
		// A well-formed call round-trips.
		if name == "" {
			return
		}
		// Names as JSON carries them (invalid UTF-8 becomes U+FFFD).
		nb, _ := json.Marshal(name)
		json.Unmarshal(nb, &name)
		if len(nb) > 4096 {
			// Over the parser's 4 KiB bound on a name: refused, as malformed.
			out := "<tool_call>\n" + `{"name":` + string(nb) + `,"arguments":{}}` + "\n</tool_call>"
			if _, _, err := Parse(Hermes, out); !errors.Is(err, ErrMalformed) {
				t.Fatalf("a %d-byte name: %v, want ErrMalformed", len(nb), err)
			}
			return
		}
		argsJSON, _ := json.Marshal(map[string]string{"v": arg})
		call, _ := json.Marshal(map[string]any{"name": name, "arguments": json.RawMessage(argsJSON)})
		var out string
		switch s {
		case Hermes:
			out = "<tool_call>\n" + string(call) + "\n</tool_call>"
		case Llama3:
			out = "<|python_tag|>" + strings.Replace(string(call), `"arguments"`, `"parameters"`, 1)
		case Mistral:
			out = "[TOOL_CALLS][" + string(call) + "]"
		case Phi4:
			out = "<|tool_call|>[" + string(call) + "]<|/tool_call|>"
		}
		_, calls, err := Parse(s, out)
		if err != nil || len(calls) != 1 || calls[0].Name != name || calls[0].Arguments != string(argsJSON) {
			t.Fatalf("%s: %q gave %+v, %v", s, out, calls, err)
		}
	})
}

// TestDetectVocab: for a template with tools support that names no syntax, the
// syntax whose marker the vocabulary has as a token.
func TestDetectVocab(t *testing.T) {
	for _, c := range []struct {
		has  []string
		want Syntax
	}{
		{nil, Hermes},
		{[]string{"[TOOL_CALLS]"}, Mistral},
		{[]string{"<|python_tag|>", "<|eot_id|>"}, Llama3},
		{[]string{"<|tool_call|>"}, Phi4},
		{[]string{"<tool_call>"}, Hermes},
	} {
		got, _ := DetectVocab(func(s string) bool {
			for _, h := range c.has {
				if h == s {
					return true
				}
			}
			return false
		})
		if got != c.want {
			t.Errorf("%v: %v, want %v", c.has, got, c.want)
		}
	}
}
