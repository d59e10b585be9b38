package gateway

import (
	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/gateway/core"
	"github.com/lmlite/lmlite/policies"
)

// This file is the contract between the gateway's core (admission, routing, the
// engine, settlement: one path for every wire format) and its codecs (one per wire
// format: OpenAI's chat and completions, OpenAI's Responses, Anthropic's Messages).
//
// A codec decodes a body into the core request (input) and renders the core's result
// (core.Events while streaming, a core.Whole at the end otherwise) and its errors in
// its own shape. The rendering is a core.Output of the codec's package
// (gateway/openai's ChatOutput and ResponseOutput, gateway/anthropic's Output), which
// knows gateway/core's types and never this package; newOutput gives it the
// request's core.Meta and the options it needs of the decoded request. The core
// never writes wire bytes itself, and a codec never touches the engine, the tenancy
// or the ledger.
//
// Wiring a codec: its endpoint's case in Server.handle (server.go) calls
// s.handleGenerate(ctx, reqID, c) (run.go), as /v1/chat/completions does with
// chatCodec and /v1/completions with completionsCodec (openai.go). handleGenerate
// authenticates (apiKeyer), admits, calls c.decode, routes, reserves, runs the model
// and settles; every error it answers goes through c.appendError and c.errorStatus.
// A chat-shaped decode fills in.p (a commonParams: model, sampling, stream), in.msgs,
// in.promptBytes, in.maxTokens/in.maxField and in.feat, then calls in.chatTail()
// (parse.go), which OpenAI's chat decode (in.fromChat) ends with too. A model served
// by an upstream server answers only OpenAI's codecs (its bytes pass through); for
// another codec it is refused as a model that cannot serve the request.

// A codec is one wire format. One value serves every request of its endpoint; it
// keeps no per-request state (newOutput makes what a request needs).
type codec interface {
	// decode reads body into in: its kind (kindChat for every chat-shaped format),
	// messages, features, sampling, limits, stream and in.p (model, user,
	// lmlite routing fields, prompt_cache_key). A bad or unknown field is a 400
	// naming it in the codec's own terms. tenant is the authenticated tenant (a
	// codec with stored state, such as previous_response_id, reads only its own).
	decode(in *input, body []byte, tenant string) *apiError

	// newOutput starts rendering one request's result.
	newOutput(m *outMeta) output

	// appendError appends e's body in the codec's error shape (the status is set
	// by the caller from errorStatus).
	appendError(b []byte, e *apiError) []byte

	// errorStatus is the HTTP status e is answered with (Anthropic answers 529 for
	// an overloaded engine where OpenAI's shape uses 503).
	errorStatus(e *apiError) int
}

// outMeta is what an output knows of its request before the first event: the
// core's Meta, and the decoded request (features, n, stream options) from which a
// codec gives its package's output the options it needs.
type outMeta struct {
	core.Meta
	in  *input
	job *job // its settlement may ride in the stored response's Put (responses_carry.go); nil: none
}

// The result's types are gateway/core's (result.go), so that a codec package renders
// them without importing this one.
type (
	outKind     = core.EventKind
	outEvent    = core.Event
	whole       = core.Whole
	wholeChoice = core.Choice
	wholeCall   = core.ToolCall
	output      = core.Output
	pinger      = core.Pinger
	finisher    = core.Finisher
)

const (
	outStart  = core.EventStart
	outText   = core.EventText
	outCall   = core.EventCall
	outFinish = core.EventFinish
	outUsage  = core.EventUsage
	outError  = core.EventError
)

// storeAdmitter is a codec that keeps requests' results per tenant (Responses'
// store): serve calls admitStore after decode and before the request's admission
// goes on (tokens/min, money, routing, generation), and answers its refusal, charged
// nothing. pol is the request's tenant's policy (its plan's limits).
type storeAdmitter interface {
	admitStore(in *input, pol *policies.Policy) *apiError
}

// apiKeyer is a codec whose format sends the API key elsewhere than OpenAI's
// Authorization: Bearer (Anthropic's x-api-key): apiKey returns it from the request's
// header (nil or empty: none; a 401). handleGenerate authenticates with it.
type apiKeyer interface {
	apiKey(h *fasthttp.RequestHeader) []byte
}

// brokenAppender is a codec whose streams end otherwise than OpenAI's chat when a
// stream relayed from another process breaks (forward.Ender; OpenAI's chat and
// completions: an error event, then data: [DONE]): appendBroken appends the
// events that end it with e, after events whole events were relayed.
type brokenAppender interface {
	appendBroken(b []byte, events int, e *apiError) []byte
}
