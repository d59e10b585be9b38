package gateway

import (
	"github.com/lmlite/lmlite/gateway/openai"
)

// This file is the codec of OpenAI's chat completions and (legacy) completions: it
// decodes their bodies into the core request (parse.go) and renders the core's
// result through package gateway/openai (chat.go: chat.completion, text_completion,
// their chunks, data: [DONE]; errors {"error": {...}}).

// openaiCodec is the codec of POST /v1/chat/completions (kindChat) or
// /v1/completions (kindCompletion).
type openaiCodec struct{ kind kind }

// chatCodec and completionsCodec are the codecs of OpenAI's two generation
// endpoints (pointers, so that an interface holds them without allocating).
var (
	chatCodec        = &openaiCodec{kind: kindChat}
	completionsCodec = &openaiCodec{kind: kindCompletion}
)

// codecForEndpoint is the codec of a batch line's endpoint (batch.Request.Endpoint,
// checked when the batch was created: chat or completions).
func codecForEndpoint(endpoint string) codec {
	if endpoint == "/v1/completions" {
		return completionsCodec
	}
	return chatCodec
}

func (c *openaiCodec) decode(in *input, body []byte, _ string) *apiError {
	if c.kind == kindChat {
		return in.decodeChat(body)
	}
	return in.decodeCompletion(body)
}

func (c *openaiCodec) newOutput(m *outMeta) output {
	f := &m.in.feat
	return openai.NewChatOutput(&m.Meta, openai.ChatOptions{Chat: c.kind == kindChat, Logprobs: f.Logprobs, Echo: f.Echo,
		Legacy: f.Legacy, Usage: m.in.usage, PromptLen: len(m.in.prompt)})
}

func (c *openaiCodec) appendError(b []byte, e *apiError) []byte { return appendErrorJSON(b, e) }

func (c *openaiCodec) errorStatus(e *apiError) int { return e.status }
