package grammar

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestWireRoundTrip: a grammar read back from its JSON form writes the same form,
// keeps its key, and accepts and refuses the same outputs.
func TestWireRoundTrip(t *testing.T) {
	person := `{"type":"object","properties":{"name":{"type":"string","maxLength":8},"born":{"type":"string","format":"date"},"kind":{"enum":["a","b",null]},"tags":{"type":"array","items":{"anyOf":[{"type":"string"},{"type":"number"}]},"maxItems":2},"age":{"type":"integer","minimum":-3,"maximum":120,"multipleOf":3},"code":{"type":"string","pattern":"^[A-Z]{2}-\\d+$","maxLength":6}},"required":["name"],"additionalProperties":false}`
	grammars := map[string]*Grammar{
		"object": JSONObject(),
		"value":  JSONValue(),
		"person": mustCompile(t, person),
		"tool":   mustCompile(t, person).Wrap("<tool_call>", "</tool_call>"),
	}
	outputs := []string{`{"a":[1,{"b":null}]}`, `{"name":"Ann","born":"2020-01-31","tags":["x",2]}`, `{"name":"too long a name"}`,
		`<tool_call>{"name":"x","kind":null}</tool_call>`, `{"born":"2020-13-01"`, `[1,2]`, `"s"`, `{"name":"Ann","kind":"c"}`,
		`{"name":"A","age":-3,"code":"AB-12"}`, `{"name":"A","age":121}`, `{"name":"A","age":4}`, `{"name":"A","code":"AB-1234"}`}
	for name, g := range grammars {
		b, err := json.Marshal(g)
		if err != nil {
			t.Fatal(err)
		}
		var back Grammar
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b2, _ := json.Marshal(&back)
		if !bytes.Equal(b, b2) || back.Key() != g.Key() {
			t.Errorf("%s: the form changed in a round trip", name)
		}
		for _, out := range outputs {
			a1, c1 := accepts(g, out)
			a2, c2 := accepts(&back, out)
			if a1 != a2 || c1 != c2 {
				t.Errorf("%s on %q: %v %v after the round trip, %v %v before", name, out, a2, c2, a1, c1)
			}
		}
	}
	var g Grammar
	if err := json.Unmarshal([]byte(`{"key":"x","nodes":[],"root":3}`), &g); err == nil {
		t.Error("a root out of range was accepted")
	}
}
