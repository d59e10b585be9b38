package gateway

import (
	"math/rand/v2"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/gateway/core"
	"github.com/lmlite/lmlite/gateway/openai"
)

type kind int8

const (
	kindChat kind = iota
	kindCompletion
)

// input is the core request: what a request asks for, decoded and validated from
// its body by its codec (codec.decode), the first step of the request path, before
// anything is routed or spent. Every wire format fills the same fields; the core
// reads nothing of the body but these.
type input struct {
	kind kind          // kindChat for every chat-shaped format (messages through the chat template)
	p    *commonParams // model, user, lmlite routing fields, prompt_cache_key, the sampling parameters as given

	msgs        []engine.Message // chat: the messages
	prompt      string           // completions: the prompt
	promptIDs   []int32          // completions: the prompt given as token ids (nil: text)
	promptBytes int              // the prompt's size in bytes (messages and tools), for estimate
	sampling    engine.Sampling
	stop        []string
	maxTokens   int    // requested; 0: none (but see scoreOnly)
	maxDefault  bool   // maxTokens is the endpoint's default, not the client's (completions: 16)
	scoreOnly   bool   // completions: max_tokens 0 with echo, which scores the prompt (no output token)
	maxField    string // the field that set maxTokens, for errors
	stream      bool
	usage       bool // stream_options.include_usage
	feat        features
	resp        *respInput // from /v1/responses: what its output echoes and stores (responses.go)
	prediction  string     // Predicted Outputs' text (prediction.go); "": none
}

// parse decodes and validates a body of OpenAI's chat (kindChat) or completions
// (kindCompletion), as their codecs do. The body's size is checked before (fasthttp
// refuses a body over max_body_bytes with 413, handleConnError).
func (in *input) parse(k kind, body []byte) *apiError {
	if k == kindChat {
		return in.decodeChat(body)
	}
	return in.decodeCompletion(body)
}

// decodeChat decodes and validates a chat completions body.
func (in *input) decodeChat(body []byte) *apiError {
	in.kind = kindChat
	r := &chatRequest{}
	if aerr := decodeBody(body, r); aerr != nil {
		return aerr
	}
	return in.fromChat(r)
}

// fromChat fills the core request from a decoded chat completions body: its
// parameters, messages, limits and features (tools, response format, logprobs, n),
// then chatTail. A codec that translates its format into a chatRequest calls it.
func (in *input) fromChat(r *chatRequest) *apiError {
	var aerr *apiError
	if aerr = fieldError(r.Unsupported()); aerr != nil {
		return aerr
	}
	in.p = &r.CommonParams
	var fe *core.FieldError
	if in.msgs, in.promptBytes, fe = r.ChatMessages(); fe != nil {
		return fieldError(fe)
	}
	in.maxField = "max_tokens"
	if in.maxTokens, aerr = maxTokensOf(r.MaxTokens, r.MaxCompletionTokens, "max_tokens", "max_completion_tokens"); aerr != nil {
		return aerr
	}
	if r.MaxCompletionTokens != nil {
		in.maxField = "max_completion_tokens"
	}
	if in.feat, aerr = chatFeatures(r, in.msgs); aerr != nil {
		return aerr
	}
	if in.prediction, aerr = parsePrediction(r.Prediction); aerr != nil {
		return aerr
	}
	return in.chatTail()
}

// chatTail completes a chat-shaped request once its codec has filled in.p (the
// model, the routing and sampling parameters, stream and stream_options as a
// commonParams), in.msgs, in.promptBytes (the messages' bytes), in.maxTokens and
// in.maxField (0: none asked) and in.feat (features.n at least 1): the tools count in
// the prompt's size, and the sampling parameters, the stop strings and the stream
// flags are decoded from in.p (errors name commonParams' JSON fields).
func (in *input) chatTail() *apiError {
	in.kind = kindChat
	for _, t := range in.feat.Tools { // the tools are part of the prompt
		in.promptBytes += len(t.Name) + len(t.Description) + len(t.Parameters)
	}
	return in.paramsTail()
}

// paramsTail decodes in.p's sampling parameters, stop strings and stream flags.
func (in *input) paramsTail() *apiError {
	var aerr *apiError
	if in.maxField == "" {
		in.maxField = "max_tokens"
	}
	if in.sampling, in.stop, aerr = sampling(in.p, rand.Uint64()); aerr != nil {
		return aerr
	}
	in.stream = in.p.Stream
	in.usage = in.p.StreamOptions != nil && in.p.StreamOptions.IncludeUsage
	return nil
}

// decodeCompletion decodes and validates a (legacy) completions body.
func (in *input) decodeCompletion(body []byte) *apiError {
	in.kind = kindCompletion
	in.maxField = "max_tokens"
	r := &completionRequest{}
	aerr := decodeBody(body, r)
	if aerr != nil {
		return aerr
	}
	if aerr = fieldError(r.Unsupported()); aerr != nil {
		return aerr
	}
	in.p = &r.CommonParams
	ids, isIDs, fe := openai.ParsePromptIDs(r.Prompt)
	if fe != nil {
		return fieldError(fe)
	}
	if isIDs {
		in.promptIDs, in.promptBytes = ids, 3*len(ids) // estimate reads 3 bytes a token
	} else {
		if in.prompt, fe = r.PromptText(); fe != nil {
			return fieldError(fe)
		}
		in.promptBytes = len(in.prompt)
	}
	in.feat = completionFeatures(r)
	if in.prediction, aerr = parsePrediction(r.Prediction); aerr != nil {
		return aerr
	}
	if isIDs && in.feat.Echo {
		return badRequest("echo", "echo is not supported with a prompt of token ids")
	}
	switch {
	case r.MaxTokens == nil:
		in.maxTokens, in.maxDefault = 16, true // OpenAI's default for completions
	case *r.MaxTokens == 0 && in.feat.Echo:
		in.scoreOnly = true // the prompt echoed with its logprobs, nothing generated
	case *r.MaxTokens == 0:
		return badRequest("max_tokens", "max_tokens must be at least 1 (0 only with echo, to score the prompt)")
	default:
		if in.maxTokens, aerr = maxTokensOf(r.MaxTokens, nil, "max_tokens", ""); aerr != nil {
			return aerr
		}
	}
	return in.paramsTail()
}

// promptField names the request's prompt: messages, or prompt for completions.
func (in *input) promptField() string {
	if in.kind == kindCompletion {
		return "prompt"
	}
	return "messages"
}

// estimate is the prompt-token estimate for the tokens/min quota before a model (and
// so a tokenizer) is chosen: about 3 bytes a token, plus template overhead.
func (in *input) estimate() int {
	return in.promptBytes/3 + 8*max(1, len(in.msgs))
}
