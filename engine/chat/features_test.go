package chat

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestJinjaFeaturesGolden renders, one small template each, the Jinja features the
// families' chat templates with tools use (Llama 3.1/3.2, Qwen2.5/3, Mistral
// v0.3/Nemo/Small, Phi-4-mini): tojson with indent and separators, dict order
// through items() and the items filter, selectattr and dict equality, slices,
// "is defined/none/string/iterable/mapping/true/false", dict get and "in",
// namespace, loop controls, reassigning messages, raise_exception, macros, block
// set, backslash-newline in literals. The expected text is Python's jinja2's
// (testdata/gen_features_golden.py); a case it rejects must fail here too.
func TestJinjaFeaturesGolden(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "features-golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		Messages []Message       `json:"messages"`
		Tools    json.RawMessage `json:"tools"`
		Cases    []struct {
			Name     string  `json:"name"`
			Template string  `json:"template"`
			Expected *string `json:"expected"`
			Error    string  `json:"error"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(b, &golden); err != nil {
		t.Fatal(err)
	}
	cases := golden.Cases
	if len(cases) < 40 {
		t.Fatalf("%d cases", len(cases))
	}
	tools, err := JSONValue(string(golden.Tools))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			tpl, err := New(c.Template, Options{BOS: "<s>", EOS: "</s>", Now: testNow})
			if err != nil {
				t.Fatal(err)
			}
			got, err := tpl.RenderVars(golden.Messages, true, map[string]any{"tools": tools})
			switch {
			case c.Expected == nil && !errors.Is(err, ErrException):
				t.Fatalf("got %q, %v; jinja2 raised %q", got, err, c.Error)
			case c.Expected == nil:
			case err != nil:
				t.Fatal(err)
			case got != *c.Expected:
				t.Errorf("\n got %q\nwant %q", got, *c.Expected)
			}
		})
	}
}
