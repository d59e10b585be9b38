package gateway

import (
	"bytes"
	"math"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/gateway/core"
)

// apiError is an error in OpenAI's shape with its HTTP status.
type apiError struct {
	status  int
	typ     string // "invalid_request_error", ...
	code    string // "" for null
	param   string // "" for null
	message string
	retry   int    // Retry-After seconds; 0: none
	reason  string // for the rejections metric
}

func (e *apiError) Error() string { return e.message }

func badRequest(param, msg string) *apiError {
	return &apiError{status: 400, typ: "invalid_request_error", param: param, message: msg, reason: "bad_request"}
}

// lmliteFields are the routing fields of the body's "lmlite" object.
type lmliteFields = core.LMLiteFields

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// commonParams are the parameters shared by chat and text completions. Parameters the
// server does not support are decoded so that a non-default value can be refused by
// name; an unknown name is refused by the decoder.
type commonParams struct {
	Model            string         `json:"model"`
	MaxTokens        *int           `json:"max_tokens"`
	Temperature      *float64       `json:"temperature"`
	TopP             *float64       `json:"top_p"`
	Stop             jsontext.Value `json:"stop"`
	Seed             *int64         `json:"seed"`
	PresencePenalty  *float64       `json:"presence_penalty"`
	FrequencyPenalty *float64       `json:"frequency_penalty"`
	Stream           bool           `json:"stream"`
	StreamOptions    *streamOptions `json:"stream_options"`
	N                *int           `json:"n"`
	User             string         `json:"user"`              // kept hashed with the usage record (identifiers.go)
	SafetyIdentifier string         `json:"safety_identifier"` // kept hashed with the usage record (identifiers.go)
	PromptCacheKey   string         `json:"prompt_cache_key"`  // an affinity hint: the same key, the same replica (per tenant)
	LogitBias        jsontext.Value `json:"logit_bias"`
	LMLite           *lmliteFields  `json:"lmlite"`

	// Sampling extensions (as vLLM names them).
	TopK              *int     `json:"top_k"`
	MinP              *float64 `json:"min_p"`
	RepetitionPenalty *float64 `json:"repetition_penalty"`
	IgnoreEOS         *bool    `json:"ignore_eos"`
}

// chatRequest is the body of POST /v1/chat/completions.
type chatRequest struct {
	commonParams
	Messages            []chatMessage  `json:"messages"`
	MaxCompletionTokens *int           `json:"max_completion_tokens"`
	Logprobs            *bool          `json:"logprobs"`
	TopLogprobs         *int           `json:"top_logprobs"`
	Tools               jsontext.Value `json:"tools"`
	ToolChoice          jsontext.Value `json:"tool_choice"`
	Functions           jsontext.Value `json:"functions"`
	FunctionCall        jsontext.Value `json:"function_call"`
	ParallelToolCalls   *bool          `json:"parallel_tool_calls"`
	ResponseFormat      jsontext.Value `json:"response_format"`
	Audio               jsontext.Value `json:"audio"`
	Modalities          []string       `json:"modalities"`
	Prediction          jsontext.Value `json:"prediction"`
	ReasoningEffort     *string        `json:"reasoning_effort"` // accepted; no model here reasons (a no-op)
	Verbosity           *string        `json:"verbosity"`        // accepted; a no-op
	WebSearchOptions    jsontext.Value `json:"web_search_options"`
	Store               *bool          `json:"store"`
	Metadata            map[string]any `json:"metadata"`
	ServiceTier         string         `json:"service_tier"`
}

type chatMessage struct {
	Role       string         `json:"role"`
	Content    jsontext.Value `json:"content"`
	Name       string         `json:"name"`
	ToolCalls  jsontext.Value `json:"tool_calls"`
	ToolCallID string         `json:"tool_call_id"`
	Refusal    jsontext.Value `json:"refusal"`
	// FunctionCall is the legacy (functions API) form of one tool call, on an
	// assistant message; its result comes back in a message with role "function".
	FunctionCall *legacyCall `json:"function_call"`
}

// legacyCall is a function call of the deprecated functions API.
type legacyCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// legacyCallID is the tool-call id a legacy function call and its result share when
// they are rendered as a tool call and a tool message: the functions API has no ids.
func legacyCallID(name string) string { return "call_" + name }

// completionRequest is the body of POST /v1/completions.
type completionRequest struct {
	commonParams
	Prompt   jsontext.Value `json:"prompt"`
	Echo     *bool          `json:"echo"`
	BestOf   *int           `json:"best_of"`
	Suffix   *string        `json:"suffix"`
	Logprobs *int           `json:"logprobs"`
	// Prediction is Predicted Outputs (prediction.go), as on chat completions.
	Prediction jsontext.Value `json:"prediction"`
}

// decodeBody checks the body's encoding and decodes it strictly into v
// (core.DecodeBody).
func decodeBody(body []byte, v any) *apiError { return fieldError(core.DecodeBody(body, v)) }

// strictJSON refuses members the request types do not have (core.StrictJSON).
var strictJSON = core.StrictJSON

// fieldError is a codec's field error as the gateway's 400 (nil for nil).
func fieldError(e *core.FieldError) *apiError {
	if e == nil {
		return nil
	}
	return badRequest(e.Param, e.Message)
}

func isNull(r jsontext.Value) bool { return core.IsNull(r) }

func isEmptyList(r jsontext.Value) bool {
	t := bytes.TrimSpace(r)
	return isNull(r) || bytes.Equal(t, []byte("[]"))
}

// sampling checks the common sampling parameters and returns the engine's settings.
// seed is used when the request has none.
func (p *commonParams) sampling(seed uint64) (s engine.Sampling, stop []string, aerr *apiError) {
	s = engine.Sampling{Temperature: 1, Seed: seed}
	if p.Model == "" {
		return s, nil, badRequest("model", "you must provide a model parameter")
	}
	if p.N != nil && (*p.N < 1 || *p.N > engine.MaxChoices) {
		return s, nil, badRequest("n", "n must be between 1 and "+strconv.Itoa(engine.MaxChoices))
	}
	if t := p.TopK; t != nil {
		if *t < 0 && *t != -1 {
			return s, nil, badRequest("top_k", "top_k must be ≥ 0 (0 or -1: off)")
		}
		s.TopK = max(*t, 0)
	}
	if t := p.MinP; t != nil {
		if !(*t >= 0 && *t <= 1) {
			return s, nil, badRequest("min_p", "min_p must be between 0 and 1")
		}
		s.MinP = float32(*t)
	}
	if t := p.RepetitionPenalty; t != nil {
		if !(*t > 0 && *t <= 10) {
			return s, nil, badRequest("repetition_penalty", "repetition_penalty must be in (0, 10]")
		}
		s.RepeatPenalty = float32(*t)
	}
	if p.IgnoreEOS != nil {
		s.IgnoreEOS = *p.IgnoreEOS
	}
	if s.LogitBias, aerr = parseLogitBias(p.LogitBias); aerr != nil {
		return s, nil, aerr
	}
	if t := p.Temperature; t != nil {
		if !(*t >= 0 && *t <= 2) {
			return s, nil, badRequest("temperature", "temperature must be between 0 and 2")
		}
		s.Temperature = float32(*t)
	}
	if t := p.TopP; t != nil {
		if !(*t > 0 && *t <= 1) {
			return s, nil, badRequest("top_p", "top_p must be in (0, 1]")
		}
		s.TopP = float32(*t)
	}
	if t := p.PresencePenalty; t != nil {
		if !(*t >= -2 && *t <= 2) {
			return s, nil, badRequest("presence_penalty", "presence_penalty must be between -2 and 2")
		}
		s.PresencePenalty = float32(*t)
	}
	if t := p.FrequencyPenalty; t != nil {
		if !(*t >= -2 && *t <= 2) {
			return s, nil, badRequest("frequency_penalty", "frequency_penalty must be between -2 and 2")
		}
		s.FrequencyPenalty = float32(*t)
	}
	if p.Seed != nil {
		s.Seed = uint64(*p.Seed)
	}
	if p.StreamOptions != nil && !p.Stream {
		return s, nil, badRequest("stream_options", "stream_options is only allowed when stream is true")
	}
	if stop, aerr = parseStop(p.Stop); aerr != nil {
		return s, nil, aerr
	}
	return s, stop, nil
}

func parseStop(raw jsontext.Value) ([]string, *apiError) {
	if isNull(raw) {
		return nil, nil
	}
	var one string
	if jsonv2.Unmarshal(raw, &one) == nil {
		if one == "" {
			return nil, nil
		}
		return []string{one}, nil
	}
	var many []string
	if err := jsonv2.Unmarshal(raw, &many); err != nil {
		return nil, badRequest("stop", "stop must be a string or an array of strings")
	}
	if len(many) > 4 {
		return nil, badRequest("stop", "stop may hold at most 4 sequences")
	}
	out := many[:0]
	for _, s := range many {
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// maxTokens returns the requested output limit (0: none given).
func maxTokensOf(a, b *int, nameA, nameB string) (int, *apiError) {
	n := 0
	name := nameA
	if a != nil {
		n = *a
	}
	if b != nil {
		n, name = *b, nameB
	}
	if (a != nil || b != nil) && n < 1 {
		return 0, badRequest(name, name+" must be at least 1")
	}
	return n, nil
}

// unsupported refuses the chat parameters the server does not implement, and checks
// the ones it accepts without acting on them (reasoning_effort, verbosity, store,
// metadata).
func (r *chatRequest) unsupported() *apiError {
	refuse := func(name string) *apiError {
		return badRequest(name, name+" is not supported by this server")
	}
	switch {
	case !isNull(r.Audio):
		return refuse("audio")
	case len(r.Modalities) > 1 || (len(r.Modalities) == 1 && r.Modalities[0] != "text"):
		return refuse("modalities")
	case !isNull(r.WebSearchOptions):
		return refuse("web_search_options")
	case !isEmptyList(r.Functions) && !isEmptyList(r.Tools):
		return badRequest("functions", "functions (deprecated) and tools cannot be given together; use tools")
	case !isNull(r.FunctionCall) && !isNull(r.ToolChoice):
		return badRequest("function_call", "function_call (deprecated) and tool_choice cannot be given together; use tool_choice")
	case r.ReasoningEffort != nil && !oneOf(*r.ReasoningEffort, "none", "minimal", "low", "medium", "high"):
		return badRequest("reasoning_effort", "reasoning_effort must be none, minimal, low, medium or high")
	case r.Verbosity != nil && !oneOf(*r.Verbosity, "low", "medium", "high"):
		return badRequest("verbosity", "verbosity must be low, medium or high")
	case r.Metadata != nil:
		return checkAnyMetadata(r.Metadata) // OpenAI's limits, as a batch's (batchquota.go)
	}
	return nil
}

func oneOf(s string, set ...string) bool { return core.OneOf(s, set...) }

// messages converts the chat messages for the chat template.
func (r *chatRequest) messages() ([]engine.Message, int, *apiError) {
	if len(r.Messages) == 0 {
		return nil, 0, badRequest("messages", "messages must be a non-empty array")
	}
	out := make([]engine.Message, len(r.Messages))
	size := 0
	for i, m := range r.Messages {
		field := "messages[" + strconv.Itoa(i) + "]"
		switch m.Role {
		case "system", "user", "assistant":
		case "developer":
			m.Role = "system"
		case "tool":
			if m.ToolCallID == "" {
				return nil, 0, badRequest(field+".tool_call_id", "a message with role 'tool' needs a tool_call_id")
			}
		case "function": // the functions API's result of a call: a tool message
			if m.Name == "" {
				return nil, 0, badRequest(field+".name", "a message with role 'function' needs the function's name")
			}
			m.Role, m.ToolCallID = "tool", legacyCallID(m.Name)
		default:
			return nil, 0, badRequest(field+".role", "invalid role '"+m.Role+"'")
		}
		if m.Role != "tool" && m.ToolCallID != "" {
			return nil, 0, badRequest(field+".tool_call_id", "tool_call_id belongs to messages with role 'tool'")
		}
		text, err := contentText(m.Content, field+".content")
		if err != nil {
			return nil, 0, err
		}
		out[i] = engine.Message{Role: m.Role, Content: text, ToolCallID: m.ToolCallID, Name: m.Name}
		if m.FunctionCall != nil {
			if m.Role != "assistant" {
				return nil, 0, badRequest(field+".function_call", "function_call belongs to messages with role 'assistant'")
			}
			if !isEmptyList(m.ToolCalls) {
				return nil, 0, badRequest(field+".function_call", "a message holds function_call or tool_calls, not both")
			}
			if m.FunctionCall.Name == "" {
				return nil, 0, badRequest(field+".function_call.name", "a function call needs a name")
			}
			fc := m.FunctionCall
			out[i].ToolCalls = []engine.ToolCall{{ID: legacyCallID(fc.Name), Name: fc.Name, Arguments: fc.Arguments}}
			size += len(fc.Name)*2 + len(fc.Arguments)
		}
		if !isEmptyList(m.ToolCalls) {
			if m.Role != "assistant" {
				return nil, 0, badRequest(field+".tool_calls", "tool_calls belong to messages with role 'assistant'")
			}
			calls, aerr := parseToolCalls(m.ToolCalls, field+".tool_calls")
			if aerr != nil {
				return nil, 0, aerr
			}
			out[i].ToolCalls = calls
			for _, c := range calls {
				size += len(c.ID) + len(c.Name) + len(c.Arguments)
			}
		}
		size += len(text)
	}
	return out, size, nil
}

// contentText accepts a string or an array of text parts.
func contentText(raw jsontext.Value, field string) (string, *apiError) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if jsonv2.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := jsonv2.Unmarshal(raw, &parts); err != nil {
		return "", badRequest(field, "content must be a string or an array of text parts")
	}
	var b strings.Builder
	for i, p := range parts {
		if p.Type != "text" {
			return "", badRequest(field+"["+strconv.Itoa(i)+"].type", "content part type '"+p.Type+"' is not supported by this server")
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// unsupported refuses the text-completion parameters the server does not implement.
func (r *completionRequest) unsupported() *apiError {
	switch {
	case r.BestOf != nil && *r.BestOf != 1:
		return badRequest("best_of", "best_of is not supported by this server (use n for several choices)")
	case r.Suffix != nil && *r.Suffix != "":
		return badRequest("suffix", "suffix is not supported by this server")
	case r.Logprobs != nil && (*r.Logprobs < 0 || *r.Logprobs > engine.MaxTopLogprobs):
		return badRequest("logprobs", "logprobs must be between 0 and "+strconv.Itoa(engine.MaxTopLogprobs))
	}
	return nil
}

// promptText returns the prompt: a string or an array holding one string.
func (r *completionRequest) promptText() (string, *apiError) {
	if isNull(r.Prompt) {
		return "", badRequest("prompt", "you must provide a prompt")
	}
	var s string
	if jsonv2.Unmarshal(r.Prompt, &s) == nil {
		return s, nil
	}
	var many []string
	if jsonv2.Unmarshal(r.Prompt, &many) == nil {
		if len(many) == 1 {
			return many[0], nil
		}
		return "", badRequest("prompt", "a prompt array must hold exactly one string (batched prompts are not supported)")
	}
	return "", badRequest("prompt", "prompt must be a string, an array of token ids, or an array holding one of these")
}

// validFloat reports whether f is a finite number ≥ 0.
func validFloat(f float64) bool { return f >= 0 && !math.IsInf(f, 0) }

// wire is e as a codec renders it (gateway/core's Error); nil for nil.
func (e *apiError) wire() *core.Error {
	if e == nil {
		return nil
	}
	return &core.Error{Status: e.status, Type: e.typ, Code: e.code, Param: e.param, Message: e.message}
}
