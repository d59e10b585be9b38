package gateway

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/gateway/openai"
	"github.com/lmlite/lmlite/internal/jsonenc"
	"github.com/lmlite/lmlite/respstore"
)

// This file is OpenAI's Responses API (POST /v1/responses) as a codec: its request
// decoded into the core's input (kindChat, as a chat request), its conversation
// rebuilt from a stored response (previous_response_id). responses_output.go renders
// the result (the Response object, or its event stream); responses_store.go keeps
// the responses per tenant and serves GET/DELETE /v1/responses/{id},
// /v1/responses/{id}/input_items and /v1/responses/input_tokens.

// responsesRequest is the body of POST /v1/responses. Parameters the server does not
// serve are decoded so that they are refused by name; an unknown name is refused by
// the decoder.
type responsesRequest struct {
	Model              string           `json:"model"`
	Input              jsontext.Value   `json:"input"`
	Instructions       *string          `json:"instructions"`
	Tools              []jsontext.Value `json:"tools"`
	ToolChoice         jsontext.Value   `json:"tool_choice"`
	ParallelToolCalls  *bool            `json:"parallel_tool_calls"`
	Text               *respTextParam   `json:"text"`
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
	User               string           `json:"user"`              // kept hashed with the usage record (identifiers.go)
	SafetyIdentifier   string           `json:"safety_identifier"` // kept hashed with the usage record (identifiers.go)
	PromptCacheKey     string           `json:"prompt_cache_key"`  // an affinity hint, as chat's
	Stream             bool             `json:"stream"`
	StreamOptions      *struct {
		IncludeObfuscation *bool `json:"include_obfuscation"` // accepted; nothing is obfuscated
	} `json:"stream_options"`
	Reasoning    *respReasoning `json:"reasoning"` // accepted; no model here reasons (a no-op)
	Include      []string       `json:"include"`
	Background   *bool          `json:"background"`
	Conversation jsontext.Value `json:"conversation"`
	Prompt       jsontext.Value `json:"prompt"`
	ServiceTier  *string        `json:"service_tier"`
	LMLite       *lmliteFields  `json:"lmlite"`

	// Codex's turn metadata (an object of strings): accepted, not kept.
	ClientMetadata map[string]string `json:"client_metadata"`
}

// respTextParam is the request's text: its output format and verbosity.
type respTextParam struct {
	Format    *respFormat `json:"format"`
	Verbosity *string     `json:"verbosity"` // accepted; a no-op
}

// respFormat is text.format: text, json_object, or json_schema with its members
// beside the type (flat, not nested as chat's response_format).
type respFormat struct {
	Type        string         `json:"type"`
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Schema      jsontext.Value `json:"schema"`
	Strict      *bool          `json:"strict"`
}

// respReasoning is the request's reasoning: checked, and a no-op (no model here has
// a reasoning mode).
type respReasoning struct {
	Effort          *string `json:"effort"`
	Summary         *string `json:"summary"`
	GenerateSummary *string `json:"generate_summary"`
}

// respTool is a function tool, flat: {type: "function", name, description,
// parameters, strict}. strict defaults to true, as OpenAI's Responses API has it
// (chat's tools default to false).
type respTool struct {
	Type        string         `json:"type"`
	Name        string         `json:"name"`
	Description *string        `json:"description"`
	Parameters  jsontext.Value `json:"parameters"`
	Strict      *bool          `json:"strict"`
}

// respItem is one item of a conversation (openai.Item).
type respItem = openai.Item

// maxRespItems bounds the items of one conversation (openai.MaxItems).
const maxRespItems = openai.MaxItems

// respInput is what the Responses codec keeps of a request for its output: the echo
// of its parameters in the Response object, and the conversation to store.
type respInput struct {
	store      bool
	previous   string           // previous_response_id
	own        []respItem       // this request's input items
	items      []respItem       // the conversation the model sees: previous_response_id's, then own
	echo       []byte           // the Response object's members echoing the request (",\"instructions\":…"), made once
	storeAt    int              // where echo's store value (true or false) begins
	limits     respstore.Limits // store: the tenant's plan's limits on stored responses (admitStore)
	maxOutput  int              // max_output_tokens; 0: none
	background bool

	req   responsesRequest // the body as decoded
	chat  chatRequest      // its chat shape (chatShape): in.p is its commonParams
	saver respSaver        // stores the response (store: true; responses_output.go)
}

// responsesCodec is OpenAI's Responses API. It keeps no per-request state; store
// keeps the responses of every tenant.
type responsesCodec struct {
	store responseStore
	log   *slog.Logger // a store that fails
}

var _ codec = (*responsesCodec)(nil)

// decode reads a Responses body into in as a chat request: the conversation
// (previous_response_id's, then input) after instructions as a system message, the
// function tools, tool_choice and text.format through the chat decoder's checks
// (chatFeatures), sampling, limits and routing fields.
func (c *responsesCodec) decode(in *input, body []byte, tenant string) *apiError {
	ri := &respInput{} // with the request's decoded forms: one allocation
	r := &ri.req
	if aerr := decodeBody(body, r); aerr != nil {
		return aerr
	}
	if aerr := r.unsupported(); aerr != nil {
		return aerr
	}
	ri.store = r.Store == nil || *r.Store
	if r.Background != nil {
		ri.background = *r.Background
	}
	items, aerr := parseRespInput(r.Input)
	if aerr != nil {
		return aerr
	}
	ri.own = items
	if r.PreviousResponseID != nil {
		ri.previous = *r.PreviousResponseID
		prev, aerr := c.conversation(tenant, ri.previous)
		if aerr != nil {
			return aerr
		}
		items = append(prev[:len(prev):len(prev)], items...)
	}
	if len(items) > maxRespItems {
		return badRequest("input", "the conversation has "+strconv.Itoa(len(items))+" items; at most "+strconv.Itoa(maxRespItems)+" are allowed")
	}
	ri.items = items
	msgs, size := respMessages(r.Instructions, items)
	if len(msgs) == 0 {
		return badRequest("input", "input must be a non-empty string or array of items")
	}
	q, aerr := r.chatShape(&ri.chat)
	if aerr != nil {
		return aerr
	}
	f, aerr := chatFeatures(q, msgs)
	if aerr != nil {
		return respNames(aerr)
	}
	in.msgs, in.promptBytes, in.feat = msgs, size, f
	in.maxField = "max_output_tokens"
	if in.maxTokens, aerr = maxTokensOf(r.MaxOutputTokens, nil, "max_output_tokens", ""); aerr != nil {
		return aerr
	}
	ri.maxOutput = in.maxTokens
	in.p = &q.CommonParams
	if aerr = in.chatTail(); aerr != nil {
		return aerr
	}
	ri.echo, ri.storeAt = r.appendEcho(make([]byte, 0, 640), &f)
	in.resp = ri
	return nil
}

// conversation reads the tenant's stored conversation that previous_response_id
// continues: another tenant's id, like one that does not exist, is a 404.
func (c *responsesCodec) conversation(tenant, id string) ([]respItem, *apiError) {
	if c.store == nil {
		return nil, respNotFound("previous_response_id", id)
	}
	items, err := c.store.Conversation(context.Background(), tenant, id)
	if err != nil {
		return nil, storeError(err, "previous_response_id", id)
	}
	return items, nil
}

// respNotFound is OpenAI's 404 for a response id the tenant does not have.
func respNotFound(param, id string) *apiError {
	msg := "Response with id '" + id + "' not found."
	if param == "previous_response_id" {
		msg = "Previous response with id '" + id + "' not found."
	}
	return &apiError{status: 404, typ: "invalid_request_error", code: "response_not_found", param: param, message: msg, reason: "not_found"}
}

// storeUnavailable answers a request whose stored responses did not answer; the
// cause (which may name Redis's address) is not shown.
func storeUnavailable(error) *apiError {
	return &apiError{status: 503, typ: "server_error", code: "response_store_unavailable",
		message: "the stored responses are unavailable; retry shortly", retry: 1, reason: "unavailable"}
}

// unsupported refuses the parameters the server does not serve, by name, and checks
// the ones it accepts without acting on them.
func (r *responsesRequest) unsupported() *apiError {
	refuse := func(name, why string) *apiError {
		return badRequest(name, name+" is not supported by this server"+why)
	}
	switch {
	case r.Background != nil && *r.Background:
		return refuse("background", " (responses are answered in the request)")
	case !isNull(r.Conversation):
		return refuse("conversation", "; continue a conversation with previous_response_id")
	case !isNull(r.Prompt):
		return refuse("prompt", " (stored prompt templates)")
	case r.TopLogprobs != nil && *r.TopLogprobs != 0:
		return refuse("top_logprobs", "")
	case r.MaxToolCalls != nil:
		return refuse("max_tool_calls", "")
	case r.Truncation != nil && !oneOf(*r.Truncation, "disabled", "auto"):
		return badRequest("truncation", "truncation must be 'disabled' or 'auto'")
	case r.Reasoning != nil && r.Reasoning.Effort != nil && !oneOf(*r.Reasoning.Effort, "none", "minimal", "low", "medium", "high"):
		return badRequest("reasoning.effort", "reasoning.effort must be none, minimal, low, medium or high")
	case r.Reasoning != nil && r.Reasoning.Summary != nil && !oneOf(*r.Reasoning.Summary, "auto", "concise", "detailed"):
		return badRequest("reasoning.summary", "reasoning.summary must be auto, concise or detailed")
	case r.Reasoning != nil && r.Reasoning.GenerateSummary != nil && !oneOf(*r.Reasoning.GenerateSummary, "auto", "concise", "detailed"):
		return badRequest("reasoning.generate_summary", "reasoning.generate_summary must be auto, concise or detailed")
	case r.Text != nil && r.Text.Verbosity != nil && !oneOf(*r.Text.Verbosity, "low", "medium", "high"):
		return badRequest("text.verbosity", "text.verbosity must be low, medium or high")
	case r.ServiceTier != nil && !oneOf(*r.ServiceTier, "auto", "default", "flex", "scale", "priority"):
		return badRequest("service_tier", "service_tier must be auto, default, flex, scale or priority")
	case r.PreviousResponseID != nil && *r.PreviousResponseID == "":
		return badRequest("previous_response_id", "previous_response_id must not be empty")
	}
	for i, inc := range r.Include {
		switch inc {
		case "reasoning.encrypted_content", "web_search_call.action.sources", "file_search_call.results",
			"code_interpreter_call.outputs", "computer_call_output.output.image_url", "message.input_image.image_url":
			// Nothing of these kinds is ever in an answer here: a no-op.
		case "message.output_text.logprobs":
			return refuse("include["+strconv.Itoa(i)+"]", " (logprobs on the Responses API)")
		default:
			return badRequest("include["+strconv.Itoa(i)+"]", "unknown include value '"+inc+"'")
		}
	}
	if !isNull(r.Metadata) {
		var md map[string]any
		if aerr := strictOf(r.Metadata, &md, "metadata"); aerr != nil {
			return aerr
		}
		if aerr := checkAnyMetadata(md); aerr != nil {
			return aerr
		}
	}
	return nil
}

// parseRespInput reads input: a string (one user message) or an array of items
// (openai.ParseInput).
func parseRespInput(raw jsontext.Value) ([]respItem, *apiError) {
	items, ferr := openai.ParseInput(raw)
	return items, fieldError(ferr)
}

// parseRespItem reads one input item strictly (openai.ParseItem).
func parseRespItem(raw jsontext.Value, field string) (respItem, *apiError) {
	it, ferr := openai.ParseItem(raw, field)
	return it, fieldError(ferr)
}

// respMessages makes the chat messages of a conversation (openai.Messages).
func respMessages(instructions *string, items []respItem) ([]engine.Message, int) {
	return openai.Messages(instructions, items)
}

// chatShape is the request as a chat request's parameters and features: the
// sampling and routing fields, and tools, tool_choice, parallel_tool_calls and
// text.format in chat's shape, for chatFeatures to check (errors renamed
// back by respNames).
func (r *responsesRequest) chatShape(q *chatRequest) (*chatRequest, *apiError) {
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
				return nil, badRequest(field, "a tool must be an object")
			}
			if head.Type != "function" {
				return nil, badRequest(field+".type", "tools of type '"+head.Type+"' are not supported by this server (built-in tools such as web_search, file_search and computer_use are not served; function tools are)")
			}
			var t respTool
			if aerr := strictOf(raw, &t, field); aerr != nil {
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
			if !isNull(t.Parameters) {
				b = append(b, `,"parameters":`...)
				b = append(b, t.Parameters...)
			}
			b = append(b, `,"strict":`...)
			b = strconv.AppendBool(b, t.Strict == nil || *t.Strict) // the Responses API's default: strict
			b = append(b, "}}"...)
		}
		q.Tools = append(b, ']')
	}
	if !isNull(r.ToolChoice) {
		var s string
		if jsonv2.Unmarshal(r.ToolChoice, &s) == nil {
			q.ToolChoice = r.ToolChoice
		} else {
			var head struct {
				Type string `json:"type"`
			}
			if err := jsonv2.Unmarshal(r.ToolChoice, &head); err != nil {
				return nil, badRequest("tool_choice", "tool_choice must be 'none', 'auto', 'required' or {\"type\": \"function\", \"name\": ...}")
			}
			if head.Type != "function" {
				return nil, badRequest("tool_choice.type", "tool_choice of type '"+head.Type+"' is not supported by this server (a function is)")
			}
			var tc struct {
				Type string `json:"type"`
				Name string `json:"name"`
			}
			if aerr := strictOf(r.ToolChoice, &tc, "tool_choice"); aerr != nil {
				return nil, aerr
			}
			if tc.Name == "" {
				return nil, badRequest("tool_choice.name", "a named tool_choice is {\"type\": \"function\", \"name\": ...}")
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
			if !isNull(tf.Schema) {
				b = append(b, `,"schema":`...)
				b = append(b, tf.Schema...)
			}
			if tf.Strict != nil {
				b = append(b, `,"strict":`...)
				b = strconv.AppendBool(b, *tf.Strict)
			}
			b = append(b, '}')
		} else if tf.Name != "" || !isNull(tf.Schema) || tf.Strict != nil || tf.Description != "" {
			return nil, badRequest("text.format", "name, description, schema and strict belong to a text.format of type 'json_schema'")
		}
		q.ResponseFormat = append(b, '}')
	}
	return q, nil
}

// respNames renames the fields of an error about the request in chat's shape to the
// Responses API's: response_format(.json_schema) is text.format, tools[i].function.x
// is tools[i].x, tool_choice's function.name its name, messages input and max_tokens
// max_output_tokens (openai.RenameResponses). The codec's appendError applies
// it to the errors the core finds later (a schema the grammar cannot serve).
func respNames(e *apiError) *apiError {
	p, msg, changed := openai.RenameResponses(e.param, e.message)
	if !changed {
		return e
	}
	c := *e
	c.param, c.message = p, msg
	return &c
}

// appendEcho appends the Response object's members that echo the request, as the
// SDKs read them: instructions, tools (flat), tool_choice, parallel_tool_calls,
// temperature, top_p, text, metadata, previous_response_id, store,
// max_output_tokens, truncation, reasoning, user, safety_identifier,
// prompt_cache_key, service_tier and top_logprobs. f is the request's decoded
// features (the tools as checked). storeAt is where store's value begins in what it
// appended (a response that could not be stored says false there).
func (r *responsesRequest) appendEcho(b []byte, f *features) (_ []byte, storeAt int) {
	b = append(b, `,"instructions":`...)
	if r.Instructions != nil {
		b = jsonenc.AppendString(b, *r.Instructions)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"tools":[`...)
	for i, t := range f.tools {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"type":"function","name":`...)
		b = jsonenc.AppendString(b, t.Name)
		b = append(b, `,"description":`...)
		if t.Description != "" {
			b = jsonenc.AppendString(b, t.Description)
		} else {
			b = append(b, "null"...)
		}
		b = append(b, `,"parameters":`...)
		if len(t.Parameters) > 0 {
			b = appendCompact(b, t.Parameters)
		} else {
			b = append(b, "null"...)
		}
		b = append(b, `,"strict":`...)
		b = strconv.AppendBool(b, i < len(f.loose) && !f.loose[i])
		b = append(b, '}')
	}
	b = append(b, `],"tool_choice":`...)
	switch f.choice {
	case toolNamed:
		b = append(b, `{"type":"function","name":`...)
		b = jsonenc.AppendString(b, f.named)
		b = append(b, '}')
	default:
		b = append(b, '"')
		b = append(b, choiceName(f.choice)...)
		b = append(b, '"')
	}
	b = append(b, `,"parallel_tool_calls":`...)
	b = strconv.AppendBool(b, f.parallel)
	b = append(b, `,"temperature":`...)
	b = appendOptFloat(b, r.Temperature, 1)
	b = append(b, `,"top_p":`...)
	b = appendOptFloat(b, r.TopP, 1)
	b = append(b, `,"text":{"format":`...)
	switch f.format {
	case formatJSONObject:
		b = append(b, `{"type":"json_object"}`...)
	case formatJSONSchema:
		tf := r.Text.Format
		b = append(b, `{"type":"json_schema","name":`...)
		b = jsonenc.AppendString(b, tf.Name)
		b = append(b, `,"description":`...)
		if tf.Description != "" {
			b = jsonenc.AppendString(b, tf.Description)
		} else {
			b = append(b, "null"...)
		}
		b = append(b, `,"schema":`...)
		b = appendCompact(b, f.schema)
		b = append(b, `,"strict":`...)
		b = strconv.AppendBool(b, f.strict)
		b = append(b, '}')
	default:
		b = append(b, `{"type":"text"}`...)
	}
	b = append(b, `,"verbosity":`...)
	if r.Text != nil && r.Text.Verbosity != nil {
		b = jsonenc.AppendString(b, *r.Text.Verbosity)
	} else {
		b = append(b, `"medium"`...)
	}
	b = append(b, `},"metadata":`...)
	if isNull(r.Metadata) {
		b = append(b, "{}"...)
	} else {
		b = appendCompact(b, r.Metadata)
	}
	b = append(b, `,"previous_response_id":`...)
	b = appendOptString(b, r.PreviousResponseID)
	b = append(b, `,"store":`...)
	storeAt = len(b)
	b = strconv.AppendBool(b, r.Store == nil || *r.Store)
	b = append(b, `,"max_output_tokens":`...)
	if r.MaxOutputTokens != nil {
		b = strconv.AppendInt(b, int64(*r.MaxOutputTokens), 10)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"max_tool_calls":null,"truncation":`...)
	if r.Truncation != nil {
		b = jsonenc.AppendString(b, *r.Truncation)
	} else {
		b = append(b, `"disabled"`...)
	}
	b = append(b, `,"reasoning":{"effort":`...)
	var effort, summary *string
	if r.Reasoning != nil {
		effort, summary = r.Reasoning.Effort, r.Reasoning.Summary
	}
	b = appendOptString(b, effort)
	b = append(b, `,"summary":`...)
	b = appendOptString(b, summary)
	b = append(b, `},"user":`...)
	b = appendNonEmpty(b, r.User)
	b = append(b, `,"safety_identifier":`...)
	b = appendNonEmpty(b, r.SafetyIdentifier)
	b = append(b, `,"prompt_cache_key":`...)
	b = appendNonEmpty(b, r.PromptCacheKey)
	b = append(b, `,"service_tier":"default","top_logprobs":0,"background":false`...)
	return b, storeAt
}

// appendNonEmpty appends s as a JSON string, or null when it is empty.
func appendNonEmpty(b []byte, s string) []byte {
	if s == "" {
		return append(b, "null"...)
	}
	return jsonenc.AppendString(b, s)
}

func appendOptString(b []byte, s *string) []byte {
	if s == nil {
		return append(b, "null"...)
	}
	return jsonenc.AppendString(b, *s)
}

func appendOptFloat(b []byte, f *float64, def float64) []byte {
	v := def
	if f != nil {
		v = *f
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}

// appendCompact appends JSON text without its insignificant white space (a member of
// an SSE event's data must not hold a newline); null if it is not JSON.
func appendCompact(b []byte, raw []byte) []byte {
	v := jsontext.Value(bytes.Clone(raw))
	if v.Compact() != nil {
		return append(b, "null"...)
	}
	return append(b, v...)
}
