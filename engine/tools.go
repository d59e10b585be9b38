package engine

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/lmlite/lmlite/engine/chat"
	"github.com/lmlite/lmlite/engine/grammar"
	"github.com/lmlite/lmlite/engine/tokenizer"
	"github.com/lmlite/lmlite/engine/toolcall"
)

// Tool is a function the model may call (OpenAI's tools[].function).
type Tool struct {
	Name        string
	Description string
	Parameters  json.RawMessage // a JSON Schema of the arguments object; nil: none
}

// RenderChatTools renders messages with the model's chat template, the tools offered
// through the template's own tools support (Qwen's hermes-style <tool_call>, Llama
// 3.1+, Mistral, Phi read a "tools" variable). A template without it gets the tools
// in a system message asking for Hermes-style calls, tool results as user
// <tool_response> turns and earlier calls as <tool_call> text; ToolSyntax then says
// Hermes. Without tools it is RenderChat.
func (b *Block) RenderChatTools(modelID string, msgs []Message, tools []Tool) (string, error) {
	in, ok := b.models[modelID]
	if !ok {
		return "", fmt.Errorf("%w: %q", ErrUnknownModel, modelID)
	}
	if len(tools) == 0 {
		return b.RenderChat(modelID, msgs)
	}
	cm := make([]chat.Message, len(msgs))
	for i, m := range msgs {
		cm[i] = chat.Message(m)
	}
	return renderTools(in.tmpl, cm, tools)
}

// ChatTokensTools is ChatTokens with tools (see RenderChatTools): every text of the
// request — contents, roles, names, ids, the calls' arguments and the tools'
// definitions (each JSON string in them) — is plain text, never a control token.
func (b *Block) ChatTokensTools(modelID string, msgs []Message, tools []Tool) ([]int32, error) {
	in, ok := b.models[modelID]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownModel, modelID)
	}
	return chatTokensTools(in.tok, in.tmpl, msgs, tools)
}

// chatTokensTools is ChatTokensTools for one tokenizer and template.
func chatTokensTools(tok *tokenizer.Tokenizer, tmpl *chat.Template, msgs []Message, tools []Tool) ([]int32, error) {
	if len(tools) == 0 {
		return chatTokens(tok, tmpl, msgs)
	}
	texts := []string{tmpl.Source()}
	for _, m := range msgs {
		texts = append(texts, m.Role, m.Content, m.ToolCallID, m.Name)
		for _, c := range m.ToolCalls {
			texts = append(texts, c.ID, c.Name, c.Arguments)
		}
	}
	for _, t := range tools {
		texts = append(texts, t.Name, t.Description, string(t.Parameters))
	}
	q, err := tok.NewQuoter(texts...)
	if err != nil {
		return nil, err
	}
	cm := make([]chat.Message, len(msgs))
	for i, m := range msgs {
		cm[i] = chat.Message{Role: q.Quote(m.Role), Content: q.Quote(m.Content), ToolCallID: q.Quote(m.ToolCallID), Name: q.Quote(m.Name)}
		for _, c := range m.ToolCalls {
			cm[i].ToolCalls = append(cm[i].ToolCalls, chat.ToolCall{ID: q.Quote(c.ID), Name: q.Quote(c.Name), Arguments: quoteJSON(q.Quote, c.Arguments)})
		}
	}
	qt := make([]Tool, len(tools))
	for i, t := range tools {
		qt[i] = Tool{Name: q.Quote(t.Name), Description: q.Quote(t.Description)}
		if len(t.Parameters) > 0 {
			qt[i].Parameters = json.RawMessage(quoteJSON(q.Quote, string(t.Parameters)))
		}
	}
	text, err := renderTools(tmpl, cm, qt)
	if err != nil {
		return nil, err
	}
	ids := q.Encode(text, false)
	if bos := tok.BOS(); tok.AddBOS() && bos >= 0 && (len(ids) == 0 || ids[0] != bos) {
		ids = append([]int32{bos}, ids...)
	}
	return ids, nil
}

// renderTools renders msgs and tools with tmpl (its tools support or the fallback).
func renderTools(tmpl *chat.Template, cm []chat.Message, tools []Tool) (string, error) {
	defs := make([]any, len(tools))
	for i, t := range tools {
		fn := []*pair{{"name", t.Name}}
		if t.Description != "" {
			fn = append(fn, &pair{"description", t.Description})
		}
		if len(t.Parameters) > 0 {
			p, err := chat.JSONValue(string(t.Parameters))
			if err != nil {
				return "", fmt.Errorf("engine: tool %q: parameters: %w", t.Name, err)
			}
			fn = append(fn, &pair{"parameters", p})
		}
		defs[i] = dict(&pair{"type", "function"}, &pair{"function", dict(fn...)})
	}
	if templateHasTools(tmpl.Source()) {
		return tmpl.RenderVars(cm, true, map[string]any{"tools": defs})
	}
	return tmpl.Render(hermesFallback(cm, tools), true)
}

// quoteJSON applies quote to every string (keys and values) of JSON text, keeping
// the rest as it is; text that is not JSON is quoted whole.
func quoteJSON(quote func(string) string, text string) string {
	if !json.Valid([]byte(text)) {
		return quote(text)
	}
	var sb strings.Builder
	for i := 0; i < len(text); {
		if text[i] != '"' {
			sb.WriteByte(text[i])
			i++
			continue
		}
		j := i + 1
		for ; text[j] != '"'; j++ {
			if text[j] == '\\' {
				j++
			}
		}
		lit := text[i : j+1]
		var s string
		json.Unmarshal([]byte(lit), &s)
		if qs := quote(s); qs != s {
			var buf strings.Builder
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			enc.Encode(qs)
			lit = strings.TrimSuffix(buf.String(), "\n")
		}
		sb.WriteString(lit)
		i = j + 1
	}
	return sb.String()
}

// templateHasTools reports whether a chat template reads the tools variable.
func templateHasTools(src string) bool { return strings.Contains(src, "tools") }

// ToolSyntax is the tool-call syntax the model writes (to parse its output with
// package toolcall), from its chat template; Hermes for templates without tools
// support (the fallback prompt asks for it).
func (b *Block) ToolSyntax(modelID string) (toolcall.Syntax, error) {
	in, ok := b.models[modelID]
	if !ok {
		return 0, fmt.Errorf("%w: %q", ErrUnknownModel, modelID)
	}
	return toolSyntax(in.tmpl), nil
}

// toolSyntax is ToolSyntax for one template.
func toolSyntax(tmpl *chat.Template) toolcall.Syntax {
	if !templateHasTools(tmpl.Source()) {
		return toolcall.Hermes
	}
	return toolcall.Detect(tmpl.Source())
}

// ToolGrammar is the grammar of a call of one of tools in the model's syntax, for
// tool_choice "required" (all the tools) or a named function (that one tool): the
// call object {"name": ..., "arguments": ...} with the tool's parameters schema,
// inside the syntax's markup that is text (<tool_call> ... </tool_call> for Hermes;
// control-token markers such as [TOOL_CALLS] cannot be written through a grammar,
// and the parser accepts the bare JSON). One call: parallel calls are left to the
// model under tool_choice "auto". Errors are CompileSchema's (a parameters schema
// outside the supported subset).
func (b *Block) ToolGrammar(modelID string, tools []Tool) (*grammar.Grammar, error) {
	syn, err := b.ToolSyntax(modelID)
	if err != nil {
		return nil, err
	}
	return toolGrammar(syn, tools, b.CompileSchema)
}

// toolGrammar is ToolGrammar for a model writing syn, compiling with compile.
func toolGrammar(syn toolcall.Syntax, tools []Tool, compile func([]byte) (*grammar.Grammar, error)) (*grammar.Grammar, error) {
	if len(tools) == 0 {
		return nil, fmt.Errorf("engine: a tool grammar needs a tool")
	}
	argsKey := "arguments"
	if syn == toolcall.Llama3 {
		argsKey = "parameters"
	}
	var alts []string
	for _, t := range tools {
		name, _ := json.Marshal(t.Name)
		params := string(t.Parameters)
		if len(t.Parameters) == 0 {
			params = `{"type":"object","properties":{},"additionalProperties":false}`
		}
		alts = append(alts, fmt.Sprintf(`{"type":"object","properties":{"name":{"const":%s},%q:%s},"required":["name",%q],"additionalProperties":false}`,
			name, argsKey, params, argsKey))
	}
	schema := alts[0]
	if len(alts) > 1 {
		schema = `{"anyOf":[` + strings.Join(alts, ",") + `]}`
	}
	switch syn {
	case toolcall.Mistral, toolcall.Phi4:
		schema = `{"type":"array","items":` + schema + `,"minItems":1,"maxItems":1}`
	}
	g, err := compile([]byte(schema))
	if err != nil {
		return nil, err
	}
	if syn == toolcall.Hermes {
		g = g.Wrap("<tool_call>\n", "\n</tool_call>")
	}
	return g, nil
}

// hermesFallback rewrites a conversation for a template without tools support: the
// tools and the call format in the system message, calls and results as text.
func hermesFallback(msgs []chat.Message, tools []Tool) []chat.Message {
	var sb strings.Builder
	sb.WriteString("# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>")
	for _, t := range tools {
		def := map[string]any{"name": t.Name}
		if t.Description != "" {
			def["description"] = t.Description
		}
		if len(t.Parameters) > 0 {
			def["parameters"] = json.RawMessage(t.Parameters)
		}
		j, _ := json.Marshal(map[string]any{"type": "function", "function": def})
		sb.WriteString("\n")
		sb.Write(j)
	}
	sb.WriteString("\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>")
	out := make([]chat.Message, 0, len(msgs)+1)
	sys := sb.String()
	if len(msgs) > 0 && msgs[0].Role == "system" {
		sys = msgs[0].Content + "\n\n" + sys
		msgs = msgs[1:]
	}
	out = append(out, chat.Message{Role: "system", Content: sys})
	for _, m := range msgs {
		switch {
		case m.Role == "tool":
			out = append(out, chat.Message{Role: "user", Content: "<tool_response>\n" + m.Content + "\n</tool_response>"})
		case len(m.ToolCalls) > 0:
			var c strings.Builder
			c.WriteString(m.Content)
			for _, tc := range m.ToolCalls {
				name, _ := json.Marshal(tc.Name)
				args := tc.Arguments
				if !json.Valid([]byte(args)) {
					a, _ := json.Marshal(args)
					args = string(a)
				}
				if c.Len() > 0 {
					c.WriteString("\n")
				}
				fmt.Fprintf(&c, "<tool_call>\n{\"name\": %s, \"arguments\": %s}\n</tool_call>", name, args)
			}
			out = append(out, chat.Message{Role: "assistant", Content: c.String()})
		default:
			out = append(out, chat.Message{Role: m.Role, Content: m.Content})
		}
	}
	return out
}

type pair struct {
	k string
	v any
}

// dict is an ordered template dict (tojson keeps the order, as Python's does).
func dict(ps ...*pair) any {
	return chat.OrderedDict(func(add func(k string, v any)) {
		for _, p := range ps {
			add(p.k, p.v)
		}
	})
}
