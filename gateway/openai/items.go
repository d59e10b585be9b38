// Package openai holds OpenAI's wire formats as the gateway decodes and renders
// them, apart from the gateway's core: the bodies of chat completions and
// completions (request.go: their types, sampling parameters, stop strings, limits,
// messages, prompts, logit_bias, metadata; features.go: tools, tool_choice,
// response_format, logprobs, n, the deprecated functions API), the Responses API's
// body (responses_in.go: its parameters, and the request in chat's shape) and its
// conversation items
// (items.go: input as a string or items, each decoded strictly, the conversation as
// the chat template's messages), the rendering of the core's result (core.Output)
// for chat and completions (chat.go, logprobs.go: chat.completion,
// text_completion, their chunks, errors) and for Responses (responses_out.go: the
// Response object and its event sequence; items_out.go), and the embeddings API
// (embeddings.go: the body, its input's shapes, the answer). Errors are
// core.FieldErrors naming the field in the API's terms; the gateway's codecs
// (gateway/responses*.go, openai.go) turn them into answers. It imports
// gateway/core, never package gateway.
package openai

import (
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/gateway/core"
)

// Item is one item of a Responses conversation, as the server keeps it: a message (its
// role and text), a function call, or a function call's output. It is what
// previous_response_id continues and what input_items lists.
type Item struct {
	Type      string `json:"type"` // "message", "function_call", "function_call_output"
	ID        string `json:"id,omitempty"`
	Role      string `json:"role,omitempty"`      // message: user, assistant, system, developer
	Text      string `json:"text,omitempty"`      // message: its text parts joined
	CallID    string `json:"call_id,omitempty"`   // function_call, function_call_output
	Name      string `json:"name,omitempty"`      // function_call
	Arguments string `json:"arguments,omitempty"` // function_call
	Output    string `json:"output,omitempty"`    // function_call_output
}

// MaxItems bounds the items of one conversation (this request's and the turns
// before it), so that a conversation continued without end is refused by name
// rather than rebuilt at any size.
const MaxItems = 4096

// ParseInput reads input: a string (one user message) or an array of items.
func ParseInput(raw jsontext.Value) ([]Item, *core.FieldError) {
	if core.IsNull(raw) {
		return nil, nil
	}
	var s string
	if jsonv2.Unmarshal(raw, &s) == nil {
		return []Item{{Type: "message", Role: "user", Text: s}}, nil
	}
	var list []jsontext.Value
	if err := jsonv2.Unmarshal(raw, &list); err != nil {
		return nil, core.Bad("input", "input must be a string or an array of items")
	}
	if len(list) > MaxItems {
		return nil, core.Bad("input", "input has "+strconv.Itoa(len(list))+" items; at most "+strconv.Itoa(MaxItems)+" are allowed")
	}
	out := make([]Item, 0, len(list))
	for i, it := range list {
		item, ferr := ParseItem(it, "input["+strconv.Itoa(i)+"]")
		if ferr != nil {
			return nil, ferr
		}
		out = append(out, item)
	}
	return out, nil
}

// ParseItem reads one input item: a message (with or without its type), a
// function_call or a function_call_output, each strictly. Items the server cannot
// serve (images, files, built-in tools' calls, references) are refused by name.
func ParseItem(raw jsontext.Value, field string) (Item, *core.FieldError) {
	var head struct {
		Type string `json:"type"`
		Role string `json:"role"`
	}
	if err := jsonv2.Unmarshal(raw, &head); err != nil {
		return Item{}, core.Bad(field, "an input item must be an object")
	}
	if head.Type == "" && head.Role != "" {
		head.Type = "message"
	}
	switch head.Type {
	case "message":
		var m struct {
			Type    string         `json:"type"`
			ID      string         `json:"id"`
			Role    string         `json:"role"`
			Content jsontext.Value `json:"content"`
			Status  string         `json:"status"`
		}
		if ferr := core.Strict(raw, &m, field); ferr != nil {
			return Item{}, ferr
		}
		if !core.OneOf(m.Role, "user", "assistant", "system", "developer") {
			return Item{}, core.Bad(field+".role", "invalid role '"+m.Role+"': user, assistant, system or developer")
		}
		text, ferr := Content(m.Content, field+".content")
		if ferr != nil {
			return Item{}, ferr
		}
		return Item{Type: "message", ID: m.ID, Role: m.Role, Text: text}, nil
	case "function_call":
		var fc struct {
			Type      string `json:"type"`
			ID        string `json:"id"`
			CallID    string `json:"call_id"`
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
			Status    string `json:"status"`
		}
		if ferr := core.Strict(raw, &fc, field); ferr != nil {
			return Item{}, ferr
		}
		if fc.CallID == "" {
			return Item{}, core.Bad(field+".call_id", "a function_call needs a call_id")
		}
		if fc.Name == "" {
			return Item{}, core.Bad(field+".name", "a function_call needs a name")
		}
		return Item{Type: "function_call", ID: fc.ID, CallID: fc.CallID, Name: fc.Name, Arguments: fc.Arguments}, nil
	case "function_call_output":
		var fo struct {
			Type   string         `json:"type"`
			ID     string         `json:"id"`
			CallID string         `json:"call_id"`
			Output jsontext.Value `json:"output"`
			Status string         `json:"status"`
		}
		if ferr := core.Strict(raw, &fo, field); ferr != nil {
			return Item{}, ferr
		}
		if fo.CallID == "" {
			return Item{}, core.Bad(field+".call_id", "a function_call_output needs a call_id")
		}
		out, ferr := Content(fo.Output, field+".output")
		if ferr != nil {
			return Item{}, ferr
		}
		return Item{Type: "function_call_output", ID: fo.ID, CallID: fo.CallID, Output: out}, nil
	case "":
		return Item{}, core.Bad(field+".type", "an input item needs a type (or a role, for a message)")
	}
	return Item{}, core.Bad(field+".type", "input items of type '"+head.Type+"' are not supported by this server (message, function_call and function_call_output are)")
}

// Content reads a message's content (or a function call's output): a string,
// or an array of text parts (input_text, output_text, refusal). Images, files and
// audio are refused by name.
func Content(raw jsontext.Value, field string) (string, *core.FieldError) {
	if core.IsNull(raw) {
		return "", nil
	}
	var s string
	if jsonv2.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []jsontext.Value
	if err := jsonv2.Unmarshal(raw, &parts); err != nil {
		return "", core.Bad(field, "content must be a string or an array of content parts")
	}
	var b strings.Builder
	for i, p := range parts {
		f := field + "[" + strconv.Itoa(i) + "]"
		var head struct {
			Type string `json:"type"`
		}
		if err := jsonv2.Unmarshal(p, &head); err != nil {
			return "", core.Bad(f, "a content part must be an object")
		}
		switch head.Type {
		case "input_text":
			var t struct {
				Type string `json:"type"`
				Text string `json:"text"`
			}
			if ferr := core.Strict(p, &t, f); ferr != nil {
				return "", ferr
			}
			b.WriteString(t.Text)
		case "output_text":
			var t struct {
				Type        string         `json:"type"`
				Text        string         `json:"text"`
				Annotations jsontext.Value `json:"annotations"`
				Logprobs    jsontext.Value `json:"logprobs"`
			}
			if ferr := core.Strict(p, &t, f); ferr != nil {
				return "", ferr
			}
			b.WriteString(t.Text)
		case "refusal":
			var t struct {
				Type    string `json:"type"`
				Refusal string `json:"refusal"`
			}
			if ferr := core.Strict(p, &t, f); ferr != nil {
				return "", ferr
			}
			b.WriteString(t.Refusal)
		default:
			return "", core.Bad(f+".type", "content parts of type '"+head.Type+"' are not supported by this server (input_text and output_text are)")
		}
	}
	return b.String(), nil
}

// Messages makes the chat messages of a conversation: instructions first (a
// system message), then each item; a function_call joins the assistant message
// before it (or starts one), a function_call_output is a tool message. size is the
// texts' bytes, for the prompt's estimate.
func Messages(instructions *string, items []Item) (msgs []engine.Message, size int) {
	msgs = make([]engine.Message, 0, len(items)+1)
	if instructions != nil && *instructions != "" {
		msgs = append(msgs, engine.Message{Role: "system", Content: *instructions})
		size += len(*instructions)
	}
	for _, it := range items {
		switch it.Type {
		case "message":
			role := it.Role
			if role == "developer" {
				role = "system"
			}
			msgs = append(msgs, engine.Message{Role: role, Content: it.Text})
			size += len(it.Text)
		case "function_call":
			call := engine.ToolCall{ID: it.CallID, Name: it.Name, Arguments: it.Arguments}
			if n := len(msgs); n > 0 && msgs[n-1].Role == "assistant" {
				msgs[n-1].ToolCalls = append(msgs[n-1].ToolCalls, call)
			} else {
				msgs = append(msgs, engine.Message{Role: "assistant", ToolCalls: []engine.ToolCall{call}})
			}
			size += len(it.CallID) + len(it.Name) + len(it.Arguments)
		case "function_call_output":
			msgs = append(msgs, engine.Message{Role: "tool", Content: it.Output, ToolCallID: it.CallID})
			size += len(it.Output)
		}
	}
	return msgs, size
}

// RenameResponses renames the field (param) of an error about a Responses request
// in chat's shape, and its message, to the Responses API's names:
// response_format(.json_schema) is text.format, tools[i].function.x is tools[i].x,
// tool_choice's function.name its name, messages input and max_tokens
// max_output_tokens. changed is false when nothing is renamed.
func RenameResponses(param, message string) (p, msg string, changed bool) {
	rename := func(s string) string {
		if rest, ok := strings.CutPrefix(s, "response_format"); ok {
			return "text.format" + strings.TrimPrefix(rest, ".json_schema")
		}
		if strings.HasPrefix(s, "tools[") {
			return strings.Replace(s, ".function.", ".", 1)
		}
		if rest, ok := strings.CutPrefix(s, "tool_choice.function"); ok {
			return "tool_choice" + rest
		}
		switch s {
		case "max_tokens":
			return "max_output_tokens"
		case "messages": // the prompt (too long, or refused by the chat template)
			return "input"
		}
		return s
	}
	p = rename(param)
	if p == param && !strings.Contains(message, "response_format") {
		return param, message, false
	}
	msg = strings.ReplaceAll(message, "'"+param+"'", "'"+p+"'")
	msg = strings.ReplaceAll(msg, "response_format.json_schema.", "text.format.")
	msg = strings.ReplaceAll(msg, "response_format", "text.format")
	return p, msg, true
}
