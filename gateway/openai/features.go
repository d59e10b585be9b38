package openai

import (
	"bytes"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/gateway/core"
)

// This file decodes the OpenAI features a chat or completions request asks for
// (Features): response_format, tools, tool_choice, parallel_tool_calls, logprobs,
// top_logprobs, n, completions' echo, and the deprecated functions/function_call as
// tools/tool_choice. The gateway plans them on a model (gateway/features.go).

// Response formats (response_format.type).
const (
	FormatText int8 = iota
	FormatJSONObject
	FormatJSONSchema
)

// Tool choices (tool_choice).
const (
	ToolAuto int8 = iota
	ToolNone
	ToolRequired
	ToolNamed
)

// Features are the OpenAI features a request asks for, decoded from its body.
type Features struct {
	Format   int8
	Schema   []byte // FormatJSONSchema: the schema's JSON text
	Strict   bool
	Tools    []engine.Tool
	Loose    []bool // per tool: its function's strict is not true (unsupported keywords ignored)
	Choice   int8   // tool_choice
	Named    string // ToolNamed: the function
	Parallel bool   // parallel_tool_calls (default true)
	ToolMsgs bool   // a message is a tool result or holds tool calls

	Logprobs bool // chat: logprobs; completions: logprobs given
	Top      int  // top_logprobs (chat) or logprobs: N (completions)
	Echo     bool // completions: echo the prompt
	N        int  // choices; ≥ 1

	Legacy bool // the tools came as functions (the deprecated API): answer with function_call
}

// Rich reports whether the answer needs choices rendered one by one: several
// choices, logprobs, tool calls to parse (parse) or the prompt echoed.
func (f *Features) Rich(parse bool) bool { return f.N > 1 || f.Logprobs || parse || f.Echo }

type toolParam struct {
	Type     string `json:"type"`
	Function struct {
		Name        string         `json:"name"`
		Description string         `json:"description"`
		Parameters  jsontext.Value `json:"parameters"`
		Strict      *bool          `json:"strict"`
	} `json:"function"`
}

// Features decodes the chat request's tools, tool_choice, parallel_tool_calls,
// response_format, logprobs, top_logprobs and n.
func (r *ChatRequest) Features(msgs []engine.Message) (Features, *core.FieldError) {
	if !IsEmptyList(r.Functions) || !core.IsNull(r.FunctionCall) {
		return r.legacyFeatures(msgs)
	}
	f := Features{N: 1, Parallel: true}
	if r.N != nil {
		f.N = *r.N
	}
	if r.ParallelToolCalls != nil {
		f.Parallel = *r.ParallelToolCalls
	}
	for _, m := range msgs {
		if m.Role == "tool" || len(m.ToolCalls) > 0 {
			f.ToolMsgs = true
		}
	}
	if !IsEmptyList(r.Tools) {
		var tps []toolParam
		if aerr := core.Strict(r.Tools, &tps, "tools"); aerr != nil {
			return f, aerr
		}
		if len(tps) > 128 {
			return f, core.Bad("tools", "at most 128 tools")
		}
		seen := map[string]bool{}
		for i, tp := range tps {
			field := "tools[" + strconv.Itoa(i) + "]"
			if tp.Type != "function" {
				return f, core.Bad(field+".type", "tool type must be 'function'")
			}
			if tp.Function.Name == "" {
				return f, core.Bad(field+".function.name", "a tool needs a function name")
			}
			if seen[tp.Function.Name] {
				return f, core.Bad(field+".function.name", "the function name '"+tp.Function.Name+"' is given twice")
			}
			seen[tp.Function.Name] = true
			t := engine.Tool{Name: tp.Function.Name, Description: tp.Function.Description}
			if !core.IsNull(tp.Function.Parameters) {
				p := bytes.TrimSpace(tp.Function.Parameters)
				if len(p) == 0 || p[0] != '{' {
					return f, core.Bad(field+".function.parameters", "parameters must be a JSON Schema object")
				}
				t.Parameters = append([]byte(nil), p...)
			}
			f.Tools = append(f.Tools, t)
			f.Loose = append(f.Loose, tp.Function.Strict == nil || !*tp.Function.Strict)
		}
	}
	if !core.IsNull(r.ToolChoice) {
		var s string
		if jsonv2.Unmarshal(r.ToolChoice, &s) == nil {
			switch s {
			case "auto":
				f.Choice = ToolAuto
			case "none":
				f.Choice = ToolNone
			case "required":
				f.Choice = ToolRequired
			default:
				return f, core.Bad("tool_choice", "tool_choice must be 'none', 'auto', 'required' or a named function")
			}
		} else {
			var tc struct {
				Type     string `json:"type"`
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			}
			if aerr := core.Strict(r.ToolChoice, &tc, "tool_choice"); aerr != nil {
				return f, aerr
			}
			if tc.Type != "function" || tc.Function.Name == "" {
				return f, core.Bad("tool_choice", "a named tool_choice is {\"type\": \"function\", \"function\": {\"name\": ...}}")
			}
			f.Choice, f.Named = ToolNamed, tc.Function.Name
		}
		if f.Choice != ToolNone && f.Choice != ToolAuto && len(f.Tools) == 0 {
			return f, core.Bad("tool_choice", "tool_choice needs tools")
		}
		if f.Choice == ToolNamed && !hasTool(f.Tools, f.Named) {
			return f, core.Bad("tool_choice", "tool_choice names the function '"+f.Named+"', which is not in tools")
		}
	}
	if !core.IsNull(r.ResponseFormat) {
		var rf struct {
			Type       string `json:"type"`
			JSONSchema *struct {
				Name        string         `json:"name"`
				Description string         `json:"description"`
				Schema      jsontext.Value `json:"schema"`
				Strict      *bool          `json:"strict"`
			} `json:"json_schema"`
		}
		if aerr := core.Strict(r.ResponseFormat, &rf, "response_format"); aerr != nil {
			return f, aerr
		}
		switch rf.Type {
		case "text":
		case "json_object":
			f.Format = FormatJSONObject
		case "json_schema":
			if rf.JSONSchema == nil {
				return f, core.Bad("response_format.json_schema", "response_format of type json_schema needs json_schema")
			}
			if rf.JSONSchema.Name == "" {
				return f, core.Bad("response_format.json_schema.name", "json_schema needs a name")
			}
			sc := bytes.TrimSpace(rf.JSONSchema.Schema)
			if len(sc) == 0 || core.IsNull(sc) {
				sc = []byte(`{"type":"object"}`)
			} else if sc[0] != '{' {
				return f, core.Bad("response_format.json_schema.schema", "schema must be a JSON Schema object")
			}
			f.Format, f.Schema = FormatJSONSchema, append([]byte(nil), sc...)
			f.Strict = rf.JSONSchema.Strict != nil && *rf.JSONSchema.Strict
		default:
			return f, core.Bad("response_format.type", "response_format.type must be 'text', 'json_object' or 'json_schema'")
		}
		if f.Format != FormatText && (f.Choice == ToolRequired || f.Choice == ToolNamed) {
			return f, core.Bad("response_format", "response_format cannot be combined with tool_choice '"+ChoiceName(f.Choice)+"': the output is a tool call")
		}
	}
	if r.Logprobs != nil {
		f.Logprobs = *r.Logprobs
	}
	if r.TopLogprobs != nil {
		if *r.TopLogprobs < 0 || *r.TopLogprobs > engine.MaxTopLogprobs {
			return f, core.Bad("top_logprobs", "top_logprobs must be between 0 and "+strconv.Itoa(engine.MaxTopLogprobs))
		}
		if *r.TopLogprobs > 0 && !f.Logprobs {
			return f, core.Bad("top_logprobs", "top_logprobs needs logprobs: true")
		}
		f.Top = *r.TopLogprobs
	}
	return f, nil
}

func ChoiceName(c int8) string {
	switch c {
	case ToolNone:
		return "none"
	case ToolRequired:
		return "required"
	case ToolNamed:
		return "function"
	}
	return "auto"
}

func hasTool(tools []engine.Tool, name string) bool {
	for _, t := range tools {
		if t.Name == name {
			return true
		}
	}
	return false
}

// Features of a text completion: logprobs, echo and n.
func (r *CompletionRequest) Features() Features {
	f := Features{N: 1}
	if r.N != nil {
		f.N = *r.N
	}
	if r.Logprobs != nil {
		f.Logprobs, f.Top = true, *r.Logprobs
	}
	f.Echo = r.Echo != nil && *r.Echo
	return f
}

// legacyFeatures are the features of a request in the deprecated functions API:
// functions are tools, and function_call is tool_choice ("none", "auto" or
// {"name": ...}). Such a request makes at most one call, and its answer has
// message.function_call (finish_reason "function_call"), as OpenAI answers it.
// Errors name the legacy fields.
func (r *ChatRequest) legacyFeatures(msgs []engine.Message) (Features, *core.FieldError) {
	q := *r
	if !IsEmptyList(r.Functions) {
		var fns []jsontext.Value
		if aerr := core.Strict(r.Functions, &fns, "functions"); aerr != nil {
			return Features{}, aerr
		}
		tools := []byte{'['}
		for i, fn := range fns {
			if i > 0 {
				tools = append(tools, ',')
			}
			tools = append(tools, `{"type":"function","function":`...)
			tools = append(tools, fn...)
			tools = append(tools, '}')
		}
		q.Tools = append(tools, ']')
	}
	q.Functions, q.FunctionCall, q.ToolChoice = nil, nil, nil
	if !core.IsNull(r.FunctionCall) {
		var s string
		if jsonv2.Unmarshal(r.FunctionCall, &s) == nil {
			if s != "none" && s != "auto" {
				return Features{}, core.Bad("function_call", "function_call must be 'none', 'auto' or {\"name\": ...}")
			}
			q.ToolChoice = jsontext.Value(`"` + s + `"`)
		} else {
			var fc struct {
				Name string `json:"name"`
			}
			if aerr := core.Strict(r.FunctionCall, &fc, "function_call"); aerr != nil {
				return Features{}, aerr
			}
			if fc.Name == "" {
				return Features{}, core.Bad("function_call.name", "function_call names a function: {\"name\": ...}")
			}
			b, _ := jsonv2.Marshal(fc.Name)
			q.ToolChoice = jsontext.Value(`{"type":"function","function":{"name":` + string(b) + `}}`)
		}
	}
	f, aerr := q.Features(msgs)
	if aerr != nil {
		aerr = legacyNames(aerr)
	}
	f.Legacy, f.Parallel = true, false
	return f, aerr
}

// legacyNames renames the fields of an error about the tools translated from the
// functions API: tools[i].function.x is functions[i].x, tool_choice function_call.
func legacyNames(e *core.FieldError) *core.FieldError {
	rename := func(s string) string {
		if rest, ok := strings.CutPrefix(s, "tool_choice"); ok {
			return "function_call" + rest
		}
		if rest, ok := strings.CutPrefix(s, "tools"); ok {
			return "functions" + strings.Replace(rest, ".function.", ".", 1)
		}
		return s
	}
	c := *e
	c.Param = rename(e.Param)
	c.Message = strings.ReplaceAll(strings.ReplaceAll(e.Message, "tool_choice", "function_call"), "'"+e.Param+"'", "'"+c.Param+"'")
	return &c
}
