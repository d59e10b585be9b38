package openai

import (
	"strconv"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/lmlite/lmlite/gateway/core"
	"github.com/lmlite/lmlite/internal/jsonenc"
)

// This file decodes the body of POST /v1/responses: its type, the parameters the
// server does not serve (refused by name) or accepts without acting on them, and
// the request in chat's shape (ChatShape: tools, tool_choice and text.format as
// chat's, which ChatRequest.Features checks). Its input items are items.go's. The
// gateway's codec (gateway/responses.go) fills its core request from these.

// ResponsesRequest is the body of POST /v1/responses. Parameters the server does not
// serve are decoded so that they are refused by name; an unknown name is refused by
// the decoder.
type ResponsesRequest struct {
	Model              string           `json:"model"`
	Input              jsontext.Value   `json:"input"`
	Instructions       *string          `json:"instructions"`
	Tools              []jsontext.Value `json:"tools"`
	ToolChoice         jsontext.Value   `json:"tool_choice"`
	ParallelToolCalls  *bool            `json:"parallel_tool_calls"`
	Text               *TextParam       `json:"text"`
	MaxOutputTokens    *int             `json:"max_output_tokens"`
	MaxToolCalls       *int             `json:"max_tool_calls"`
	Temperature        *float64         `json:"temperature"`
	TopP               *float64         `json:"top_p"`
	TopLogprobs        *int             `json:"top_logprobs"`
	Seed               *int64           `json:"seed"` // lmlite's, as chat's: OpenAI's Responses API has none
	Metadata           jsontext.Value   `json:"metadata"`
	Store              *bool            `json:"store"` // default true, as OpenAI
	PreviousResponseID *string          `json:"previous_response_id"`
	Truncation         *string          `json:"truncation"`
	User               string           `json:"user"`              // kept hashed with the usage record (gateway/identifiers.go)
	SafetyIdentifier   string           `json:"safety_identifier"` // kept hashed with the usage record (gateway/identifiers.go)
	PromptCacheKey     string           `json:"prompt_cache_key"`  // an affinity hint, as chat's
	Stream             bool             `json:"stream"`
	StreamOptions      *struct {
		IncludeObfuscation *bool `json:"include_obfuscation"` // accepted; nothing is obfuscated
	} `json:"stream_options"`
	Reasoning    *Reasoning         `json:"reasoning"` // accepted; no model here reasons (a no-op)
	Include      []string           `json:"include"`
	Background   *bool              `json:"background"`
	Conversation jsontext.Value     `json:"conversation"`
	Prompt       jsontext.Value     `json:"prompt"`
	ServiceTier  *string            `json:"service_tier"`
	LMLite       *core.LMLiteFields `json:"lmlite"`

	// Codex's turn metadata (an object of strings): accepted, not kept.
	ClientMetadata map[string]string `json:"client_metadata"`
}

// TextParam is the request's text: its output format and verbosity.
type TextParam struct {
	Format    *TextFormat `json:"format"`
	Verbosity *string     `json:"verbosity"` // accepted; a no-op
}

// TextFormat is text.format: text, json_object, or json_schema with its members
// beside the type (flat, not nested as chat's response_format).
type TextFormat struct {
	Type        string         `json:"type"`
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Schema      jsontext.Value `json:"schema"`
	Strict      *bool          `json:"strict"`
}

// Reasoning is the request's reasoning: checked, and a no-op (no model here has
// a reasoning mode).
type Reasoning struct {
	Effort          *string `json:"effort"`
	Summary         *string `json:"summary"`
	GenerateSummary *string `json:"generate_summary"`
}

// functionTool is a function tool, flat: {type: "function", name, description,
// parameters, strict}. strict defaults to true, as OpenAI's Responses API has it
// (chat's tools default to false).
type functionTool struct {
	Type        string         `json:"type"`
	Name        string         `json:"name"`
	Description *string        `json:"description"`
	Parameters  jsontext.Value `json:"parameters"`
	Strict      *bool          `json:"strict"`
}

// Unsupported refuses the parameters the server does not serve, by name, and checks
// the ones it accepts without acting on them.
func (r *ResponsesRequest) Unsupported() *core.FieldError {
	refuse := func(name, why string) *core.FieldError {
		return core.Bad(name, name+" is not supported by this server"+why)
	}
	switch {
	case r.Background != nil && *r.Background:
		return refuse("background", " (responses are answered in the request)")
	case !core.IsNull(r.Conversation):
		return refuse("conversation", "; continue a conversation with previous_response_id")
	case !core.IsNull(r.Prompt):
		return refuse("prompt", " (stored prompt templates)")
	case r.TopLogprobs != nil && *r.TopLogprobs != 0:
		return refuse("top_logprobs", "")
	case r.MaxToolCalls != nil:
		return refuse("max_tool_calls", "")
	case r.Truncation != nil && !core.OneOf(*r.Truncation, "disabled", "auto"):
		return core.Bad("truncation", "truncation must be 'disabled' or 'auto'")
	case r.Reasoning != nil && r.Reasoning.Effort != nil && !core.OneOf(*r.Reasoning.Effort, "none", "minimal", "low", "medium", "high"):
		return core.Bad("reasoning.effort", "reasoning.effort must be none, minimal, low, medium or high")
	case r.Reasoning != nil && r.Reasoning.Summary != nil && !core.OneOf(*r.Reasoning.Summary, "auto", "concise", "detailed"):
		return core.Bad("reasoning.summary", "reasoning.summary must be auto, concise or detailed")
	case r.Reasoning != nil && r.Reasoning.GenerateSummary != nil && !core.OneOf(*r.Reasoning.GenerateSummary, "auto", "concise", "detailed"):
		return core.Bad("reasoning.generate_summary", "reasoning.generate_summary must be auto, concise or detailed")
	case r.Text != nil && r.Text.Verbosity != nil && !core.OneOf(*r.Text.Verbosity, "low", "medium", "high"):
		return core.Bad("text.verbosity", "text.verbosity must be low, medium or high")
	case r.ServiceTier != nil && !core.OneOf(*r.ServiceTier, "auto", "default", "flex", "scale", "priority"):
		return core.Bad("service_tier", "service_tier must be auto, default, flex, scale or priority")
	case r.PreviousResponseID != nil && *r.PreviousResponseID == "":
		return core.Bad("previous_response_id", "previous_response_id must not be empty")
	}
	for i, inc := range r.Include {
		switch inc {
		case "reasoning.encrypted_content", "web_search_call.action.sources", "file_search_call.results",
			"code_interpreter_call.outputs", "computer_call_output.output.image_url", "message.input_image.image_url":
			// Nothing of these kinds is ever in an answer here: a no-op.
		case "message.output_text.logprobs":
			return refuse("include["+strconv.Itoa(i)+"]", " (logprobs on the Responses API)")
		default:
			return core.Bad("include["+strconv.Itoa(i)+"]", "unknown include value '"+inc+"'")
		}
	}
	if !core.IsNull(r.Metadata) {
		var md map[string]any
		if aerr := core.Strict(r.Metadata, &md, "metadata"); aerr != nil {
			return aerr
		}
		if aerr := CheckAnyMetadata(md); aerr != nil {
			return aerr
		}
	}
	return nil
}

// ChatShape is the request as a chat request's parameters and features: the
// sampling and routing fields, and tools, tool_choice, parallel_tool_calls and
// text.format in chat's shape, for ChatRequest.Features to check (errors renamed
// back by RenameResponses).
func (r *ResponsesRequest) ChatShape(q *ChatRequest) (*ChatRequest, *core.FieldError) {
	q.Model, q.Temperature, q.TopP, q.Seed = r.Model, r.Temperature, r.TopP, r.Seed
	q.Stream, q.User, q.SafetyIdentifier, q.PromptCacheKey, q.LMLite = r.Stream, r.User, r.SafetyIdentifier, r.PromptCacheKey, r.LMLite
	q.ParallelToolCalls = r.ParallelToolCalls
	if len(r.Tools) > 0 {
		b := []byte{'['}
		for i, raw := range r.Tools {
			field := "tools[" + strconv.Itoa(i) + "]"
			var head struct {
				Type string `json:"type"`
			}
			if err := jsonv2.Unmarshal(raw, &head); err != nil {
				return nil, core.Bad(field, "a tool must be an object")
			}
			if head.Type != "function" {
				return nil, core.Bad(field+".type", "tools of type '"+head.Type+"' are not supported by this server (built-in tools such as web_search, file_search and computer_use are not served; function tools are)")
			}
			var t functionTool
			if aerr := core.Strict(raw, &t, field); aerr != nil {
				return nil, aerr
			}
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"type":"function","function":{"name":`...)
			b = jsonenc.AppendString(b, t.Name)
			if t.Description != nil {
				b = append(b, `,"description":`...)
				b = jsonenc.AppendString(b, *t.Description)
			}
			if !core.IsNull(t.Parameters) {
				b = append(b, `,"parameters":`...)
				b = append(b, t.Parameters...)
			}
			b = append(b, `,"strict":`...)
			b = strconv.AppendBool(b, t.Strict == nil || *t.Strict) // the Responses API's default: strict
			b = append(b, "}}"...)
		}
		q.Tools = append(b, ']')
	}
	if !core.IsNull(r.ToolChoice) {
		var s string
		if jsonv2.Unmarshal(r.ToolChoice, &s) == nil {
			q.ToolChoice = r.ToolChoice
		} else {
			var head struct {
				Type string `json:"type"`
			}
			if err := jsonv2.Unmarshal(r.ToolChoice, &head); err != nil {
				return nil, core.Bad("tool_choice", "tool_choice must be 'none', 'auto', 'required' or {\"type\": \"function\", \"name\": ...}")
			}
			if head.Type != "function" {
				return nil, core.Bad("tool_choice.type", "tool_choice of type '"+head.Type+"' is not supported by this server (a function is)")
			}
			var tc struct {
				Type string `json:"type"`
				Name string `json:"name"`
			}
			if aerr := core.Strict(r.ToolChoice, &tc, "tool_choice"); aerr != nil {
				return nil, aerr
			}
			if tc.Name == "" {
				return nil, core.Bad("tool_choice.name", "a named tool_choice is {\"type\": \"function\", \"name\": ...}")
			}
			b := append([]byte(`{"type":"function","function":{"name":`), jsonenc.AppendString(nil, tc.Name)...)
			q.ToolChoice = append(b, "}}"...)
		}
	}
	if r.Text != nil && r.Text.Format != nil {
		tf := r.Text.Format
		b := append([]byte(`{"type":`), jsonenc.AppendString(nil, tf.Type)...)
		if tf.Type == "json_schema" {
			b = append(b, `,"json_schema":{"name":`...)
			b = jsonenc.AppendString(b, tf.Name)
			if tf.Description != "" {
				b = append(b, `,"description":`...)
				b = jsonenc.AppendString(b, tf.Description)
			}
			if !core.IsNull(tf.Schema) {
				b = append(b, `,"schema":`...)
				b = append(b, tf.Schema...)
			}
			if tf.Strict != nil {
				b = append(b, `,"strict":`...)
				b = strconv.AppendBool(b, *tf.Strict)
			}
			b = append(b, '}')
		} else if tf.Name != "" || !core.IsNull(tf.Schema) || tf.Strict != nil || tf.Description != "" {
			return nil, core.Bad("text.format", "name, description, schema and strict belong to a text.format of type 'json_schema'")
		}
		q.ResponseFormat = append(b, '}')
	}
	return q, nil
}
