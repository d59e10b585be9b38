package engine

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lmlite/lmlite/engine/chat"
)

// familyTemplate reads a chat template of testdata/families: written for these
// tests in the format of a model family's own template with tools (Llama 3.1/3.2,
// Qwen2.5, Mistral, Phi-4-mini), using the Jinja features those use.
func familyTemplate(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "families", name+".jinja"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// openAITools converts OpenAI's tools JSON to the engine's.
func openAITools(t testing.TB, raw json.RawMessage) []Tool {
	t.Helper()
	var in []struct {
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		t.Fatal(err)
	}
	var out []Tool
	for _, x := range in {
		out = append(out, Tool{Name: x.Function.Name, Description: x.Function.Description, Parameters: x.Function.Parameters})
	}
	return out
}

// TestFamilyTemplatesGolden: each family's template renders the tools offered, an
// assistant's calls and the tools' results (and, but for Llama's one call per turn,
// two parallel calls, their results, an answer and a new question) exactly as
// Python's jinja2 renders them after the same conversion
// (testdata/gen_family_golden.py): Llama's tools as indented JSON in the first user
// turn and its result in the ipython role, Qwen's <tools> and <tool_call>, Mistral's
// [AVAILABLE_TOOLS] written key by key in the request's order and [TOOL_CALLS] with
// ids made 9 letters and digits (its template refuses others), Phi-4-mini's
// <|tool|> per function, and its own template's tools JSON on the system message
// with the calls as <|tool_call|> text. Each template names the syntax its model
// writes.
func TestFamilyTemplatesGolden(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "family-golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Template string          `json:"template"`
		Name     string          `json:"name"`
		BOS      string          `json:"bos"`
		EOS      string          `json:"eos"`
		Messages []Message       `json:"messages"`
		Tools    json.RawMessage `json:"tools"`
		Syntax   string          `json:"syntax"`
		Expected string          `json:"expected"`
	}
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 14 {
		t.Fatalf("%d cases", len(cases))
	}
	now := func() time.Time { return time.Date(2026, 11, 22, 10, 30, 0, 0, time.UTC) }
	for _, c := range cases {
		t.Run(c.Template+"/"+c.Name, func(t *testing.T) {
			tmpl, err := chat.New(familyTemplate(t, c.Template), chat.Options{BOS: c.BOS, EOS: c.EOS, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			syn := toolSyntax(nil, tmpl)
			if syn.String() != c.Syntax {
				t.Fatalf("syntax %v, want %s", syn, c.Syntax)
			}
			cm := make([]chat.Message, len(c.Messages))
			for i, m := range c.Messages {
				cm[i] = toChat(m)
			}
			got, err := renderTools(tmpl, syn, cm, openAITools(t, c.Tools))
			if err != nil {
				t.Fatal(err)
			}
			if got != c.Expected {
				t.Errorf("\n got %q\nwant %q", got, c.Expected)
			}
		})
	}
}

// TestMistralID: ids of 9 letters and digits stay; others become 9 of them, the
// same for the same id and different for different ids.
func TestMistralID(t *testing.T) {
	if got := MistralToolCallID("abcDEF123"); got != "abcDEF123" {
		t.Errorf("kept id: %q", got)
	}
	seen := map[string]string{}
	for _, id := range []string{"", "call_1", "call_8f3a_0_0", "call_8f3a_0_1", "abc_EF123", "abcDEF1234", "日本語日本語日本語"} {
		got := MistralToolCallID(id)
		if len(got) != 9 || got != MistralToolCallID(id) {
			t.Fatalf("%q -> %q", id, got)
		}
		for _, r := range got {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
				t.Fatalf("%q -> %q", id, got)
			}
		}
		if other, dup := seen[got]; dup {
			t.Fatalf("%q and %q -> %q", id, other, got)
		}
		seen[got] = id
	}
}

// TestToolMessagesWithoutTools: a conversation with calls and results but no tools
// (a client that sends the tools only while it expects calls) still renders them:
// through the template's own support, or as Hermes text without a tools prompt.
func TestToolMessagesWithoutTools(t *testing.T) {
	msgs := []chat.Message{{Role: "user", Content: "Weather?"},
		{Role: "assistant", ToolCalls: []chat.ToolCall{{ID: "c1", Name: "get_weather", Arguments: `{"city": "Oslo"}`}}},
		{Role: "tool", ToolCallID: "c1", Content: "3 degrees"}}
	for _, c := range []struct{ src, want string }{
		{familyTemplate(t, "qwen"), "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n3 degrees\n</tool_response><|im_end|>\n<|im_start|>assistant\n"},
		{"", "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n3 degrees\n</tool_response><|im_end|>\n<|im_start|>assistant\n"},
	} {
		tmpl, err := chat.New(c.src, chat.Options{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := renderTools(tmpl, toolSyntax(nil, tmpl), msgs, nil)
		if err != nil || got != c.want {
			t.Errorf("got %q, %v\nwant %q", got, err, c.want)
		}
	}
}
