package anthropic

import (
	"bytes"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/gateway/core"
	"github.com/lmlite/lmlite/internal/jsonenc"
)

// This file decodes Anthropic's Messages API: POST /v1/messages's body (and
// count_tokens', where max_tokens is not required) into the chat template's messages,
// the sampling parameters as given and, translated into the chat request's JSON, its
// tools, tool_choice, parallel_tool_calls and response_format (ChatFeatures), which
// the gateway's chat decoder checks; its errors are renamed to this API's fields
// (Rename). The gateway's codec (gateway/messages.go) fills its core request from
// these.
//
// The request is decoded strictly: a member the API does not have is a 400 naming
// it, in Anthropic's error shape. What the server cannot serve is a 400 naming the
// field or block: image, document and search-result blocks, server tools, a final
// assistant message (a prefill). What it accepts and does not act on:
// cache_control (the prefix cache is automatic), thinking (no model here has a
// thinking mode), service_tier, output_config.effort, the anthropic-version and
// anthropic-beta headers; of the betas Claude Code sends: context_management's
// clear_thinking edit (earlier thinking is always dropped here), a tool's
// defer_loading (the tool is left out of the prompt, as the API keeps it out of the
// model's context until a tool search loads it) and messages with role "system"
// (rendered as system messages in their place; clear_at "next_user_message" drops
// one once a later user message exists). Other context_management edits (tool-use
// clearing, compaction) and a system message's tool_addition and tool_removal
// blocks are a 400 naming them.

// Request is the body of POST /v1/messages (and of count_tokens, where
// max_tokens is not required).
type Request struct {
	Model         string           `json:"model"`
	Messages      []InputMessage   `json:"messages"`
	System        jsontext.Value   `json:"system"`
	MaxTokens     *int             `json:"max_tokens"`
	StopSequences []string         `json:"stop_sequences"`
	Temperature   *float64         `json:"temperature"`
	TopP          *float64         `json:"top_p"`
	TopK          *int             `json:"top_k"`
	Stream        bool             `json:"stream"`
	Metadata      *Metadata        `json:"metadata"`
	Tools         []jsontext.Value `json:"tools"`
	ToolChoice    *ToolChoice      `json:"tool_choice"`
	Thinking      *Thinking        `json:"thinking"`     // accepted; no model here thinks (a no-op)
	ServiceTier   *string          `json:"service_tier"` // accepted: "auto" or "standard_only"
	OutputConfig  *OutputConfig    `json:"output_config"`
	LMLite        *LMLite          `json:"lmlite"`
	CacheControl  jsontext.Value   `json:"cache_control"` // accepted and ignored: the prefix cache is automatic

	ContextManagement *ContextManagement `json:"context_management"` // beta: only clear_thinking (a no-op here)
}

// ContextManagement is context_management (beta): the server-side context edits.
type ContextManagement struct {
	Edits []struct {
		Type string         `json:"type"`
		Keep jsontext.Value `json:"keep"` // clear_thinking_20251015: the thinking turns to keep
	} `json:"edits"`
}

// check accepts clear_thinking_20251015, a no-op: earlier thinking blocks are always
// dropped here (no model has a thinking mode). The other edits rewrite the
// conversation on the server, which this one does not do.
func (c *ContextManagement) check() *core.FieldError {
	if c == nil {
		return nil
	}
	for i, e := range c.Edits {
		f := "context_management.edits[" + strconv.Itoa(i) + "].type"
		switch e.Type {
		case "clear_thinking_20251015":
		case "":
			return core.Bad(f, f+": Field required")
		default:
			return core.Bad(f, f+": the context edit '"+e.Type+"' is not supported by this server (only clear_thinking_20251015)")
		}
	}
	return nil
}

// InputMessage is one of messages: its content a string or content blocks.
type InputMessage struct {
	Role    string         `json:"role"`
	Content jsontext.Value `json:"content"`

	// role "system" only (beta): clear_at and a per-turn output_config.effort
	// (accepted, a no-op).
	ClearAt      string `json:"clear_at"`
	OutputConfig *struct {
		Effort *string `json:"effort"`
	} `json:"output_config"`
}

// Metadata is the request's metadata: user_id is kept hashed with the usage
// record, as OpenAI's user (identifiers.go).
type Metadata struct {
	UserID *string `json:"user_id"`
}

// ToolChoice is tool_choice.
type ToolChoice struct {
	Type                   string `json:"type"` // auto, any, tool, none
	Name                   string `json:"name"` // type tool
	DisableParallelToolUse *bool  `json:"disable_parallel_tool_use"`
}

// Thinking is thinking: accepted (a no-op), checked for the API's shapes.
type Thinking struct {
	Type         string `json:"type"` // enabled, disabled, adaptive
	BudgetTokens *int   `json:"budget_tokens"`
	Display      string `json:"display"`
}

// OutputConfig is output_config: format is structured output (a JSON schema, as
// the chat API's response_format json_schema), effort is accepted (a no-op).
type OutputConfig struct {
	Effort *string `json:"effort"`
	Format *struct {
		Type   string         `json:"type"` // json_schema
		Schema jsontext.Value `json:"schema"`
	} `json:"format"`
}

// LMLite is the body's "lmlite" object: the routing fields of every API,
// and seed, which the Messages API does not have (so that the same seed gives the
// same sampled text as through chat/completions).
type LMLite struct {
	core.LMLiteFields
	Seed *int64 `json:"seed"`
}

// Tool is a client tool (type absent or "custom").
type Tool struct {
	Type         string         `json:"type"`
	Name         string         `json:"name"`
	Description  string         `json:"description"`
	InputSchema  jsontext.Value `json:"input_schema"`
	CacheControl jsontext.Value `json:"cache_control"` // accepted and ignored
	Strict       *bool          `json:"strict"`
	DefersLoad   *bool          `json:"defer_loading"` // true: left out of the prompt
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

// Decode decodes a Messages body strictly (core.DecodeBody): a member the API does
// not have is an error naming it. Check, Conversation and ChatFeatures read the
// result.
func Decode(body []byte) (*Request, *core.FieldError) {
	r := &Request{}
	if ferr := core.DecodeBody(body, r); ferr != nil {
		return nil, ferr
	}
	return r, nil
}

// APIKey is the request's API key: x-api-key, as Anthropic's clients send it, else
// Authorization: Bearer (nil or empty: none).
func APIKey(xAPIKey, authorization []byte) []byte {
	if len(xAPIKey) > 0 {
		return xAPIKey
	}
	k, _ := bytes.CutPrefix(authorization, []byte("Bearer "))
	return k
}

// Check checks the request's parameters: model; max_tokens, required unless count
// (count_tokens'), at least 1; temperature in [0, 1]; top_k; service_tier;
// metadata.user_id's length; thinking's shape.
func (r *Request) Check(count bool) *core.FieldError {
	if r.Model == "" {
		return core.Bad("model", "model: Field required")
	}
	switch {
	case r.MaxTokens == nil && !count:
		return core.Bad("max_tokens", "max_tokens: Field required")
	case r.MaxTokens != nil && *r.MaxTokens < 1:
		return core.Bad("max_tokens", "max_tokens: must be at least 1")
	case r.Temperature != nil && !(*r.Temperature >= 0 && *r.Temperature <= 1):
		return core.Bad("temperature", "temperature: must be between 0 and 1")
	case r.TopK != nil && *r.TopK < 0:
		return core.Bad("top_k", "top_k: must be ≥ 0")
	case r.ServiceTier != nil && *r.ServiceTier != "auto" && *r.ServiceTier != "standard_only":
		return core.Bad("service_tier", "service_tier: must be 'auto' or 'standard_only'")
	case r.Metadata != nil && r.Metadata.UserID != nil && len(*r.Metadata.UserID) > 256:
		return core.Bad("metadata.user_id", "metadata.user_id: at most 256 characters")
	}
	if ferr := r.ContextManagement.check(); ferr != nil {
		return ferr
	}
	return r.Thinking.check()
}

// Stops are the request's stop sequences, the empty ones left out.
func (r *Request) Stops() []string {
	var out []string
	for _, s := range r.StopSequences {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// check accepts thinking (a no-op: no model here has a thinking mode) when it is
// one of the API's shapes.
func (t *Thinking) check() *core.FieldError {
	if t == nil {
		return nil
	}
	switch t.Type {
	case "disabled", "adaptive":
	case "enabled":
		if t.BudgetTokens == nil || *t.BudgetTokens < 1024 {
			return core.Bad("thinking.budget_tokens", "thinking.budget_tokens: must be at least 1024")
		}
	default:
		return core.Bad("thinking.type", "thinking.type: must be 'enabled', 'disabled' or 'adaptive'")
	}
	return nil
}

// Conversation converts system and messages into the chat template's messages: a
// user message's tool_result blocks become messages with role "tool" (in their
// place among its text), an assistant's tool_use blocks its tool calls. It returns
// them with their size in bytes.
func (r *Request) Conversation() ([]engine.Message, int, *core.FieldError) {
	if len(r.Messages) == 0 {
		return nil, 0, core.Bad("messages", "messages: at least one message is required")
	}
	out := make([]engine.Message, 0, len(r.Messages)+1)
	size := 0
	if !core.IsNull(r.System) {
		sys, ferr := blocksText(r.System, "system")
		if ferr != nil {
			return nil, 0, ferr
		}
		if sys != "" {
			out = append(out, engine.Message{Role: "system", Content: sys})
			size += len(sys)
		}
	}
	lastUser := -1
	for i, m := range r.Messages {
		if m.Role == "user" {
			lastUser = i
		}
	}
	for i, m := range r.Messages {
		field := "messages[" + strconv.Itoa(i) + "]"
		switch m.Role {
		case "user", "assistant":
			if m.ClearAt != "" || m.OutputConfig != nil {
				f := field + ".clear_at"
				if m.ClearAt == "" {
					f = field + ".output_config"
				}
				return nil, 0, core.Bad(f, f+": only on messages with role 'system'")
			}
		case "system":
			msg, ferr := systemMessage(m, field, i < lastUser)
			if ferr != nil {
				return nil, 0, ferr
			}
			if msg != nil {
				out = append(out, *msg)
				size += len(msg.Content)
			}
			continue
		default:
			return nil, 0, core.Bad(field+".role", field+".role: must be 'user', 'assistant' or 'system', not '"+m.Role+"'")
		}
		if m.Role == "assistant" && i == len(r.Messages)-1 {
			return nil, 0, core.Bad(field+".role", field+": a final assistant message (a prefill to continue) is not supported by this server")
		}
		if core.IsNull(m.Content) {
			return nil, 0, core.Bad(field+".content", field+".content: Field required")
		}
		var s string
		if jsonv2.Unmarshal(m.Content, &s) == nil {
			out = append(out, engine.Message{Role: m.Role, Content: s})
			size += len(s)
			continue
		}
		var blocks []jsontext.Value
		if jsonv2.Unmarshal(m.Content, &blocks) != nil {
			return nil, 0, core.Bad(field+".content", field+".content: must be a string or an array of content blocks")
		}
		var n int
		var ferr *core.FieldError
		if m.Role == "user" {
			out, n, ferr = userBlocks(out, blocks, field+".content")
		} else {
			out, n, ferr = assistantBlocks(out, blocks, field+".content")
		}
		if ferr != nil {
			return nil, 0, ferr
		}
		size += n
	}
	return out, size, nil
}

// systemMessage converts a message with role "system" (beta) into a system message
// in its place, or nil when clear_at "next_user_message" has cleared it (userAfter:
// a user message follows it). Its content is a string or text blocks.
func systemMessage(m InputMessage, field string, userAfter bool) (*engine.Message, *core.FieldError) {
	switch m.ClearAt {
	case "", "never", "next_user_message":
	default:
		return nil, core.Bad(field+".clear_at", field+".clear_at: must be 'never' or 'next_user_message'")
	}
	if oc := m.OutputConfig; oc != nil && oc.Effort != nil && !core.OneOf(*oc.Effort, "low", "medium", "high", "xhigh", "max") {
		return nil, core.Bad(field+".output_config.effort", field+".output_config.effort: must be 'low', 'medium', 'high', 'xhigh' or 'max'")
	}
	text := ""
	if !core.IsNull(m.Content) {
		var ferr *core.FieldError
		if text, ferr = blocksText(m.Content, field+".content"); ferr != nil {
			return nil, ferr
		}
	} else if m.OutputConfig == nil {
		return nil, core.Bad(field+".content", field+".content: Field required")
	}
	if text == "" || (m.ClearAt == "next_user_message" && userAfter) {
		return nil, nil
	}
	return &engine.Message{Role: "system", Content: text}, nil
}

// blockTypeOf reads a content block's type (unknown members allowed: the block is
// decoded strictly once its type is known).
func blockTypeOf(raw jsontext.Value, field string) (string, *core.FieldError) {
	var bt blockType
	if err := jsonv2.Unmarshal(raw, &bt); err != nil || bt.Type == "" {
		return "", core.Bad(field+".type", field+": a content block is an object with a type")
	}
	return bt.Type, nil
}

// unsupportedBlock refuses a block of a type the server does not serve, naming it.
func unsupportedBlock(field, typ string) *core.FieldError {
	switch typ {
	case "image", "document", "search_result", "container_upload", "tool_addition", "tool_removal":
		return core.Bad(field, field+": content blocks of type '"+typ+"' are not supported by this server (text only)")
	}
	return core.Bad(field+".type", field+": content blocks of type '"+typ+"' are not supported here")
}

// blocksText reads a string or an array of text blocks (a system prompt, a tool
// result's content) as one text.
func blocksText(raw jsontext.Value, field string) (string, *core.FieldError) {
	var s string
	if jsonv2.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var blocks []jsontext.Value
	if jsonv2.Unmarshal(raw, &blocks) != nil {
		return "", core.Bad(field, field+": must be a string or an array of text blocks")
	}
	var text joined
	for k, raw := range blocks {
		f := field + "[" + strconv.Itoa(k) + "]"
		typ, ferr := blockTypeOf(raw, f)
		if ferr != nil {
			return "", ferr
		}
		if typ != "text" {
			return "", unsupportedBlock(f, typ)
		}
		if _, ferr := text.add(raw, f); ferr != nil {
			return "", ferr
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
func (j *joined) add(raw jsontext.Value, f string) (int, *core.FieldError) {
	var tb textBlock
	if ferr := core.Strict(raw, &tb, f); ferr != nil {
		return 0, ferr
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
func userBlocks(out []engine.Message, blocks []jsontext.Value, field string) ([]engine.Message, int, *core.FieldError) {
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
		typ, ferr := blockTypeOf(raw, f)
		if ferr != nil {
			return nil, 0, ferr
		}
		switch typ {
		case "text":
			n, ferr := text.add(raw, f)
			if ferr != nil {
				return nil, 0, ferr
			}
			size += n
		case "tool_result":
			var tr toolResultBlock
			if ferr := core.Strict(raw, &tr, f); ferr != nil {
				return nil, 0, ferr
			}
			if tr.ToolUseID == "" {
				return nil, 0, core.Bad(f+".tool_use_id", f+".tool_use_id: Field required")
			}
			content := ""
			if !core.IsNull(tr.Content) {
				if content, ferr = blocksText(tr.Content, f+".content"); ferr != nil {
					return nil, 0, ferr
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
func assistantBlocks(out []engine.Message, blocks []jsontext.Value, field string) ([]engine.Message, int, *core.FieldError) {
	m := engine.Message{Role: "assistant"}
	var text joined
	size := 0
	for k, raw := range blocks {
		f := field + "[" + strconv.Itoa(k) + "]"
		typ, ferr := blockTypeOf(raw, f)
		if ferr != nil {
			return nil, 0, ferr
		}
		switch typ {
		case "text":
			n, ferr := text.add(raw, f)
			if ferr != nil {
				return nil, 0, ferr
			}
			size += n
		case "tool_use":
			var tu toolUseBlock
			if ferr := core.Strict(raw, &tu, f); ferr != nil {
				return nil, 0, ferr
			}
			if tu.ID == "" {
				return nil, 0, core.Bad(f+".id", f+".id: Field required")
			}
			if tu.Name == "" {
				return nil, 0, core.Bad(f+".name", f+".name: Field required")
			}
			args := bytes.TrimSpace(tu.Input)
			if core.IsNull(args) {
				args = []byte("{}")
			} else if args[0] != '{' {
				return nil, 0, core.Bad(f+".input", f+".input: must be an object")
			}
			m.ToolCalls = append(m.ToolCalls, engine.ToolCall{ID: tu.ID, Name: tu.Name, Arguments: string(args)})
			size += len(tu.ID) + len(tu.Name) + len(args)
		case "thinking", "redacted_thinking":
			var tb thinkingBlock
			if ferr := core.Strict(raw, &tb, f); ferr != nil {
				return nil, 0, ferr
			}
		default:
			return nil, 0, unsupportedBlock(f, typ)
		}
	}
	m.Content = text.b.String()
	return append(out, m), size, nil
}

// ChatFeatures are the Messages API's tools, tool_choice and output_config
// translated into the chat request's members (JSON text; nil: absent), for the
// chat decoder to check; its errors name the chat request's fields, which Rename
// turns into this API's.
type ChatFeatures struct {
	Tools             jsontext.Value // tools: function tools, parameters the input_schema
	ToolChoice        jsontext.Value // tool_choice: any is "required", tool a named function
	ParallelToolCalls *bool          // !disable_parallel_tool_use
	ResponseFormat    jsontext.Value // output_config.format: a strict json_schema
}

// ChatFeatures translates tools, tool_choice and output_config into the chat
// request's tools, tool_choice, parallel_tool_calls and response_format. What the
// server does not serve (a server tool) or a shape the API does not have is an
// error naming the field.
func (r *Request) ChatFeatures() (ChatFeatures, *core.FieldError) {
	q := ChatFeatures{}
	if len(r.Tools) > 0 {
		tools := []byte{'['}
		n := 0
		for i, raw := range r.Tools {
			f := "tools[" + strconv.Itoa(i) + "]"
			var bt blockType
			if err := jsonv2.Unmarshal(raw, &bt); err != nil {
				return ChatFeatures{}, core.Bad(f, f+": a tool is an object")
			}
			if bt.Type != "" && bt.Type != "custom" {
				return ChatFeatures{}, core.Bad(f+".type", f+".type: the server tool '"+bt.Type+"' is not supported by this server (client tools only)")
			}
			var t Tool
			if ferr := core.Strict(raw, &t, f); ferr != nil {
				return ChatFeatures{}, ferr
			}
			if t.Name == "" {
				return ChatFeatures{}, core.Bad(f+".name", f+".name: Field required")
			}
			if core.IsNull(t.InputSchema) {
				return ChatFeatures{}, core.Bad(f+".input_schema", f+".input_schema: Field required")
			}
			if t.DefersLoad != nil && *t.DefersLoad {
				continue // the API keeps it out of the model's context until a tool search loads it
			}
			if n > 0 {
				tools = append(tools, ',')
			}
			n++
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
		if n > 0 {
			q.Tools = append(tools, ']')
		}
	}
	if tc := r.ToolChoice; tc != nil {
		if tc.Name != "" && tc.Type != "tool" {
			return ChatFeatures{}, core.Bad("tool_choice.name", "tool_choice.name: only with type 'tool'")
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
				return ChatFeatures{}, core.Bad("tool_choice.name", "tool_choice.name: Field required for type 'tool'")
			}
			v := jsonenc.AppendString([]byte(`{"type":"function","function":{"name":`), tc.Name)
			q.ToolChoice = append(v, "}}"...)
		default:
			return ChatFeatures{}, core.Bad("tool_choice.type", "tool_choice.type: must be 'auto', 'any', 'tool' or 'none'")
		}
		if tc.DisableParallelToolUse != nil {
			par := !*tc.DisableParallelToolUse
			q.ParallelToolCalls = &par
		}
	}
	if oc := r.OutputConfig; oc != nil {
		if oc.Effort != nil && !core.OneOf(*oc.Effort, "low", "medium", "high", "xhigh", "max") {
			return ChatFeatures{}, core.Bad("output_config.effort", "output_config.effort: must be 'low', 'medium', 'high', 'xhigh' or 'max'")
		}
		if f := oc.Format; f != nil {
			if f.Type != "json_schema" {
				return ChatFeatures{}, core.Bad("output_config.format.type", "output_config.format.type: must be 'json_schema'")
			}
			if core.IsNull(f.Schema) {
				return ChatFeatures{}, core.Bad("output_config.format.schema", "output_config.format.schema: Field required")
			}
			rf := append([]byte(`{"type":"json_schema","json_schema":{"name":"output","strict":true,"schema":`), f.Schema...)
			q.ResponseFormat = append(rf, "}}"...)
		}
	}
	return q, nil
}

// Rename renames the field (param) of an error about the chat request's tools,
// tool_choice or response_format, which the Messages API's are translated into
// (ChatFeatures), in param and msg alike: tools[i].function.parameters is
// tools[i].input_schema, tools[i].function.name tools[i].name,
// response_format.json_schema.schema output_config.format.schema. Other fields
// are returned as they are.
func Rename(param, msg string) (string, string) {
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
	p := rename(param)
	if p == param {
		return param, msg
	}
	return p, strings.ReplaceAll(msg, param, p)
}

// AppendCountTokens appends count_tokens' answer: {"input_tokens":n}.
func AppendCountTokens(b []byte, n int) []byte {
	b = append(b, `{"input_tokens":`...)
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '}')
}
