package gateway

import (
	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/gateway/anthropic"
)

// This file is Anthropic's Messages API as a codec (codec.go): POST /v1/messages
// decoded by package anthropic (anthropic.Decode, Request.Check, Conversation,
// ChatFeatures) into the core's input, the answer rendered as Anthropic's Message
// object or its event stream (messages_out.go), and POST /v1/messages/count_tokens
// (messages_count.go). The Messages API's tools, tool_choice and output_config come
// translated into the chat request's and are checked by the chat decoder
// (chatFeatures), whose errors are renamed to the Messages API's fields
// (messagesNames).

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
	r, ferr := anthropic.Decode(body)
	if ferr != nil {
		return fieldError(ferr)
	}
	return messagesInput(in, r, c.count)
}

// apiKey is the request's API key: x-api-key, as Anthropic's clients send it, else
// Authorization: Bearer (apiKeyer).
func (c *messagesCodec) apiKey(h *fasthttp.RequestHeader) []byte {
	return anthropic.APIKey(h.Peek("X-Api-Key"), h.Peek("Authorization"))
}

// messagesInput fills in from the decoded request, then completes it as every
// chat-shaped request is (input.chatTail).
func messagesInput(in *input, r *anthropic.Request, count bool) *apiError {
	in.kind = kindChat
	in.maxField = "max_tokens"
	p := &commonParams{Model: r.Model, MaxTokens: r.MaxTokens, Temperature: r.Temperature, TopP: r.TopP, TopK: r.TopK, Stream: r.Stream}
	if r.Metadata != nil && r.Metadata.UserID != nil {
		p.User = *r.Metadata.UserID // kept hashed with the usage record
	}
	if l := r.LMLite; l != nil {
		f := l.LMLiteFields
		p.LMLite, p.Seed = &f, l.Seed
	}
	in.p = p
	if ferr := r.Check(count); ferr != nil {
		return fieldError(ferr)
	}
	if r.MaxTokens != nil {
		in.maxTokens = *r.MaxTokens
	}
	msgs, size, ferr := r.Conversation()
	if ferr != nil {
		return fieldError(ferr)
	}
	in.msgs, in.promptBytes = msgs, size
	cf, ferr := r.ChatFeatures()
	if ferr != nil {
		return fieldError(ferr)
	}
	q := chatRequest{Tools: cf.Tools, ToolChoice: cf.ToolChoice, ParallelToolCalls: cf.ParallelToolCalls, ResponseFormat: cf.ResponseFormat}
	var aerr *apiError
	if in.feat, aerr = chatFeatures(&q, in.msgs); aerr != nil {
		return messagesNames(aerr)
	}
	if aerr = in.chatTail(); aerr != nil { // the tools' bytes, sampling, stream
		return aerr
	}
	in.stop = append(in.stop, r.Stops()...)
	return nil
}

// messagesNames renames the fields of an error about the chat request's tools,
// tool_choice or response_format, which the Messages API's are translated into
// (anthropic.Request.ChatFeatures) and which planning names (planFeatures), as
// anthropic.Rename does. Other errors are returned as they are.
func messagesNames(e *apiError) *apiError {
	p, msg := anthropic.Rename(e.param, e.message)
	if p == e.param {
		return e
	}
	c := *e
	c.param, c.message = p, msg
	return &c
}
