package gateway

import (
	"context"
	"errors"
	"slices"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/grammar"
	"github.com/lmlite/lmlite/engine/toolcall"
	"github.com/lmlite/lmlite/gateway/core"
	"github.com/lmlite/lmlite/gateway/openai"
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

// Response formats (response_format.type) and tool choices (tool_choice), as
// gateway/openai decodes them.
const (
	formatText       = openai.FormatText
	formatJSONObject = openai.FormatJSONObject
	formatJSONSchema = openai.FormatJSONSchema

	toolAuto     = openai.ToolAuto
	toolNone     = openai.ToolNone
	toolRequired = openai.ToolRequired
	toolNamed    = openai.ToolNamed
)

// features are the OpenAI features a request asks for, decoded from its body
// (openai.Features, chatFeatures), as the gateway plans them on a model.
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

// chatFeatures decodes the chat request's features (openai.ChatRequest.Features:
// tools, tool_choice, parallel_tool_calls, response_format, logprobs, top_logprobs,
// n, and the deprecated functions API as tools).
func chatFeatures(r *chatRequest, msgs []engine.Message) (features, *apiError) {
	o, fe := r.Features(msgs)
	return featuresOf(&o), fieldError(fe)
}

// completionFeatures are a text completion's: logprobs, echo and n.
func completionFeatures(r *completionRequest) features {
	o := r.Features()
	return featuresOf(&o)
}

func featuresOf(o *openai.Features) features {
	return features{format: o.Format, schema: o.Schema, strict: o.Strict, tools: o.Tools, loose: o.Loose,
		choice: o.Choice, named: o.Named, parallel: o.Parallel, toolMsgs: o.ToolMsgs, logprobs: o.Logprobs,
		top: o.Top, echo: o.Echo, n: o.N, legacy: o.Legacy}
}

func choiceName(c int8) string { return openai.ChoiceName(c) }

func hasTool(tools []engine.Tool, name string) bool {
	for _, t := range tools {
		if t.Name == name {
			return true
		}
	}
	return false
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
