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
	var cases []struct {
		Name     string                     `json:"name"`
		Template string                     `json:"template"`
		Messages []Message                  `json:"messages"`
		Vars     map[string]json.RawMessage `json:"vars"`
		Expected *string                    `json:"expected"`
		Error    string                     `json:"error"`
	}
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 40 {
		t.Fatalf("%d cases", len(cases))
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			vars := map[string]any{}
			for k, v := range c.Vars {
				if vars[k], err = JSONValue(string(v)); err != nil {
					t.Fatal(err)
				}
			}
			tpl, err := New(c.Template, Options{BOS: "<s>", EOS: "</s>", Now: testNow})
			if err != nil {
				t.Fatal(err)
			}
			got, err := tpl.RenderVars(c.Messages, true, vars)
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
