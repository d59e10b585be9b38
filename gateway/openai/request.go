package openai

import (
	"bytes"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/gateway/core"
)

// This file decodes the bodies of chat completions and (legacy) completions: their
// wire types, the sampling parameters, stop strings, output limits, messages and
// prompts, each error a core.FieldError naming the field. The gateway's codecs
// (gateway/parse.go) fill their core request from these and from the request's
// features (features.go).

// StreamOptions is stream_options.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// CommonParams are the parameters shared by chat and text completions. Parameters the
// server does not support are decoded so that a non-default value can be refused by
// name; an unknown name is refused by the decoder.
type CommonParams struct {
	Model            string             `json:"model"`
	MaxTokens        *int               `json:"max_tokens"`
	Temperature      *float64           `json:"temperature"`
	TopP             *float64           `json:"top_p"`
	Stop             jsontext.Value     `json:"stop"`
	Seed             *int64             `json:"seed"`
	PresencePenalty  *float64           `json:"presence_penalty"`
	FrequencyPenalty *float64           `json:"frequency_penalty"`
	Stream           bool               `json:"stream"`
	StreamOptions    *StreamOptions     `json:"stream_options"`
	N                *int               `json:"n"`
	User             string             `json:"user"`              // kept hashed with the usage record (gateway/identifiers.go)
	SafetyIdentifier string             `json:"safety_identifier"` // kept hashed with the usage record (gateway/identifiers.go)
	PromptCacheKey   string             `json:"prompt_cache_key"`  // an affinity hint: the same key, the same replica (per tenant)
	LogitBias        jsontext.Value     `json:"logit_bias"`
	LMLite           *core.LMLiteFields `json:"lmlite"`

	// Sampling extensions (as vLLM names them).
	TopK              *int     `json:"top_k"`
	MinP              *float64 `json:"min_p"`
	RepetitionPenalty *float64 `json:"repetition_penalty"`
	IgnoreEOS         *bool    `json:"ignore_eos"`
}

// ChatRequest is the body of POST /v1/chat/completions.
type ChatRequest struct {
	CommonParams
	Messages            []ChatMessage  `json:"messages"`
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

// ChatMessage is one of a chat request's messages.
type ChatMessage struct {
	Role       string         `json:"role"`
	Content    jsontext.Value `json:"content"`
	Name       string         `json:"name"`
	ToolCalls  jsontext.Value `json:"tool_calls"`
	ToolCallID string         `json:"tool_call_id"`
	Refusal    jsontext.Value `json:"refusal"`
	// FunctionCall is the legacy (functions API) form of one tool call, on an
	// assistant message; its result comes back in a message with role "function".
	FunctionCall *LegacyCall `json:"function_call"`
}

// LegacyCall is a function call of the deprecated functions API.
type LegacyCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// LegacyCallID is the tool-call id a legacy function call and its result share when
// they are rendered as a tool call and a tool message: the functions API has no ids.
func LegacyCallID(name string) string { return "call_" + name }

// CompletionRequest is the body of POST /v1/completions.
type CompletionRequest struct {
	CommonParams
	Prompt   jsontext.Value `json:"prompt"`
	Echo     *bool          `json:"echo"`
	BestOf   *int           `json:"best_of"`
	Suffix   *string        `json:"suffix"`
	Logprobs *int           `json:"logprobs"`
	// Prediction is Predicted Outputs (gateway/prediction.go), as on chat completions.
	Prediction jsontext.Value `json:"prediction"`
}

// IsEmptyList reports whether raw is absent, null or [].
func IsEmptyList(raw jsontext.Value) bool {
	return core.IsNull(raw) || bytes.Equal(bytes.TrimSpace(raw), []byte("[]"))
}

// Sampling checks the common sampling parameters and returns the engine's settings
// and the stop strings. seed is used when the request has none.
func (p *CommonParams) Sampling(seed uint64) (s engine.Sampling, stop []string, fe *core.FieldError) {
	s = engine.Sampling{Temperature: 1, Seed: seed}
	if p.Model == "" {
		return s, nil, core.Bad("model", "you must provide a model parameter")
	}
	if p.N != nil && (*p.N < 1 || *p.N > engine.MaxChoices) {
		return s, nil, core.Bad("n", "n must be between 1 and "+strconv.Itoa(engine.MaxChoices))
	}
	if t := p.TopK; t != nil {
		if *t < 0 && *t != -1 {
			return s, nil, core.Bad("top_k", "top_k must be ≥ 0 (0 or -1: off)")
		}
		s.TopK = max(*t, 0)
	}
	if t := p.MinP; t != nil {
		if !(*t >= 0 && *t <= 1) {
			return s, nil, core.Bad("min_p", "min_p must be between 0 and 1")
		}
		s.MinP = float32(*t)
	}
	if t := p.RepetitionPenalty; t != nil {
		if !(*t > 0 && *t <= 10) {
			return s, nil, core.Bad("repetition_penalty", "repetition_penalty must be in (0, 10]")
		}
		s.RepeatPenalty = float32(*t)
	}
	if p.IgnoreEOS != nil {
		s.IgnoreEOS = *p.IgnoreEOS
	}
	if s.LogitBias, fe = ParseLogitBias(p.LogitBias); fe != nil {
		return s, nil, fe
	}
	if t := p.Temperature; t != nil {
		if !(*t >= 0 && *t <= 2) {
			return s, nil, core.Bad("temperature", "temperature must be between 0 and 2")
		}
		s.Temperature = float32(*t)
	}
	if t := p.TopP; t != nil {
		if !(*t > 0 && *t <= 1) {
			return s, nil, core.Bad("top_p", "top_p must be in (0, 1]")
		}
		s.TopP = float32(*t)
	}
	if t := p.PresencePenalty; t != nil {
		if !(*t >= -2 && *t <= 2) {
			return s, nil, core.Bad("presence_penalty", "presence_penalty must be between -2 and 2")
		}
		s.PresencePenalty = float32(*t)
	}
	if t := p.FrequencyPenalty; t != nil {
		if !(*t >= -2 && *t <= 2) {
			return s, nil, core.Bad("frequency_penalty", "frequency_penalty must be between -2 and 2")
		}
		s.FrequencyPenalty = float32(*t)
	}
	if p.Seed != nil {
		s.Seed = uint64(*p.Seed)
	}
	if p.StreamOptions != nil && !p.Stream {
		return s, nil, core.Bad("stream_options", "stream_options is only allowed when stream is true")
	}
	if stop, fe = ParseStop(p.Stop); fe != nil {
		return s, nil, fe
	}
	return s, stop, nil
}

// ParseStop reads stop: a string or at most 4 strings (empty ones dropped).
func ParseStop(raw jsontext.Value) ([]string, *core.FieldError) {
	if core.IsNull(raw) {
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
		return nil, core.Bad("stop", "stop must be a string or an array of strings")
	}
	if len(many) > 4 {
		return nil, core.Bad("stop", "stop may hold at most 4 sequences")
	}
	out := many[:0]
	for _, s := range many {
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// MaxTokensOf returns the requested output limit (0: none given) of two fields, the
// second (nameB) winning when both are given.
func MaxTokensOf(a, b *int, nameA, nameB string) (int, *core.FieldError) {
	n := 0
	name := nameA
	if a != nil {
		n = *a
	}
	if b != nil {
		n, name = *b, nameB
	}
	if (a != nil || b != nil) && n < 1 {
		return 0, core.Bad(name, name+" must be at least 1")
	}
	return n, nil
}

// Unsupported refuses the chat parameters the server does not implement, and checks
// the ones it accepts without acting on them (reasoning_effort, verbosity, store,
// metadata).
func (r *ChatRequest) Unsupported() *core.FieldError {
	refuse := func(name string) *core.FieldError {
		return core.Bad(name, name+" is not supported by this server")
	}
	switch {
	case !core.IsNull(r.Audio):
		return refuse("audio")
	case len(r.Modalities) > 1 || (len(r.Modalities) == 1 && r.Modalities[0] != "text"):
		return refuse("modalities")
	case !core.IsNull(r.WebSearchOptions):
		return refuse("web_search_options")
	case !IsEmptyList(r.Functions) && !IsEmptyList(r.Tools):
		return core.Bad("functions", "functions (deprecated) and tools cannot be given together; use tools")
	case !core.IsNull(r.FunctionCall) && !core.IsNull(r.ToolChoice):
		return core.Bad("function_call", "function_call (deprecated) and tool_choice cannot be given together; use tool_choice")
	case r.ReasoningEffort != nil && !core.OneOf(*r.ReasoningEffort, "none", "minimal", "low", "medium", "high"):
		return core.Bad("reasoning_effort", "reasoning_effort must be none, minimal, low, medium or high")
	case r.Verbosity != nil && !core.OneOf(*r.Verbosity, "low", "medium", "high"):
		return core.Bad("verbosity", "verbosity must be low, medium or high")
	case r.Metadata != nil:
		return CheckAnyMetadata(r.Metadata) // OpenAI's limits, as a batch's
	}
	return nil
}

// ChatMessages converts the chat messages for the chat template, and says their size
// in bytes (text, tool calls).
func (r *ChatRequest) ChatMessages() ([]engine.Message, int, *core.FieldError) {
	if len(r.Messages) == 0 {
		return nil, 0, core.Bad("messages", "messages must be a non-empty array")
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
				return nil, 0, core.Bad(field+".tool_call_id", "a message with role 'tool' needs a tool_call_id")
			}
		case "function": // the functions API's result of a call: a tool message
			if m.Name == "" {
				return nil, 0, core.Bad(field+".name", "a message with role 'function' needs the function's name")
			}
			m.Role, m.ToolCallID = "tool", LegacyCallID(m.Name)
		default:
			return nil, 0, core.Bad(field+".role", "invalid role '"+m.Role+"'")
		}
		if m.Role != "tool" && m.ToolCallID != "" {
			return nil, 0, core.Bad(field+".tool_call_id", "tool_call_id belongs to messages with role 'tool'")
		}
		text, err := ContentText(m.Content, field+".content")
		if err != nil {
			return nil, 0, err
		}
		out[i] = engine.Message{Role: m.Role, Content: text, ToolCallID: m.ToolCallID, Name: m.Name}
		if m.FunctionCall != nil {
			if m.Role != "assistant" {
				return nil, 0, core.Bad(field+".function_call", "function_call belongs to messages with role 'assistant'")
			}
			if !IsEmptyList(m.ToolCalls) {
				return nil, 0, core.Bad(field+".function_call", "a message holds function_call or tool_calls, not both")
			}
			if m.FunctionCall.Name == "" {
				return nil, 0, core.Bad(field+".function_call.name", "a function call needs a name")
			}
			fc := m.FunctionCall
			out[i].ToolCalls = []engine.ToolCall{{ID: LegacyCallID(fc.Name), Name: fc.Name, Arguments: fc.Arguments}}
			size += len(fc.Name)*2 + len(fc.Arguments)
		}
		if !IsEmptyList(m.ToolCalls) {
			if m.Role != "assistant" {
				return nil, 0, core.Bad(field+".tool_calls", "tool_calls belong to messages with role 'assistant'")
			}
			calls, fe := ParseToolCalls(m.ToolCalls, field+".tool_calls")
			if fe != nil {
				return nil, 0, fe
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

// ContentText accepts a string or an array of text parts.
func ContentText(raw jsontext.Value, field string) (string, *core.FieldError) {
	if core.IsNull(raw) {
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
		return "", core.Bad(field, "content must be a string or an array of text parts")
	}
	var b strings.Builder
	for i, p := range parts {
		if p.Type != "text" {
			return "", core.Bad(field+"["+strconv.Itoa(i)+"].type", "content part type '"+p.Type+"' is not supported by this server")
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

type toolCallParam struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// ParseToolCalls reads an assistant message's tool_calls.
func ParseToolCalls(raw jsontext.Value, field string) ([]engine.ToolCall, *core.FieldError) {
	var tcs []toolCallParam
	if fe := core.Strict(raw, &tcs, field); fe != nil {
		return nil, fe
	}
	out := make([]engine.ToolCall, len(tcs))
	for i, tc := range tcs {
		f := field + "[" + strconv.Itoa(i) + "]"
		if tc.Type != "" && tc.Type != "function" {
			return nil, core.Bad(f+".type", "tool call type must be 'function'")
		}
		if tc.Function.Name == "" {
			return nil, core.Bad(f+".function.name", "a tool call needs a function name")
		}
		out[i] = engine.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments}
	}
	return out, nil
}

// Unsupported refuses the text-completion parameters the server does not implement.
func (r *CompletionRequest) Unsupported() *core.FieldError {
	switch {
	case r.BestOf != nil && *r.BestOf != 1:
		return core.Bad("best_of", "best_of is not supported by this server (use n for several choices)")
	case r.Suffix != nil && *r.Suffix != "":
		return core.Bad("suffix", "suffix is not supported by this server")
	case r.Logprobs != nil && (*r.Logprobs < 0 || *r.Logprobs > engine.MaxTopLogprobs):
		return core.Bad("logprobs", "logprobs must be between 0 and "+strconv.Itoa(engine.MaxTopLogprobs))
	}
	return nil
}

// PromptText returns the prompt: a string or an array holding one string.
func (r *CompletionRequest) PromptText() (string, *core.FieldError) {
	if core.IsNull(r.Prompt) {
		return "", core.Bad("prompt", "you must provide a prompt")
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
		return "", core.Bad("prompt", "a prompt array must hold exactly one string (batched prompts are not supported)")
	}
	return "", core.Bad("prompt", "prompt must be a string, an array of token ids, or an array holding one of these")
}

// MaxLogitBias is the most entries logit_bias may hold (OpenAI's limit).
const MaxLogitBias = 300

// ParseLogitBias reads logit_bias: an object from token ids (decimal strings, as
// OpenAI's) to a bias in [-100, 100]. The result is sorted by id. Whether the ids
// are in a model's vocabulary is checked per model (the gateway's checkTokenIDs).
func ParseLogitBias(raw jsontext.Value) ([]engine.TokenBias, *core.FieldError) {
	if core.IsNull(raw) {
		return nil, nil
	}
	var m map[string]float64
	if err := jsonv2.Unmarshal(raw, &m); err != nil {
		return nil, core.Bad("logit_bias", "logit_bias must be an object from token ids to numbers between -100 and 100")
	}
	if len(m) > MaxLogitBias {
		return nil, core.Bad("logit_bias", "logit_bias may hold at most "+strconv.Itoa(MaxLogitBias)+" tokens")
	}
	out := make([]engine.TokenBias, 0, len(m))
	for k, v := range m {
		id, err := strconv.ParseInt(k, 10, 32)
		if err != nil || id < 0 {
			return nil, core.Bad("logit_bias", "logit_bias: '"+truncate(k, 32)+"' is not a token id (a non-negative integer)")
		}
		if !(v >= -100 && v <= 100) || math.IsNaN(v) {
			return nil, core.Bad("logit_bias", "logit_bias: the bias of token "+k+" must be between -100 and 100")
		}
		out = append(out, engine.TokenBias{ID: int32(id), Bias: float32(v)})
	}
	slices.SortFunc(out, func(a, b engine.TokenBias) int { return int(a.ID - b.ID) })
	return out, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// ParsePromptIDs reads a prompt given as token ids: an array of integers, or an
// array holding one such array (several prompts are refused, as several strings
// are). ok is false when the prompt is not of this shape (a string, strings).
func ParsePromptIDs(raw jsontext.Value) (ids []int32, ok bool, fe *core.FieldError) {
	var one []int64
	if jsonv2.Unmarshal(raw, &one) != nil {
		var many [][]int64
		if jsonv2.Unmarshal(raw, &many) != nil {
			return nil, false, nil
		}
		if len(many) != 1 {
			return nil, true, core.Bad("prompt", "a prompt array must hold exactly one prompt (batched prompts are not supported)")
		}
		one = many[0]
	}
	if len(one) == 0 {
		return nil, true, core.Bad("prompt", "a prompt of token ids must hold at least one token")
	}
	ids = make([]int32, len(one))
	for i, x := range one {
		if x < 0 || x > math.MaxInt32 {
			return nil, true, core.Bad("prompt", "prompt["+strconv.Itoa(i)+"]: "+strconv.FormatInt(x, 10)+" is not a token id")
		}
		ids[i] = int32(x)
	}
	return ids, true, nil
}

// OpenAI's metadata limits.
const (
	maxMetadataKeys     = 16
	maxMetadataKeyLen   = 64  // characters
	maxMetadataValueLen = 512 // characters
)

// CheckMetadata holds metadata to OpenAI's limits: at most 16 keys, each at most 64
// characters, each value at most 512; the error names the field.
func CheckMetadata(md map[string]string) *core.FieldError {
	if len(md) > maxMetadataKeys {
		return tooManyMetadataKeys(len(md))
	}
	for k, v := range md {
		if n := utf8.RuneCountInString(k); n > maxMetadataKeyLen {
			return core.Bad("metadata", "a metadata key is "+strconv.Itoa(n)+" characters long; at most "+strconv.Itoa(maxMetadataKeyLen)+" are allowed")
		}
		if n := utf8.RuneCountInString(v); n > maxMetadataValueLen {
			return core.Bad("metadata."+k, "metadata."+k+" is "+strconv.Itoa(n)+" characters long; at most "+strconv.Itoa(maxMetadataValueLen)+" are allowed")
		}
	}
	return nil
}

func tooManyMetadataKeys(n int) *core.FieldError {
	return core.Bad("metadata", "metadata has "+strconv.Itoa(n)+" keys; at most "+strconv.Itoa(maxMetadataKeys)+" are allowed")
}

// CheckAnyMetadata is CheckMetadata of a request's decoded metadata (a chat
// completion's, a response's): its values must be strings.
func CheckAnyMetadata(md map[string]any) *core.FieldError {
	if len(md) > maxMetadataKeys {
		return tooManyMetadataKeys(len(md))
	}
	ss := make(map[string]string, len(md))
	for k, v := range md {
		s, ok := v.(string)
		if !ok {
			got := map[bool]string{true: "null"}[v == nil]
			switch v.(type) {
			case float64:
				got = "a number"
			case bool:
				got = "a boolean"
			case map[string]any:
				got = "an object"
			case []any:
				got = "an array"
			}
			return core.Bad("metadata."+k, "metadata."+k+" must be a string, not "+got+" (metadata values are strings, as OpenAI's)")
		}
		ss[k] = s
	}
	return CheckMetadata(ss)
}
