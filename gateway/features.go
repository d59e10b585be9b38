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

// features are the OpenAI features a request asks for, decoded from its body by
// gateway/openai (chatFeatures), as the gateway plans them on a model.
type features = openai.Features

// strictOf decodes raw into v refusing unknown members, naming field in errors.
func strictOf(raw jsontext.Value, v any, field string) *apiError {
	return fieldError(core.Strict(raw, v, field))
}

// chatFeatures decodes the chat request's features (openai.ChatRequest.Features:
// tools, tool_choice, parallel_tool_calls, response_format, logprobs, top_logprobs,
// n, and the deprecated functions API as tools).
func chatFeatures(r *chatRequest, msgs []engine.Message) (features, *apiError) {
	f, fe := r.Features(msgs)
	return f, fieldError(fe)
}

// completionFeatures are a text completion's: logprobs, echo and n.
func completionFeatures(r *completionRequest) features { return r.Features() }

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
		case f.Format != formatText:
			return badRequest("response_format", "the model '"+m.id+"' does not support response_format")
		case len(f.Tools) > 0 || f.ToolMsgs:
			return badRequest("tools", "the model '"+m.id+"' does not support tools")
		case f.N > 1:
			return badRequest("n", "the model '"+m.id+"' does not support n > 1")
		case f.Logprobs:
			return badRequest("logprobs", "the model '"+m.id+"' does not support logprobs")
		}
		return nil
	}
	var err error
	switch f.Format {
	case formatJSONObject:
		p.gram = grammar.JSONObject()
	case formatJSONSchema:
		p.gram, err = fe.CompileSchema(f.Schema)
		if err != nil && !f.Strict && errors.Is(err, grammar.ErrUnsupported) {
			// Not strict: the keywords the grammar cannot enforce are ignored, the rest kept.
			if loose, lerr := grammar.Loosen(f.Schema); lerr == nil {
				p.gram, err = fe.CompileSchema(loose)
			}
		}
		if err != nil {
			// A schema that cycles without writing (grammar.ErrCycle) describes no
			// value: refused strict or not, as Server.Check refuses a batch line.
			if f.Strict || errors.Is(err, grammar.ErrCycle) {
				return badRequest("response_format.json_schema.schema", "the schema is not supported: "+err.Error())
			}
			p.gram = grammar.JSONObject() // not strict: valid JSON, the schema a hint
		}
	}
	if len(f.Tools) == 0 || f.Choice == toolNone {
		return nil
	}
	if p.syntax, err = fe.ToolSyntax(m.id); err != nil {
		return engineError(err)
	}
	p.parse = true
	tools := f.Tools
	if f.Choice == toolRequired || f.Choice == toolNamed {
		tools = looseTools(fe, f.Tools, f.Loose)
	}
	all := tools
	switch f.Choice {
	case toolNamed:
		for _, t := range all {
			if t.Name == f.Named {
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
func checkSchemas(f *features, eng Engine) *apiError {
	compile := grammar.CompileSchema
	if fe, ok := eng.(Features); ok {
		compile = fe.CompileSchema
	}
	if f.Format == formatJSONSchema {
		if _, err := compile(f.Schema); errors.Is(err, grammar.ErrCycle) {
			return badRequest("response_format.json_schema.schema", "the schema is not supported: "+err.Error())
		}
	}
	if f.Choice != toolRequired && f.Choice != toolNamed {
		return nil
	}
	for i, t := range f.Tools {
		if len(t.Parameters) == 0 || f.Choice == toolNamed && t.Name != f.Named {
			continue
		}
		if _, err := compile(t.Parameters); errors.Is(err, grammar.ErrCycle) {
			return badRequest("tools["+strconv.Itoa(i)+"].function.parameters", "the parameters schema is not supported: "+err.Error())
		}
	}
	return nil
}
