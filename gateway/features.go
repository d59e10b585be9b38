package gateway

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/grammar"
	"github.com/lmlite/lmlite/engine/toolcall"
	"github.com/lmlite/lmlite/gateway/core"
)

// Features is the optional ability of an Engine that serves OpenAI's features beyond
// plain generation (the engine's Block has it): structured outputs, tools, n > 1 and
// embeddings. An engine without it serves plain requests; a request that needs it is
// a 400 naming the field.
type Features interface {
	GenerateN(ctx context.Context, modelID string, req engine.Request, n int) ([]*engine.Stream, error)
	CompileSchema(schema []byte) (*grammar.Grammar, error)
	ChatTokensTools(modelID string, msgs []engine.Message, tools []engine.Tool) ([]int32, error)
	ToolSyntax(modelID string) (toolcall.Syntax, error)
	ToolGrammar(modelID string, tools []engine.Tool) (*grammar.Grammar, error)
	Embed(ctx context.Context, modelID string, req engine.EmbedRequest) (engine.Embeddings, error)
}

// Response formats (response_format.type).
const (
	formatText int8 = iota
	formatJSONObject
	formatJSONSchema
)

// Tool choices (tool_choice).
const (
	toolAuto int8 = iota
	toolNone
	toolRequired
	toolNamed
)

// features are the OpenAI features a request asks for, decoded from its body.
type features struct {
	format   int8
	schema   []byte // formatJSONSchema: the schema's JSON text
	strict   bool
	tools    []engine.Tool
	loose    []bool // per tool: its function's strict is not true (unsupported keywords ignored)
	choice   int8   // tool_choice
	named    string // toolNamed: the function
	parallel bool   // parallel_tool_calls (default true)
	toolMsgs bool   // a message is a tool result or holds tool calls

	logprobs bool // chat: logprobs; completions: logprobs given
	top      int  // top_logprobs (chat) or logprobs: N (completions)
	echo     bool // completions: echo the prompt
	n        int  // choices; ≥ 1

	legacy bool // the tools came as functions (the deprecated API): answer with function_call
}

// uses reports whether the request needs the engine's Features.
func (f *features) uses() bool {
	return f.format != formatText || len(f.tools) > 0 || f.toolMsgs || f.n > 1
}

// strictOf decodes raw into v refusing unknown members, naming field in errors.
func strictOf(raw jsontext.Value, v any, field string) *apiError {
	return fieldError(core.Strict(raw, v, field))
}

type toolParam struct {
	Type     string `json:"type"`
	Function struct {
		Name        string         `json:"name"`
		Description string         `json:"description"`
		Parameters  jsontext.Value `json:"parameters"`
		Strict      *bool          `json:"strict"`
	} `json:"function"`
}

// features decodes the chat request's tools, tool_choice, parallel_tool_calls,
// response_format, logprobs, top_logprobs and n.
func chatFeatures(r *chatRequest, msgs []engine.Message) (features, *apiError) {
	if !isEmptyList(r.Functions) || !isNull(r.FunctionCall) {
		return legacyFeatures(r, msgs)
	}
	f := features{n: 1, parallel: true}
	if r.N != nil {
		f.n = *r.N
	}
	if r.ParallelToolCalls != nil {
		f.parallel = *r.ParallelToolCalls
	}
	for _, m := range msgs {
		if m.Role == "tool" || len(m.ToolCalls) > 0 {
			f.toolMsgs = true
		}
	}
	if !isEmptyList(r.Tools) {
		var tps []toolParam
		if aerr := strictOf(r.Tools, &tps, "tools"); aerr != nil {
			return f, aerr
		}
		if len(tps) > 128 {
			return f, badRequest("tools", "at most 128 tools")
		}
		seen := map[string]bool{}
		for i, tp := range tps {
			field := "tools[" + strconv.Itoa(i) + "]"
			if tp.Type != "function" {
				return f, badRequest(field+".type", "tool type must be 'function'")
			}
			if tp.Function.Name == "" {
				return f, badRequest(field+".function.name", "a tool needs a function name")
			}
			if seen[tp.Function.Name] {
				return f, badRequest(field+".function.name", "the function name '"+tp.Function.Name+"' is given twice")
			}
			seen[tp.Function.Name] = true
			t := engine.Tool{Name: tp.Function.Name, Description: tp.Function.Description}
			if !isNull(tp.Function.Parameters) {
				p := bytes.TrimSpace(tp.Function.Parameters)
				if len(p) == 0 || p[0] != '{' {
					return f, badRequest(field+".function.parameters", "parameters must be a JSON Schema object")
				}
				t.Parameters = append([]byte(nil), p...)
			}
			f.tools = append(f.tools, t)
			f.loose = append(f.loose, tp.Function.Strict == nil || !*tp.Function.Strict)
		}
	}
	if !isNull(r.ToolChoice) {
		var s string
		if jsonv2.Unmarshal(r.ToolChoice, &s) == nil {
			switch s {
			case "auto":
				f.choice = toolAuto
			case "none":
				f.choice = toolNone
			case "required":
				f.choice = toolRequired
			default:
				return f, badRequest("tool_choice", "tool_choice must be 'none', 'auto', 'required' or a named function")
			}
		} else {
			var tc struct {
				Type     string `json:"type"`
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			}
			if aerr := strictOf(r.ToolChoice, &tc, "tool_choice"); aerr != nil {
				return f, aerr
			}
			if tc.Type != "function" || tc.Function.Name == "" {
				return f, badRequest("tool_choice", "a named tool_choice is {\"type\": \"function\", \"function\": {\"name\": ...}}")
			}
			f.choice, f.named = toolNamed, tc.Function.Name
		}
		if f.choice != toolNone && f.choice != toolAuto && len(f.tools) == 0 {
			return f, badRequest("tool_choice", "tool_choice needs tools")
		}
		if f.choice == toolNamed && !hasTool(f.tools, f.named) {
			return f, badRequest("tool_choice", "tool_choice names the function '"+f.named+"', which is not in tools")
		}
	}
	if !isNull(r.ResponseFormat) {
		var rf struct {
			Type       string `json:"type"`
			JSONSchema *struct {
				Name        string         `json:"name"`
				Description string         `json:"description"`
				Schema      jsontext.Value `json:"schema"`
				Strict      *bool          `json:"strict"`
			} `json:"json_schema"`
		}
		if aerr := strictOf(r.ResponseFormat, &rf, "response_format"); aerr != nil {
			return f, aerr
		}
		switch rf.Type {
		case "text":
		case "json_object":
			f.format = formatJSONObject
		case "json_schema":
			if rf.JSONSchema == nil {
				return f, badRequest("response_format.json_schema", "response_format of type json_schema needs json_schema")
			}
			if rf.JSONSchema.Name == "" {
				return f, badRequest("response_format.json_schema.name", "json_schema needs a name")
			}
			sc := bytes.TrimSpace(rf.JSONSchema.Schema)
			if len(sc) == 0 || isNull(sc) {
				sc = []byte(`{"type":"object"}`)
			} else if sc[0] != '{' {
				return f, badRequest("response_format.json_schema.schema", "schema must be a JSON Schema object")
			}
			f.format, f.schema = formatJSONSchema, append([]byte(nil), sc...)
			f.strict = rf.JSONSchema.Strict != nil && *rf.JSONSchema.Strict
		default:
			return f, badRequest("response_format.type", "response_format.type must be 'text', 'json_object' or 'json_schema'")
		}
		if f.format != formatText && (f.choice == toolRequired || f.choice == toolNamed) {
			return f, badRequest("response_format", "response_format cannot be combined with tool_choice '"+choiceName(f.choice)+"': the output is a tool call")
		}
	}
	if r.Logprobs != nil {
		f.logprobs = *r.Logprobs
	}
	if r.TopLogprobs != nil {
		if *r.TopLogprobs < 0 || *r.TopLogprobs > engine.MaxTopLogprobs {
			return f, badRequest("top_logprobs", "top_logprobs must be between 0 and "+strconv.Itoa(engine.MaxTopLogprobs))
		}
		if *r.TopLogprobs > 0 && !f.logprobs {
			return f, badRequest("top_logprobs", "top_logprobs needs logprobs: true")
		}
		f.top = *r.TopLogprobs
	}
	return f, nil
}

func choiceName(c int8) string {
	switch c {
	case toolNone:
		return "none"
	case toolRequired:
		return "required"
	case toolNamed:
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

// features of a text completion: logprobs, echo and n.
func completionFeatures(r *completionRequest) features {
	f := features{n: 1}
	if r.N != nil {
		f.n = *r.N
	}
	if r.Logprobs != nil {
		f.logprobs, f.top = true, *r.Logprobs
	}
	f.echo = r.Echo != nil && *r.Echo
	return f
}

// planFeatures prepares the request's features on embedded model m: the grammar
// (response_format, or a tool call for tool_choice required or named) and the
// tool-call syntax to parse (tools with tool_choice auto, required or named). It
// returns a 400 naming the field when the engine or the schema cannot serve it.
func (j *job) planFeatures(m *model, p *plan) *apiError {
	f := &j.in.feat
	fe, ok := j.s.eng.(Features)
	if !ok {
		switch {
		case f.format != formatText:
			return badRequest("response_format", "the model '"+m.id+"' does not support response_format")
		case len(f.tools) > 0 || f.toolMsgs:
			return badRequest("tools", "the model '"+m.id+"' does not support tools")
		case f.n > 1:
			return badRequest("n", "the model '"+m.id+"' does not support n > 1")
		case f.logprobs:
			return badRequest("logprobs", "the model '"+m.id+"' does not support logprobs")
		}
		return nil
	}
	var err error
	switch f.format {
	case formatJSONObject:
		p.gram = grammar.JSONObject()
	case formatJSONSchema:
		p.gram, err = fe.CompileSchema(f.schema)
		if err != nil && !f.strict && errors.Is(err, grammar.ErrUnsupported) {
			// Not strict: the keywords the grammar cannot enforce are ignored, the rest kept.
			if loose, lerr := grammar.Loosen(f.schema); lerr == nil {
				p.gram, err = fe.CompileSchema(loose)
			}
		}
		if err != nil {
			// A schema that cycles without writing (grammar.ErrCycle) describes no
			// value: refused strict or not, as Server.Check refuses a batch line.
			if f.strict || errors.Is(err, grammar.ErrCycle) {
				return badRequest("response_format.json_schema.schema", "the schema is not supported: "+err.Error())
			}
			p.gram = grammar.JSONObject() // not strict: valid JSON, the schema a hint
		}
	}
	if len(f.tools) == 0 || f.choice == toolNone {
		return nil
	}
	if p.syntax, err = fe.ToolSyntax(m.id); err != nil {
		return engineError(err)
	}
	p.parse = true
	tools := f.tools
	if f.choice == toolRequired || f.choice == toolNamed {
		tools = looseTools(fe, f.tools, f.loose)
	}
	all := tools
	switch f.choice {
	case toolNamed:
		for _, t := range all {
			if t.Name == f.named {
				tools = []engine.Tool{t}
			}
		}
		fallthrough
	case toolRequired:
		if p.gram, err = fe.ToolGrammar(m.id, tools); err != nil {
			for i, t := range all { // name the tool whose schema is at fault
				if len(t.Parameters) > 0 && hasTool(tools, t.Name) {
					if _, e := fe.CompileSchema(t.Parameters); e != nil {
						return badRequest("tools["+strconv.Itoa(i)+"].function.parameters", "the parameters schema is not supported: "+e.Error())
					}
				}
			}
			return badRequest("tools", "the tools cannot be constrained: "+err.Error())
		}
	}
	return nil
}

// looseTools returns tools with the parameters of each one that is not strict
// loosened (grammar.Loosen) where the grammar cannot enforce them as they are, so
// that an unsupported keyword in a non-strict tool is ignored, not a 400, as in a
// non-strict response_format. It copies tools only when it changes one.
func looseTools(fe Features, tools []engine.Tool, loose []bool) []engine.Tool {
	out, copied := tools, false
	for i, t := range tools {
		if i >= len(loose) || !loose[i] || len(t.Parameters) == 0 {
			continue
		}
		if _, err := fe.CompileSchema(t.Parameters); !errors.Is(err, grammar.ErrUnsupported) {
			continue
		}
		l, err := grammar.Loosen(t.Parameters)
		if err != nil {
			continue
		}
		if !copied {
			out, copied = slices.Clone(tools), true
		}
		out[i].Parameters = l
	}
	return out
}

// checkSchemas refuses, before any model is chosen, the schemas that planFeatures
// refuses on every model whatever the request's strictness: a response_format schema
// or (under tool_choice required or named) a tool's parameters that cycle without
// writing (grammar.ErrCycle). Server.Check runs it on each batch line at create time,
// so such a line fails validation even when it would run on another process.
// It compiles with eng's CompileSchema when eng has Features (cached: planFeatures
// compiles the same schemas next), else with grammar.CompileSchema.
func (f *features) checkSchemas(eng Engine) *apiError {
	compile := grammar.CompileSchema
	if fe, ok := eng.(Features); ok {
		compile = fe.CompileSchema
	}
	if f.format == formatJSONSchema {
		if _, err := compile(f.schema); errors.Is(err, grammar.ErrCycle) {
			return badRequest("response_format.json_schema.schema", "the schema is not supported: "+err.Error())
		}
	}
	if f.choice != toolRequired && f.choice != toolNamed {
		return nil
	}
	for i, t := range f.tools {
		if len(t.Parameters) == 0 || f.choice == toolNamed && t.Name != f.named {
			continue
		}
		if _, err := compile(t.Parameters); errors.Is(err, grammar.ErrCycle) {
			return badRequest("tools["+strconv.Itoa(i)+"].function.parameters", "the parameters schema is not supported: "+err.Error())
		}
	}
	return nil
}

// rich reports whether the answer needs respondChoices: several choices, logprobs,
// tool calls to parse or the prompt echoed.
func (f *features) rich(parse bool) bool { return f.n > 1 || f.logprobs || parse || f.echo }

// legacyFeatures are the features of a request in the deprecated functions API:
// functions are tools, and function_call is tool_choice ("none", "auto" or
// {"name": ...}). Such a request makes at most one call, and its answer has
// message.function_call (finish_reason "function_call"), as OpenAI answers it.
// Errors name the legacy fields.
func legacyFeatures(r *chatRequest, msgs []engine.Message) (features, *apiError) {
	q := *r
	if !isEmptyList(r.Functions) {
		var fns []jsontext.Value
		if aerr := strictOf(r.Functions, &fns, "functions"); aerr != nil {
			return features{}, aerr
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
	if !isNull(r.FunctionCall) {
		var s string
		if jsonv2.Unmarshal(r.FunctionCall, &s) == nil {
			if s != "none" && s != "auto" {
				return features{}, badRequest("function_call", "function_call must be 'none', 'auto' or {\"name\": ...}")
			}
			q.ToolChoice = jsontext.Value(`"` + s + `"`)
		} else {
			var fc struct {
				Name string `json:"name"`
			}
			if aerr := strictOf(r.FunctionCall, &fc, "function_call"); aerr != nil {
				return features{}, aerr
			}
			if fc.Name == "" {
				return features{}, badRequest("function_call.name", "function_call names a function: {\"name\": ...}")
			}
			b, _ := jsonv2.Marshal(fc.Name)
			q.ToolChoice = jsontext.Value(`{"type":"function","function":{"name":` + string(b) + `}}`)
		}
	}
	f, aerr := chatFeatures(&q, msgs)
	if aerr != nil {
		aerr = legacyNames(aerr)
	}
	f.legacy, f.parallel = true, false
	return f, aerr
}

// legacyNames renames the fields of an error about the tools translated from the
// functions API: tools[i].function.x is functions[i].x, tool_choice function_call.
func legacyNames(e *apiError) *apiError {
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
	c.param = rename(e.param)
	c.message = strings.ReplaceAll(strings.ReplaceAll(e.message, "tool_choice", "function_call"), "'"+e.param+"'", "'"+c.param+"'")
	return &c
}
