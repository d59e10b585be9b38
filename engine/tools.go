package engine

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/lmlite/lmlite/engine/chat"
	"github.com/lmlite/lmlite/engine/grammar"
	"github.com/lmlite/lmlite/engine/tokenizer"
	"github.com/lmlite/lmlite/engine/toolcall"
)

// RenderChatTools renders messages with the model's chat template, the tools offered
// through the template's own tools support, in the shapes the families' templates
// read them:
//
//   - the "tools" variable, a list of {"type": "function", "function": {"name",
//     "description", "parameters"}} (Qwen2.5/3's hermes-style <tool_call>, Llama
//     3.1+, Mistral's [AVAILABLE_TOOLS], Phi-4-mini as llama.cpp ships it);
//   - for a template that reads message['tools'] (Phi-4-mini's own), the functions'
//     JSON list on the system message, one made when there is none;
//   - an assistant's calls as message.tool_calls, each {"id", "type": "function",
//     "function": {"name", "arguments"}} with the arguments decoded; a template that
//     reads no tool_calls gets them as text in the model's syntax instead;
//   - results as role "tool" messages with their tool_call_id. For Mistral the ids
//     of calls and results are 9 letters and digits (its templates refuse others):
//     an id that is not becomes one derived from it (MistralToolCallID), the same on the call
//     and on its result.
//
// A template without tools support gets the tools in a system message asking for
// Hermes-style calls, tool results as user <tool_response> turns and earlier calls
// as <tool_call> text; ToolSyntax then says Hermes. Without tools and tool messages
// it is RenderChat.
func (b *Block) RenderChatTools(modelID string, msgs []Message, tools []Tool) (string, error) {
	in, ok := b.models[modelID]
	if !ok {
		return "", fmt.Errorf("%w: %q", ErrUnknownModel, modelID)
	}
	cm := make([]chat.Message, len(msgs))
	for i, m := range msgs {
		cm[i] = toChat(m)
	}
	return renderTools(in.tmpl, toolSyntax(in.tok, in.tmpl), cm, tools)
}

// toChat is m as the template package takes it.
func toChat(m Message) chat.Message {
	return chat.Message{Role: m.Role, Content: m.Content, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID, Name: m.Name}
}

// hasToolMessages reports whether a conversation holds tool calls or results.
func hasToolMessages(msgs []Message) bool {
	for _, m := range msgs {
		if len(m.ToolCalls) > 0 || m.Role == "tool" || m.ToolCallID != "" {
			return true
		}
	}
	return false
}

// ChatTokensTools is ChatTokens with tools (see RenderChatTools): every text of the
// request — contents, roles, names, ids, the calls' arguments and the tools'
// definitions (each JSON string in them) — is plain text, never a control token.
func (b *Block) ChatTokensTools(modelID string, msgs []Message, tools []Tool) ([]int32, error) {
	in, ok := b.models[modelID]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownModel, modelID)
	}
	return chatTokensTools(in.tok, in.tmpl, msgs, tools, 0)
}

// chatTokensTools is ChatTokensTools for one tokenizer and template.
// limit <= 0: no limit; else it gives up past limit tokens (ChatTokensCapped).
func chatTokensTools(tok *tokenizer.Tokenizer, tmpl *chat.Template, msgs []Message, tools []Tool, limit int) ([]int32, error) {
	if len(tools) == 0 && !hasToolMessages(msgs) {
		return chatTokens(tok, tmpl, msgs, limit)
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
	text, err := renderTools(tmpl, toolSyntax(tok, tmpl), cm, qt)
	if err != nil {
		return nil, err
	}
	return encodeQuoted(tok, q, text, limit)
}

// renderTools renders msgs and tools with tmpl, whose model writes calls in syn
// (its tools support, in the shapes of RenderChatTools, or the fallback).
func renderTools(tmpl *chat.Template, syn toolcall.Syntax, cm []chat.Message, tools []Tool) (string, error) {
	src := tmpl.Source()
	if !templateHasTools(src) {
		return tmpl.Render(hermesFallback(cm, tools), true)
	}
	cm = slices.Clone(cm)
	if syn == toolcall.Mistral {
		for i := range cm {
			if cm[i].ToolCallID != "" {
				cm[i].ToolCallID = MistralToolCallID(cm[i].ToolCallID)
			}
			if len(cm[i].ToolCalls) > 0 {
				calls := slices.Clone(cm[i].ToolCalls)
				for k := range calls {
					calls[k].ID = MistralToolCallID(calls[k].ID)
				}
				cm[i].ToolCalls = calls
			}
		}
	}
	if !strings.Contains(src, "tool_calls") {
		for i := range cm {
			if len(cm[i].ToolCalls) > 0 {
				cm[i].Content = joinText(cm[i].Content, callsText(syn, cm[i].ToolCalls))
				cm[i].ToolCalls = nil
			}
		}
	}
	if len(tools) == 0 {
		return tmpl.Render(cm, true)
	}
	defs := make([]any, len(tools))
	fns := make([]any, len(tools))
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
		fns[i] = dict(fn...)
		defs[i] = dict(&pair{"type", "function"}, &pair{"function", fns[i]})
	}
	if readsMessageTools(src) {
		list, err := chat.PyJSON(fns)
		if err != nil {
			return "", fmt.Errorf("engine: tools: %w", err)
		}
		if len(cm) > 0 && cm[0].Role == "system" {
			cm[0].Tools = list
		} else {
			cm = append([]chat.Message{{Role: "system", Tools: list}}, cm...)
		}
	}
	return tmpl.RenderVars(cm, true, map[string]any{"tools": defs})
}

// messageTools matches a template reading tools on a message (Phi-4-mini's:
// message['tools'] on the system message).
var messageTools = regexp.MustCompile(`message\s*\[\s*['"]tools['"]\s*\]|message\.tools\b|['"]tools['"]\s+in\s+message\b`)

// readsMessageTools reports whether a template reads the tools on a message.
func readsMessageTools(src string) bool { return messageTools.MatchString(src) }

// MistralToolCallID is a tool call id as Mistral's templates accept it: 9 letters and
// digits. Such an id stays; any other becomes 9 characters derived from its
// SHA-256, so that a call and its result, which carry the same id, still match.
func MistralToolCallID(id string) string {
	if len(id) == 9 && strings.IndexFunc(id, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) < 0 {
		return id
	}
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	sum := sha256.Sum256([]byte(id))
	out := make([]byte, 9)
	for i := range out {
		out[i] = alphabet[int(sum[i])%len(alphabet)]
	}
	return string(out)
}

// callsText writes calls in syn's syntax (what the model would have written), for
// templates that do not read message.tool_calls. The arguments are the request's
// JSON text, or a JSON string when it is not JSON.
func callsText(syn toolcall.Syntax, calls []chat.ToolCall) string {
	objs := make([]string, len(calls))
	argsKey := "arguments"
	if syn == toolcall.Llama3 {
		argsKey = "parameters"
	}
	for i, c := range calls {
		name, _ := json.Marshal(c.Name)
		args := c.Arguments
		if !json.Valid([]byte(args)) {
			a, _ := json.Marshal(args)
			args = string(a)
		}
		objs[i] = fmt.Sprintf("{\"name\": %s, \"%s\": %s}", name, argsKey, args)
	}
	switch syn {
	case toolcall.Llama3:
		return strings.Join(objs, "; ")
	case toolcall.Mistral:
		return "[TOOL_CALLS][" + strings.Join(objs, ", ") + "]"
	case toolcall.Phi4:
		return "<|tool_call|>[" + strings.Join(objs, ", ") + "]<|/tool_call|>"
	}
	for i, o := range objs {
		objs[i] = "<tool_call>\n" + o + "\n</tool_call>"
	}
	return strings.Join(objs, "\n")
}

// joinText is a and b, a newline between them when both are there.
func joinText(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	return a + "\n" + b
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
// package toolcall): the one its chat template's markup names, else the one whose
// marker its vocabulary has as a token, else Hermes; Hermes for templates without
// tools support (the fallback prompt asks for it).
func (b *Block) ToolSyntax(modelID string) (toolcall.Syntax, error) {
	in, ok := b.models[modelID]
	if !ok {
		return 0, fmt.Errorf("%w: %q", ErrUnknownModel, modelID)
	}
	return toolSyntax(in.tok, in.tmpl), nil
}

// toolSyntax is ToolSyntax for one tokenizer (nil: the template alone) and template.
func toolSyntax(tok *tokenizer.Tokenizer, tmpl *chat.Template) toolcall.Syntax {
	if !templateHasTools(tmpl.Source()) {
		return toolcall.Hermes
	}
	syn, ok := toolcall.DetectTemplate(tmpl.Source())
	if ok || tok == nil {
		return syn
	}
	syn, _ = toolcall.DetectVocab(func(s string) bool {
		_, ok := tok.ID(s)
		return ok
	})
	return syn
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
	if len(tools) == 0 {
		return callsAsHermesText(msgs)
	}
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
	return append(out, callsAsHermesText(msgs)...)
}

// callsAsHermesText rewrites calls as <tool_call> text in the assistant's content
// and results as user <tool_response> turns.
func callsAsHermesText(msgs []chat.Message) []chat.Message {
	out := make([]chat.Message, 0, len(msgs))
	for _, m := range msgs {
		switch {
		case m.Role == "tool":
			out = append(out, chat.Message{Role: "user", Content: "<tool_response>\n" + m.Content + "\n</tool_response>"})
		case len(m.ToolCalls) > 0:
			out = append(out, chat.Message{Role: "assistant", Content: joinText(m.Content, callsText(toolcall.Hermes, m.ToolCalls))})
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

// ToolsNative reports whether the model's chat template renders tools itself (it
// reads the tools variable). A model without it still takes tools, through a
// Hermes-style system prompt (hermesFallback), but follows them less well: the
// gateway's router prefers models with it for requests with tools.
func (b *Block) ToolsNative(modelID string) bool {
	in, ok := b.models[modelID]
	return ok && templateHasTools(in.tmpl.Source())
}
