package gateway

import (
	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/policies"
)

// This file is the contract between the gateway's core (admission, routing, the
// engine, settlement: one path for every wire format) and its codecs (one per wire
// format: OpenAI's chat and completions, OpenAI's Responses, Anthropic's Messages).
//
// A codec decodes a body into the core request (input) and renders the core's result
// (outEvents while streaming, a whole at the end otherwise) and its errors in its own
// shape. The core never writes wire bytes itself, and a codec never touches the
// engine, the tenancy or the ledger.
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

// outMeta is what an output knows of its request before the first event.
type outMeta struct {
	reqID   string // the server's request id ("req_" + hex): a codec derives its ids from it
	model   string // the model that serves it
	created int64  // Unix seconds of the request's start
	tenant  string
	in      *input // the decoded request (features, n, stream options)
	prompt  int    // the prompt's tokens on the model (Anthropic's message_start reports them)
}

// outKind is the kind of an outEvent.
type outKind uint8

const (
	// outStart: choice begins; exactly once per choice, before its other events.
	outStart outKind = iota
	// outText: content text of choice (text), with the logprobs of the tokens that
	// made it (lps; only when logprobs were asked for). White space before a tool
	// call is never sent as text (the core holds it back). echo: the text is the
	// prompt echoed (completions' echo), its lps the prompt's tokens.
	outText
	// outCall: a fragment of tool call number call of choice: its first fragment
	// carries callID and name; every fragment may carry a piece of the arguments'
	// JSON text (args, possibly ""). Calls of a choice come in order; a call's
	// fragments are contiguous; content text does not follow a call.
	outCall
	// outFinish: choice ended with finish ("stop", "length", "tool_calls",
	// "function_call" for the legacy functions API, "cancelled").
	outFinish
	// outUsage: the request's usage (every choice's output, the prompt once), after
	// every choice's outFinish. Always sent; a codec decides whether to render it.
	outUsage
	// outError: the generation failed after the stream began (err); nothing follows.
	outError
)

// outEvent is one event of a request's result as it is produced. It and what it
// points to are valid only during appendEvent (the core reuses them).
type outEvent struct {
	kind   outKind
	choice int
	text   string // outText
	echo   bool   // outText: text is the echoed prompt
	// lps: with logprobs asked, the tokens (with their logprobs) of the choice's
	// output not yet sent: on outText, outCall and outFinish (a token whose text
	// went to no event, such as markup or held white space, goes with the next).
	lps    []engine.Token
	call   int          // outCall: the call's index within its choice
	callID string       // outCall, first fragment: the call's id
	name   string       // outCall, first fragment: the function's name
	args   string       // outCall: a fragment of the arguments' JSON text
	finish string       // outFinish
	usage  engine.Usage // outUsage
	err    *apiError    // outError
}

// whole is a request's whole result, for an answer that is not streamed.
type whole struct {
	choices []wholeChoice
	usage   engine.Usage
}

// wholeChoice is one choice's whole output.
type wholeChoice struct {
	content string         // the text (without the tool calls' markup; completions' echo: the prompt first)
	calls   []wholeCall    // tool calls parsed from the output
	finish  string         // as outFinish's
	lps     []engine.Token // logprobs asked: the output's tokens with theirs (not for finisher.finished after a stream)
	prompt  []engine.Token // completions' echo with logprobs: the prompt's tokens
}

// wholeCall is one complete tool call.
type wholeCall struct {
	id, name, arguments string
}

// An output renders one request's result. The core calls appendEvent for each event
// while streaming, then appendEnd once; or appendWhole once for an answer that is
// not streamed. An output may keep state between calls (Responses' and Messages'
// events close what they opened).
type output interface {
	// contentType is the answer's Content-Type ("text/event-stream" when streamed).
	contentType(stream bool) string
	// appendEvent appends ev's SSE bytes (nothing, for an event the format does not
	// render).
	appendEvent(b []byte, ev *outEvent) []byte
	// appendEnd appends what ends the stream (OpenAI's "data: [DONE]", Anthropic's
	// message_stop); called after the last event, also after an outError.
	appendEnd(b []byte) []byte
	// appendWhole appends the whole answer's body.
	appendWhole(b []byte, w *whole) []byte
}

// pinger is an output that writes its own keep-alive event while the stream waits
// (Anthropic's "ping"); other outputs get an SSE comment.
type pinger interface {
	appendPing(b []byte) []byte
}

// finisher is an output told the request's end after it is settled: a format that
// stores its results (Responses' store) does so here, before the answer completes
// (a stream: before its outFinish events; else before appendWhole). err is nil on
// success (w nil on an error). It is called only once the model took the request
// (the output exists): an error before that is answered by appendError alone.
type finisher interface {
	finished(w *whole, err *apiError)
}

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
