package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lmlite/lmlite/engine/chat"
	"github.com/lmlite/lmlite/engine/toolcall"
	"github.com/lmlite/lmlite/internal/testenv"
)

// realTemplate is a real model's chat template (installed from a registry package
// by scripts/chattemplates/setup.sh), its special tokens and the tool-call syntax
// its model writes.
type realTemplate struct {
	name     string
	bos, eos string
	syntax   toolcall.Syntax
	tools    bool // the template has tools support
	// msgTools: the template reads the tools as JSON text on the system message
	// (Phi-4-mini's), which is how its model card passes them.
	msgTools bool
	// callText: for a template that reads no tool_calls (Phi-4-mini's), an
	// assistant's call as the model writes it in its content (%s: name, arguments).
	callText string
}

var realTemplates = []realTemplate{
	{name: "llama3.1", bos: "<|begin_of_text|>", eos: "<|eot_id|>", syntax: toolcall.Llama3, tools: true},
	{name: "llama3.2", bos: "<|begin_of_text|>", eos: "<|eot_id|>", syntax: toolcall.Llama3, tools: true},
	{name: "ministral3", bos: "<s>", eos: "</s>", syntax: toolcall.Mistral, tools: true},
	{name: "mistral-medium3.5", bos: "<s>", eos: "</s>", syntax: toolcall.Mistral, tools: true},
	{name: "phi4-mini", bos: "<|endoftext|>", eos: "<|endoftext|>", syntax: toolcall.Phi4, tools: true, msgTools: true,
		callText: `<|tool_call|>[{"name": "%s", "arguments": %s}]<|/tool_call|>`},
	{name: "phi4", bos: "<|endoftext|>", eos: "<|im_end|>"},
}

// The tools of the real-template tests, and the same as Python's json.dumps writes
// the functions' list (the form Phi-4-mini's model card puts on the system message).
var (
	realTools = []Tool{
		{Name: "get_weather", Description: "The current weather in a city", Parameters: json.RawMessage(
			`{"type": "object", "properties": {"city": {"type": "string", "description": "The city, e.g. Zürich"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}`)},
		{Name: "get_time", Description: "The time now"},
	}
	realToolsPyJSON = `[{"name": "get_weather", "description": "The current weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city, e.g. Zürich"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}, {"name": "get_time", "description": "The time now"}]`
)

// realConversations: a tool call and its result; the same answered and followed by
// a new question (non-ASCII text, a result that is not JSON); and a plain chat.
var realConversations = []struct {
	name  string
	tools bool
	msgs  []Message
}{
	{"call-result", true, []Message{
		{Role: "system", Content: "You are a helpful assistant."},
		{Role: "user", Content: "What is the weather in Paris?"},
		{Role: "assistant", ToolCalls: []ToolCall{{ID: "call00001", Name: "get_weather", Arguments: `{"city": "Paris", "unit": "celsius"}`}}},
		{Role: "tool", ToolCallID: "call00001", Content: `{"temperature": 21, "sky": "clear"}`},
	}},
	{"call-result-answer-next", true, []Message{
		{Role: "system", Content: "You are a helpful assistant."},
		{Role: "user", Content: "What is the weather in Paris?"},
		{Role: "assistant", ToolCalls: []ToolCall{{ID: "call00001", Name: "get_weather", Arguments: `{"city":"Paris","unit":"celsius"}`}}},
		{Role: "tool", ToolCallID: "call00001", Content: "21 degrees, clear"},
		{Role: "assistant", Content: "It is 21 °C and clear in Paris."},
		{Role: "user", Content: "And in Zürich, \"tomorrow\"?"},
	}},
	{"plain", false, []Message{
		{Role: "system", Content: "Be brief."},
		{Role: "user", Content: "Hi"},
		{Role: "assistant", Content: "Hello! How can I help?"},
		{Role: "user", Content: "Tell me a joke."},
	}},
}

// hfMessages is msgs as a client calling transformers' apply_chat_template passes
// them: OpenAI's shape with each call's arguments decoded (transformers' documented
// form), an assistant's content "" beside its calls (or, for a template that reads
// no tool_calls, the calls as callText in it), and for a template that reads them
// there, the tools' JSON text on the system message.
func hfMessages(t *testing.T, msgs []Message, toolsText, callText string) []any {
	t.Helper()
	type fn struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	type call struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	type msg struct {
		Role       string `json:"role"`
		Content    string `json:"content"`
		ToolCalls  []call `json:"tool_calls,omitempty"`
		ToolCallID string `json:"tool_call_id,omitempty"`
		Tools      string `json:"tools,omitempty"`
	}
	var out []any
	for i, m := range msgs {
		x := msg{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID}
		for _, c := range m.ToolCalls {
			if callText != "" {
				x.Content += fmt.Sprintf(callText, c.Name, c.Arguments)
				continue
			}
			x.ToolCalls = append(x.ToolCalls, call{ID: c.ID, Type: "function", Function: fn{Name: c.Name, Arguments: json.RawMessage(c.Arguments)}})
		}
		if i == 0 && m.Role == "system" {
			x.Tools = toolsText
		}
		out = append(out, x)
	}
	return out
}

// hfTools is tools in OpenAI's request shape, keys in the order the SDKs write them.
func hfTools(tools []Tool) []any {
	type fn struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
	}
	type tool struct {
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	var out []any
	for _, t := range tools {
		out = append(out, tool{Type: "function", Function: fn{Name: t.Name, Description: t.Description, Parameters: t.Parameters}})
	}
	return out
}

// hfRender renders cases with @huggingface/jinja (scripts/chattemplates/render.mjs).
func hfRender(t *testing.T, dir string, cases []map[string]any) map[string]struct{ Text, Error string } {
	t.Helper()
	in, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", filepath.Join(testenv.RepoRoot(t), "scripts", "chattemplates", "render.mjs"), dir)
	cmd.Env = append(os.Environ(), "TZ=UTC", "LANG=en_US.UTF-8", "LC_ALL=en_US.UTF-8")
	cmd.Stdin = bytes.NewReader(in)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("render.mjs: %v: %s", err, stderr.String())
	}
	var res []struct{ Name, Text, Error string }
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatal(err)
	}
	m := map[string]struct{ Text, Error string }{}
	for _, r := range res {
		m[r.Name] = struct{ Text, Error string }{r.Text, r.Error}
	}
	return m
}

// TestRealTemplatesMatchHFJinja: the real chat templates of Llama 3.1 and 3.2,
// Ministral 3 and Mistral Medium 3.5 (Mistral's [AVAILABLE_TOOLS] format) and
// Phi-4-mini, read from registry packages at test time (scripts/chattemplates),
// render a conversation with tools, an assistant's tool call and the tool's result
// (role "tool"), then the same answered and followed by a new question, exactly as
// @huggingface/jinja renders them from the same conversation in the form
// transformers takes (byte for byte), through the engine's path (RenderChatTools'
// conversion of messages and tools, our Jinja environment, strftime_now on a fixed
// clock); a plain chat renders the same through these and Phi-4's (which has no
// tools support). Each template's markup names its model's tool-call syntax.
func TestRealTemplatesMatchHFJinja(t *testing.T) {
	dir := testenv.ChatTemplates(t)
	now := time.Date(2026, 3, 1, 8, 5, 0, 0, time.UTC) // yesterday is in another month (Mistral Medium's arithmetic)
	type ours struct{ text, err string }
	got := map[string]ours{}
	var cases []map[string]any
	for _, rt := range realTemplates {
		src := testenv.ChatTemplate(t, rt.name)
		tmpl, err := chat.New(src, chat.Options{BOS: rt.bos, EOS: rt.eos, Now: func() time.Time { return now }})
		if err != nil {
			t.Fatalf("%s: %v", rt.name, err)
		}
		if syn := toolSyntax(nil, tmpl); rt.tools && syn != rt.syntax {
			t.Errorf("%s: syntax %v, want %v", rt.name, syn, rt.syntax)
		}
		for _, conv := range realConversations {
			if conv.tools && !rt.tools {
				continue
			}
			name := rt.name + "/" + conv.name
			var tools []Tool
			ctx := map[string]any{"bos_token": rt.bos, "eos_token": rt.eos, "add_generation_prompt": true}
			toolsText := ""
			if conv.tools {
				tools = realTools
				ctx["tools"] = hfTools(tools)
				if rt.msgTools {
					toolsText = realToolsPyJSON
				}
			}
			ctx["messages"] = hfMessages(t, conv.msgs, toolsText, rt.callText)
			cm := make([]chat.Message, len(conv.msgs))
			for i, m := range conv.msgs {
				cm[i] = toChat(m)
			}
			text, err := renderTools(tmpl, toolSyntax(nil, tmpl), cm, tools)
			o := ours{text: text}
			if err != nil {
				o.err = err.Error()
			}
			got[name] = o
			cases = append(cases, map[string]any{"name": name, "template": src, "context": ctx, "now": now.Format(time.RFC3339)})
		}
	}
	want := hfRender(t, dir, cases)
	for _, c := range cases {
		name := c["name"].(string)
		g, w := got[name], want[name]
		switch {
		case w.Error != "":
			t.Errorf("%s: @huggingface/jinja failed: %s", name, w.Error)
		case g.err != "":
			t.Errorf("%s: ours failed: %s\nwant %q", name, g.err, w.Text)
		case g.text != w.Text:
			t.Errorf("%s: differs at byte %d:\n got %q\nwant %q", name, firstDiff(g.text, w.Text), g.text, w.Text)
		}
	}
}

// firstDiff is the index of the first byte where a and b differ.
func firstDiff(a, b string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestTemplateCorpusMatchesHFJinja: every chat template the two packages carry
// (the GGUF templates of about a hundred Ollama library models, and the Go
// module's: Gemma, GPT-OSS, DeepSeek, GLM, Kimi, Qwen 3.x, Nemotron, ...) renders a
// plain chat, and a conversation with tools, a call and its result, with our Jinja
// environment exactly as @huggingface/jinja renders them, wherever
// @huggingface/jinja renders it at all (a template may refuse a conversation, or
// @huggingface/jinja may lack a feature: those are counted, not compared, as are its renderings that print a dict, which it writes
// as "[object Map]" where jinja2 writes Python's repr).
func TestTemplateCorpusMatchesHFJinja(t *testing.T) {
	dir := testenv.ChatTemplates(t)
	files, err := filepath.Glob(filepath.Join(dir, "templates", "corpus", "*.jinja"))
	if err != nil || len(files) < 100 {
		t.Fatalf("%d templates in the corpus: %v", len(files), err)
	}
	now := time.Date(2026, 3, 1, 8, 5, 0, 0, time.UTC)
	convs := []struct {
		name  string
		tools bool
		msgs  []Message
	}{
		{"plain", false, []Message{{Role: "user", Content: "Hi there"}, {Role: "assistant", Content: "Hello! How can I help?"}, {Role: "user", Content: "Tell me a joke."}}},
		{"tools", true, realConversations[0].msgs[1:]},
	}
	type ours struct{ text, err string }
	got := map[string]ours{}
	var cases []map[string]any
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		tmpl, err := chat.New(string(src), chat.Options{BOS: "<s>", EOS: "</s>", Now: func() time.Time { return now }})
		for _, conv := range convs {
			name := filepath.Base(f) + "/" + conv.name
			ctx := map[string]any{"bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": true, "messages": hfMessages(t, conv.msgs, "", "")}
			var tools []Tool
			if conv.tools {
				tools = realTools
				ctx["tools"] = hfTools(tools)
			}
			var o ours
			if err != nil {
				o.err = err.Error()
			} else {
				cm := make([]chat.Message, len(conv.msgs))
				for i, m := range conv.msgs {
					cm[i] = toChat(m)
				}
				text, err := tmpl.RenderVars(cm, true, map[string]any{"tools": func() any {
					if !conv.tools {
						return nil
					}
					v, _ := chat.JSONValue(string(mustMarshal(t, hfTools(tools))))
					return v
				}()})
				o.text = text
				if err != nil {
					o.err = err.Error()
				}
			}
			got[name] = o
			cases = append(cases, map[string]any{"name": name, "template": string(src), "context": ctx, "now": now.Format(time.RFC3339)})
		}
	}
	want := hfRender(t, dir, cases)
	compared, hfFailed := 0, 0
	for _, c := range cases {
		name := c["name"].(string)
		g, w := got[name], want[name]
		switch {
		case w.Error != "":
			hfFailed++
		case strings.Contains(w.Text, "[object Map]") && !strings.Contains(g.text, "[object Map]"):
			// @huggingface/jinja prints a dict as JavaScript does, jinja2 (and we)
			// as Python's repr (DeepSeek's templates print the arguments so).
			hfFailed++
		case g.err != "":
			t.Errorf("%s: ours failed: %s\nwant %q", name, g.err, w.Text)
		case g.text != w.Text:
			d := firstDiff(g.text, w.Text)
			t.Errorf("%s: differs at byte %d:\n got …%q\nwant …%q", name, d, g.text[max(0, d-60):min(len(g.text), d+100)], w.Text[max(0, d-60):min(len(w.Text), d+100)])
		default:
			compared++
		}
	}
	t.Logf("%d renderings the same, %d that @huggingface/jinja refused or failed", compared, hfFailed)
	if compared < 150 {
		t.Errorf("only %d renderings compared", compared)
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
