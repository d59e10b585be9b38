package gateway

import (
	"bytes"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/internal/jsonenc"
)

// This file is Anthropic's Messages API as a codec (codec.go): POST /v1/messages
// decoded into the core's input, the answer rendered as Anthropic's Message object or
// its event stream (messages_out.go), and POST /v1/messages/count_tokens
// (messages_count.go).
//
// The request is decoded strictly: a member the API does not have is a 400 naming
// it, in Anthropic's error shape. Its tools, tool_choice and output_config are
// translated into the chat request's and checked by the chat decoder
// (chatRequest.features), whose errors are renamed to the Messages API's fields
// (messagesNames). What the server cannot serve is a 400 naming the field or block:
// image, document and search-result blocks, server tools, a final assistant message
// (a prefill). What it accepts and does not act on: cache_control (the prefix cache
// is automatic), thinking (no model here has a thinking mode), service_tier,
// output_config.effort, the anthropic-version and anthropic-beta headers.

// messagesRequest is the body of POST /v1/messages (and of count_tokens, where
// max_tokens is not required).
type messagesRequest struct {
	Model         string                `json:"model"`
	Messages      []messagesMessage     `json:"messages"`
	System        jsontext.Value        `json:"system"`
	MaxTokens     *int                  `json:"max_tokens"`
	StopSequences []string              `json:"stop_sequences"`
	Temperature   *float64              `json:"temperature"`
	TopP          *float64              `json:"top_p"`
	TopK          *int                  `json:"top_k"`
	Stream        bool                  `json:"stream"`
	Metadata      *messagesMetadata     `json:"metadata"`
	Tools         []jsontext.Value      `json:"tools"`
	ToolChoice    *messagesToolChoice   `json:"tool_choice"`
	Thinking      *messagesThinking     `json:"thinking"`     // accepted; no model here thinks (a no-op)
	ServiceTier   *string               `json:"service_tier"` // accepted: "auto" or "standard_only"
	OutputConfig  *messagesOutputConfig `json:"output_config"`
	LMLite        *messagesLMLite       `json:"lmlite"`
	CacheControl  jsontext.Value        `json:"cache_control"` // accepted and ignored: the prefix cache is automatic
}

type messagesMessage struct {
	Role    string         `json:"role"`
	Content jsontext.Value `json:"content"`
}

// messagesMetadata is the request's metadata: user_id is kept hashed with the usage
// record, as OpenAI's user (identifiers.go).
type messagesMetadata struct {
	UserID *string `json:"user_id"`
}

type messagesToolChoice struct {
	Type                   string `json:"type"` // auto, any, tool, none
	Name                   string `json:"name"` // type tool
	DisableParallelToolUse *bool  `json:"disable_parallel_tool_use"`
}

type messagesThinking struct {
	Type         string `json:"type"` // enabled, disabled, adaptive
	BudgetTokens *int   `json:"budget_tokens"`
	Display      string `json:"display"`
}

// messagesOutputConfig is output_config: format is structured output (a JSON schema, as
// the chat API's response_format json_schema), effort is accepted (a no-op).
type messagesOutputConfig struct {
	Effort *string `json:"effort"`
	Format *struct {
		Type   string         `json:"type"` // json_schema
		Schema jsontext.Value `json:"schema"`
	} `json:"format"`
}

// messagesLMLite is the body's "lmlite" object: the routing fields of every API,
// and seed, which the Messages API does not have (so that the same seed gives the
// same sampled text as through chat/completions).
type messagesLMLite struct {
	lmliteFields
	Seed *int64 `json:"seed"`
}

// messagesTool is a client tool (type absent or "custom").
type messagesTool struct {
	Type         string         `json:"type"`
	Name         string         `json:"name"`
	Description  string         `json:"description"`
	InputSchema  jsontext.Value `json:"input_schema"`
	CacheControl jsontext.Value `json:"cache_control"` // accepted and ignored
	Strict       *bool          `json:"strict"`
}

// Content blocks, each decoded strictly once its type is known.
type (
	blockType struct {
		Type string `json:"type"`
	}
	textBlock struct {
		Type         string         `json:"type"`
		Text         string         `json:"text"`
		CacheControl jsontext.Value `json:"cache_control"`
		Citations    jsontext.Value `json:"citations"` // accepted and ignored
	}
	toolUseBlock struct {
		Type         string         `json:"type"`
		ID           string         `json:"id"`
		Name         string         `json:"name"`
		Input        jsontext.Value `json:"input"`
		CacheControl jsontext.Value `json:"cache_control"`
	}
	toolResultBlock struct {
		Type         string         `json:"type"`
		ToolUseID    string         `json:"tool_use_id"`
		Content      jsontext.Value `json:"content"`
		IsError      *bool          `json:"is_error"`
		CacheControl jsontext.Value `json:"cache_control"`
	}
	thinkingBlock struct { // an assistant's earlier thinking: dropped
		Type      string `json:"type"`
		Thinking  string `json:"thinking"`
		Signature string `json:"signature"`
		Data      string `json:"data"` // redacted_thinking
	}
)

// blockSep joins the text blocks of one message, one system prompt or one tool
// result.
const blockSep = "\n\n"

// toolErrorPrefix starts a tool result with is_error true: the model reads that the
// call failed (chat templates have no such flag).
const toolErrorPrefix = "Error: "

// messagesCodec is the Messages API; count is POST /v1/messages/count_tokens's
// (max_tokens optional).
type messagesCodec struct {
	count bool
}

var (
	messagesAPI = &messagesCodec{}
	countAPI    = &messagesCodec{count: true}
)

// decode reads a Messages body into in.
func (c *messagesCodec) decode(in *input, body []byte, tenant string) *apiError {
	r := &messagesRequest{}
	if aerr := decodeBody(body, r); aerr != nil {
		return aerr
	}
	return r.input(in, c.count)
}

// apiKey is the request's API key: x-api-key, as Anthropic's clients send it, else
// Authorization: Bearer (apiKeyer).
func (c *messagesCodec) apiKey(h *fasthttp.RequestHeader) []byte {
	if k := h.Peek("X-Api-Key"); len(k) > 0 {
		return k
	}
	k, _ := bytes.CutPrefix(h.Peek("Authorization"), []byte("Bearer "))
	return k
}

// input fills in from the decoded request, then completes it as every chat-shaped
// request is (input.chatTail).
func (r *messagesRequest) input(in *input, count bool) *apiError {
	in.kind = kindChat
	in.maxField = "max_tokens"
	p := &commonParams{Model: r.Model, MaxTokens: r.MaxTokens, Temperature: r.Temperature, TopP: r.TopP, TopK: r.TopK, Stream: r.Stream}
	if r.Metadata != nil && r.Metadata.UserID != nil {
		p.User = *r.Metadata.UserID // kept hashed with the usage record
	}
	if l := r.LMLite; l != nil {
		f := l.lmliteFields
		p.LMLite, p.Seed = &f, l.Seed
	}
	in.p = p
	if r.Model == "" {
		return badRequest("model", "model: Field required")
	}
	switch {
	case r.MaxTokens == nil && !count:
		return badRequest("max_tokens", "max_tokens: Field required")
	case r.MaxTokens != nil && *r.MaxTokens < 1:
		return badRequest("max_tokens", "max_tokens: must be at least 1")
	case r.Temperature != nil && !(*r.Temperature >= 0 && *r.Temperature <= 1):
		return badRequest("temperature", "temperature: must be between 0 and 1")
	case r.TopK != nil && *r.TopK < 0:
		return badRequest("top_k", "top_k: must be ≥ 0")
	case r.ServiceTier != nil && *r.ServiceTier != "auto" && *r.ServiceTier != "standard_only":
		return badRequest("service_tier", "service_tier: must be 'auto' or 'standard_only'")
	case r.Metadata != nil && r.Metadata.UserID != nil && len(*r.Metadata.UserID) > 256:
		return badRequest("metadata.user_id", "metadata.user_id: at most 256 characters")
	}
	if aerr := r.Thinking.check(); aerr != nil {
		return aerr
	}
	if r.MaxTokens != nil {
		in.maxTokens = *r.MaxTokens
	}
	var aerr *apiError
	if in.msgs, in.promptBytes, aerr = r.conversation(); aerr != nil {
		return aerr
	}
	if in.feat, aerr = r.features(in.msgs); aerr != nil {
		return aerr
	}
	if aerr = in.chatTail(); aerr != nil { // the tools' bytes, sampling, stream
		return aerr
	}
	for _, s := range r.StopSequences {
		if s != "" {
			in.stop = append(in.stop, s)
		}
	}
	return nil
}

// check accepts thinking (a no-op: no model here has a thinking mode) when it is
// one of the API's shapes.
func (t *messagesThinking) check() *apiError {
	if t == nil {
		return nil
	}
	switch t.Type {
	case "disabled", "adaptive":
	case "enabled":
		if t.BudgetTokens == nil || *t.BudgetTokens < 1024 {
			return badRequest("thinking.budget_tokens", "thinking.budget_tokens: must be at least 1024")
		}
	default:
		return badRequest("thinking.type", "thinking.type: must be 'enabled', 'disabled' or 'adaptive'")
	}
	return nil
}

// conversation converts system and messages into the chat template's messages: a
// user message's tool_result blocks become messages with role "tool" (in their
// place among its text), an assistant's tool_use blocks its tool calls. It returns
// them with their size in bytes.
func (r *messagesRequest) conversation() ([]engine.Message, int, *apiError) {
	if len(r.Messages) == 0 {
		return nil, 0, badRequest("messages", "messages: at least one message is required")
	}
	out := make([]engine.Message, 0, len(r.Messages)+1)
	size := 0
	if !isNull(r.System) {
		sys, aerr := blocksText(r.System, "system")
		if aerr != nil {
			return nil, 0, aerr
		}
		if sys != "" {
			out = append(out, engine.Message{Role: "system", Content: sys})
			size += len(sys)
		}
	}
	for i, m := range r.Messages {
		field := "messages[" + strconv.Itoa(i) + "]"
		switch m.Role {
		case "user", "assistant":
		default:
			return nil, 0, badRequest(field+".role", field+".role: must be 'user' or 'assistant', not '"+m.Role+"'")
		}
		if m.Role == "assistant" && i == len(r.Messages)-1 {
			return nil, 0, badRequest(field+".role", field+": a final assistant message (a prefill to continue) is not supported by this server")
		}
		if isNull(m.Content) {
			return nil, 0, badRequest(field+".content", field+".content: Field required")
		}
		var s string
		if jsonv2.Unmarshal(m.Content, &s) == nil {
			out = append(out, engine.Message{Role: m.Role, Content: s})
			size += len(s)
			continue
		}
		var blocks []jsontext.Value
		if jsonv2.Unmarshal(m.Content, &blocks) != nil {
			return nil, 0, badRequest(field+".content", field+".content: must be a string or an array of content blocks")
		}
		var n int
		var aerr *apiError
		if m.Role == "user" {
			out, n, aerr = userBlocks(out, blocks, field+".content")
		} else {
			out, n, aerr = assistantBlocks(out, blocks, field+".content")
		}
		if aerr != nil {
			return nil, 0, aerr
		}
		size += n
	}
	return out, size, nil
}

// blockTypeOf reads a content block's type (unknown members allowed: the block is
// decoded strictly once its type is known).
func blockTypeOf(raw jsontext.Value, field string) (string, *apiError) {
	var bt blockType
	if err := jsonv2.Unmarshal(raw, &bt); err != nil || bt.Type == "" {
		return "", badRequest(field+".type", field+": a content block is an object with a type")
	}
	return bt.Type, nil
}

// unsupportedBlock refuses a block of a type the server does not serve, naming it.
func unsupportedBlock(field, typ string) *apiError {
	switch typ {
	case "image", "document", "search_result", "container_upload":
		return badRequest(field, field+": content blocks of type '"+typ+"' are not supported by this server (text only)")
	}
	return badRequest(field+".type", field+": content blocks of type '"+typ+"' are not supported here")
}

// blocksText reads a string or an array of text blocks (a system prompt, a tool
// result's content) as one text.
func blocksText(raw jsontext.Value, field string) (string, *apiError) {
	var s string
	if jsonv2.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var blocks []jsontext.Value
	if jsonv2.Unmarshal(raw, &blocks) != nil {
		return "", badRequest(field, field+": must be a string or an array of text blocks")
	}
	var text joined
	for k, raw := range blocks {
		f := field + "[" + strconv.Itoa(k) + "]"
		typ, aerr := blockTypeOf(raw, f)
		if aerr != nil {
			return "", aerr
		}
		if typ != "text" {
			return "", unsupportedBlock(f, typ)
		}
		if _, aerr := text.add(raw, f); aerr != nil {
			return "", aerr
		}
	}
	return text.b.String(), nil
}

// joined collects the texts of text blocks, blockSep between them.
type joined struct {
	b strings.Builder
	n int // the texts added
}

// add decodes a text block (field f) and appends its text; it returns the text's size.
func (j *joined) add(raw jsontext.Value, f string) (int, *apiError) {
	var tb textBlock
	if aerr := strictOf(raw, &tb, f); aerr != nil {
		return 0, aerr
	}
	if j.n > 0 {
		j.b.WriteString(blockSep)
	}
	j.b.WriteString(tb.Text)
	j.n++
	return len(tb.Text), nil
}

// userBlocks appends a user message's blocks to out: its text blocks joined as one
// user message, each tool_result a message with role "tool", in their order.
func userBlocks(out []engine.Message, blocks []jsontext.Value, field string) ([]engine.Message, int, *apiError) {
	var text joined
	size := 0
	flush := func() {
		if text.n > 0 {
			out = append(out, engine.Message{Role: "user", Content: text.b.String()})
			text = joined{}
		}
	}
	for k, raw := range blocks {
		f := field + "[" + strconv.Itoa(k) + "]"
		typ, aerr := blockTypeOf(raw, f)
		if aerr != nil {
			return nil, 0, aerr
		}
		switch typ {
		case "text":
			n, aerr := text.add(raw, f)
			if aerr != nil {
				return nil, 0, aerr
			}
			size += n
		case "tool_result":
			var tr toolResultBlock
			if aerr := strictOf(raw, &tr, f); aerr != nil {
				return nil, 0, aerr
			}
			if tr.ToolUseID == "" {
				return nil, 0, badRequest(f+".tool_use_id", f+".tool_use_id: Field required")
			}
			content := ""
			if !isNull(tr.Content) {
				if content, aerr = blocksText(tr.Content, f+".content"); aerr != nil {
					return nil, 0, aerr
				}
			}
			if tr.IsError != nil && *tr.IsError {
				content = toolErrorPrefix + content
			}
			flush()
			out = append(out, engine.Message{Role: "tool", Content: content, ToolCallID: tr.ToolUseID})
			size += len(content) + len(tr.ToolUseID)
		default:
			return nil, 0, unsupportedBlock(f, typ)
		}
	}
	if len(blocks) == 0 {
		text.n = 1 // an empty content array: an empty user message
	}
	flush()
	return out, size, nil
}

// assistantBlocks appends an assistant message: its text blocks joined as its
// content, its tool_use blocks its tool calls; earlier thinking is dropped.
func assistantBlocks(out []engine.Message, blocks []jsontext.Value, field string) ([]engine.Message, int, *apiError) {
	m := engine.Message{Role: "assistant"}
	var text joined
	size := 0
	for k, raw := range blocks {
		f := field + "[" + strconv.Itoa(k) + "]"
		typ, aerr := blockTypeOf(raw, f)
		if aerr != nil {
			return nil, 0, aerr
		}
		switch typ {
		case "text":
			n, aerr := text.add(raw, f)
			if aerr != nil {
				return nil, 0, aerr
			}
			size += n
		case "tool_use":
			var tu toolUseBlock
			if aerr := strictOf(raw, &tu, f); aerr != nil {
				return nil, 0, aerr
			}
			if tu.ID == "" {
				return nil, 0, badRequest(f+".id", f+".id: Field required")
			}
			if tu.Name == "" {
				return nil, 0, badRequest(f+".name", f+".name: Field required")
			}
			args := bytes.TrimSpace(tu.Input)
			if isNull(args) {
				args = []byte("{}")
			} else if args[0] != '{' {
				return nil, 0, badRequest(f+".input", f+".input: must be an object")
			}
			m.ToolCalls = append(m.ToolCalls, engine.ToolCall{ID: tu.ID, Name: tu.Name, Arguments: string(args)})
			size += len(tu.ID) + len(tu.Name) + len(args)
		case "thinking", "redacted_thinking":
			var tb thinkingBlock
			if aerr := strictOf(raw, &tb, f); aerr != nil {
				return nil, 0, aerr
			}
		default:
			return nil, 0, unsupportedBlock(f, typ)
		}
	}
	m.Content = text.b.String()
	return append(out, m), size, nil
}

// features decodes tools, tool_choice and output_config by translating them into
// the chat request's tools, tool_choice, parallel_tool_calls and response_format:
// the chat decoder checks them (chatRequest.features), and its errors are renamed
// to this API's fields.
func (r *messagesRequest) features(msgs []engine.Message) (features, *apiError) {
	q := chatRequest{}
	if len(r.Tools) > 0 {
		tools := []byte{'['}
		for i, raw := range r.Tools {
			f := "tools[" + strconv.Itoa(i) + "]"
			var bt blockType
			if err := jsonv2.Unmarshal(raw, &bt); err != nil {
				return features{}, badRequest(f, f+": a tool is an object")
			}
			if bt.Type != "" && bt.Type != "custom" {
				return features{}, badRequest(f+".type", f+".type: the server tool '"+bt.Type+"' is not supported by this server (client tools only)")
			}
			var t messagesTool
			if aerr := strictOf(raw, &t, f); aerr != nil {
				return features{}, aerr
			}
			if t.Name == "" {
				return features{}, badRequest(f+".name", f+".name: Field required")
			}
			if isNull(t.InputSchema) {
				return features{}, badRequest(f+".input_schema", f+".input_schema: Field required")
			}
			if i > 0 {
				tools = append(tools, ',')
			}
			tools = append(tools, `{"type":"function","function":{"name":`...)
			tools = jsonenc.AppendString(tools, t.Name)
			if t.Description != "" {
				tools = append(tools, `,"description":`...)
				tools = jsonenc.AppendString(tools, t.Description)
			}
			tools = append(tools, `,"parameters":`...)
			tools = append(tools, t.InputSchema...)
			if t.Strict != nil {
				tools = append(tools, `,"strict":`...)
				tools = strconv.AppendBool(tools, *t.Strict)
			}
			tools = append(tools, "}}"...)
		}
		q.Tools = append(tools, ']')
	}
	if tc := r.ToolChoice; tc != nil {
		if tc.Name != "" && tc.Type != "tool" {
			return features{}, badRequest("tool_choice.name", "tool_choice.name: only with type 'tool'")
		}
		switch tc.Type {
		case "auto":
			q.ToolChoice = jsontext.Value(`"auto"`)
		case "any":
			q.ToolChoice = jsontext.Value(`"required"`)
		case "none":
			q.ToolChoice = jsontext.Value(`"none"`)
		case "tool":
			if tc.Name == "" {
				return features{}, badRequest("tool_choice.name", "tool_choice.name: Field required for type 'tool'")
			}
			v := jsonenc.AppendString([]byte(`{"type":"function","function":{"name":`), tc.Name)
			q.ToolChoice = append(v, "}}"...)
		default:
			return features{}, badRequest("tool_choice.type", "tool_choice.type: must be 'auto', 'any', 'tool' or 'none'")
		}
		if tc.DisableParallelToolUse != nil {
			par := !*tc.DisableParallelToolUse
			q.ParallelToolCalls = &par
		}
	}
	if oc := r.OutputConfig; oc != nil {
		if oc.Effort != nil && !oneOf(*oc.Effort, "low", "medium", "high", "max") {
			return features{}, badRequest("output_config.effort", "output_config.effort: must be 'low', 'medium', 'high' or 'max'")
		}
		if f := oc.Format; f != nil {
			if f.Type != "json_schema" {
				return features{}, badRequest("output_config.format.type", "output_config.format.type: must be 'json_schema'")
			}
			if isNull(f.Schema) {
				return features{}, badRequest("output_config.format.schema", "output_config.format.schema: Field required")
			}
			rf := append([]byte(`{"type":"json_schema","json_schema":{"name":"output","strict":true,"schema":`), f.Schema...)
			q.ResponseFormat = append(rf, "}}"...)
		}
	}
	f, aerr := q.features(msgs)
	if aerr != nil {
		return f, messagesNames(aerr)
	}
	return f, nil
}

// messagesNames renames the fields of an error about the chat request's tools,
// tool_choice or response_format, which the Messages API's are translated into
// (messagesRequest.features) and which planning names (planFeatures):
// tools[i].function.parameters is tools[i].input_schema, tools[i].function.name
// tools[i].name, response_format.json_schema.schema output_config.format.schema.
// Other errors are returned as they are.
func messagesNames(e *apiError) *apiError {
	rename := func(s string) string {
		if rest, ok := strings.CutPrefix(s, "tools["); ok {
			if i := strings.Index(rest, "]"); i >= 0 {
				tail := strings.Replace(rest[i+1:], ".function.parameters", ".input_schema", 1)
				tail = strings.Replace(tail, ".function.", ".", 1)
				return "tools[" + rest[:i+1] + tail
			}
		}
		if rest, ok := strings.CutPrefix(s, "response_format"); ok {
			return "output_config.format" + strings.TrimPrefix(rest, ".json_schema")
		}
		return s
	}
	p := rename(e.param)
	if p == e.param {
		return e
	}
	c := *e
	c.param = p
	c.message = strings.ReplaceAll(e.message, e.param, p)
	return &c
}
