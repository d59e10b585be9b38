package gateway

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"

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

// responsesRequest is the body of POST /v1/responses (openai.ResponsesRequest).
type responsesRequest = openai.ResponsesRequest

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
	chat  chatRequest      // its chat shape (openai.ResponsesRequest.ChatShape): in.p is its CommonParams
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
	if aerr := fieldError(r.Unsupported()); aerr != nil {
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
	q, fe := r.ChatShape(&ri.chat)
	if fe != nil {
		return fieldError(fe)
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
	ri.echo, ri.storeAt = appendEcho(make([]byte, 0, 640), r, &f)
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
func appendEcho(b []byte, r *responsesRequest, f *features) (_ []byte, storeAt int) {
	b = append(b, `,"instructions":`...)
	if r.Instructions != nil {
		b = jsonenc.AppendString(b, *r.Instructions)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"tools":[`...)
	for i, t := range f.Tools {
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
		b = strconv.AppendBool(b, i < len(f.Loose) && !f.Loose[i])
		b = append(b, '}')
	}
	b = append(b, `],"tool_choice":`...)
	switch f.Choice {
	case toolNamed:
		b = append(b, `{"type":"function","name":`...)
		b = jsonenc.AppendString(b, f.Named)
		b = append(b, '}')
	default:
		b = append(b, '"')
		b = append(b, choiceName(f.Choice)...)
		b = append(b, '"')
	}
	b = append(b, `,"parallel_tool_calls":`...)
	b = strconv.AppendBool(b, f.Parallel)
	b = append(b, `,"temperature":`...)
	b = appendOptFloat(b, r.Temperature, 1)
	b = append(b, `,"top_p":`...)
	b = appendOptFloat(b, r.TopP, 1)
	b = append(b, `,"text":{"format":`...)
	switch f.Format {
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
		b = appendCompact(b, f.Schema)
		b = append(b, `,"strict":`...)
		b = strconv.AppendBool(b, f.Strict)
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
