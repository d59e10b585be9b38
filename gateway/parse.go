package gateway

import (
	"math/rand/v2"

	"github.com/lmlite/lmlite/engine"
)

type kind int8

const (
	kindChat kind = iota
	kindCompletion
)

// input is what a request asks for, decoded and validated from its body: the first
// step of the request path, before anything is routed or spent.
type input struct {
	kind kind
	chat *chatRequest       // kindChat
	comp *completionRequest // kindCompletion
	p    *commonParams      // the parameters both share

	msgs        []engine.Message // chat: the messages
	prompt      string           // completions: the prompt
	promptIDs   []int32          // completions: the prompt given as token ids (nil: text)
	promptBytes int
	sampling    engine.Sampling
	stop        []string
	maxTokens   int    // requested; 0: none (but see scoreOnly)
	scoreOnly   bool   // completions: max_tokens 0 with echo, which scores the prompt (no output token)
	maxField    string // the field that set maxTokens, for errors
	stream      bool
	usage       bool // stream_options.include_usage
	feat        features
	resp        *respInput // from /v1/responses: what its output echoes and stores (responses.go)
}

// parse decodes and validates a body of the given kind. The body's size is checked
// before (fasthttp refuses a body over max_body_bytes with 413, handleConnError).
func (in *input) parse(k kind, body []byte) *apiError {
	in.kind = k
	seed := rand.Uint64()
	var aerr *apiError
	in.maxField = "max_tokens"
	if k == kindChat {
		r := &chatRequest{}
		if aerr = decodeBody(body, r); aerr != nil {
			return aerr
		}
		if aerr = r.unsupported(); aerr != nil {
			return aerr
		}
		in.chat, in.p = r, &r.commonParams
		if in.msgs, in.promptBytes, aerr = r.messages(); aerr != nil {
			return aerr
		}
		if in.maxTokens, aerr = maxTokensOf(r.MaxTokens, r.MaxCompletionTokens, "max_tokens", "max_completion_tokens"); aerr != nil {
			return aerr
		}
		if r.MaxCompletionTokens != nil {
			in.maxField = "max_completion_tokens"
		}
		if in.feat, aerr = r.features(in.msgs); aerr != nil {
			return aerr
		}
		for _, t := range in.feat.tools { // the tools are part of the prompt
			in.promptBytes += len(t.Name) + len(t.Description) + len(t.Parameters)
		}
	} else {
		r := &completionRequest{}
		if aerr = decodeBody(body, r); aerr != nil {
			return aerr
		}
		if aerr = r.unsupported(); aerr != nil {
			return aerr
		}
		in.comp, in.p = r, &r.commonParams
		ids, isIDs, aerr := parsePromptIDs(r.Prompt)
		if aerr != nil {
			return aerr
		}
		if isIDs {
			in.promptIDs, in.promptBytes = ids, 3*len(ids) // estimate reads 3 bytes a token
		} else {
			if in.prompt, aerr = r.promptText(); aerr != nil {
				return aerr
			}
			in.promptBytes = len(in.prompt)
		}
		in.feat = r.features()
		if isIDs && in.feat.echo {
			return badRequest("echo", "echo is not supported with a prompt of token ids")
		}
		switch {
		case r.MaxTokens == nil:
			in.maxTokens = 16 // OpenAI's default for completions
		case *r.MaxTokens == 0 && in.feat.echo:
			in.scoreOnly = true // the prompt echoed with its logprobs, nothing generated
		case *r.MaxTokens == 0:
			return badRequest("max_tokens", "max_tokens must be at least 1 (0 only with echo, to score the prompt)")
		default:
			if in.maxTokens, aerr = maxTokensOf(r.MaxTokens, nil, "max_tokens", ""); aerr != nil {
				return aerr
			}
		}
	}
	if in.sampling, in.stop, aerr = in.p.sampling(seed); aerr != nil {
		return aerr
	}
	in.stream = in.p.Stream
	in.usage = in.p.StreamOptions != nil && in.p.StreamOptions.IncludeUsage
	return nil
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
