// Package anthropic is Anthropic's Messages API on the wire, as the gateway serves
// it: the request decoded (request.go: Decode, Request.Check, Conversation,
// ChatFeatures, Rename; errors are core.FieldErrors naming this API's fields), the
// Message object, its event stream and the error shape, and the Output that
// renders the core's result with them (output.go, a core.Output). It knows nothing
// of the gateway's core beyond package gateway/core: the codec
// (gateway/messages*.go) fills the core request from a Request and makes the
// request's Output.
//
// The stream: message_start (the message with no content, its usage the prompt's
// tokens), then for each content block content_block_start, its deltas (text_delta;
// a tool_use block's input as input_json_delta fragments of its JSON text) and
// content_block_stop, then message_delta (stop_reason, stop_sequence and the final
// usage) and message_stop; ping while the stream waits. An error after the stream
// began is an error event, and the stream ends there.
//
// usage follows Anthropic's definitions: input_tokens are the prompt's tokens not
// read from the prefix cache, cache_read_input_tokens those read from it (so their
// sum is what count_tokens answers for the same request), cache_creation_input_tokens
// is 0 (the prefix cache is written without charge).
package anthropic

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/internal/jsonenc"
	"github.com/lmlite/lmlite/internal/sse"
)

// Content blocks a stream has open.
const (
	blockNone int8 = iota
	blockText
	blockTool
)

// Stream renders one Message's event stream; its state is the block it has open
// and how many it has started. The zero Stream is ready; one Stream per answer.
type Stream struct {
	open    int8   // the block the stream has open
	blocks  int    // content blocks started
	calls   int    // tool_use blocks started
	finish  string // the choice's finish, kept for message_delta
	errored bool   // an error event was sent: nothing follows it
}

// MessageID is the Message's id: "msg_" and the request id's hex digits.
func MessageID(reqID string) string { return "msg_" + strings.TrimPrefix(reqID, "req_") }

// ToolUseID is a tool_use block's id, "toolu_" with the core's call id's digits:
// unique in the server's answers and the same for the same request.
func ToolUseID(callID string) string { return "toolu_" + strings.TrimPrefix(callID, "call_") }

// StopReason is Anthropic's stop_reason for the core's finish ("stop", "length",
// "tool_calls", …); calls: the answer has tool_use blocks.
func StopReason(finish string, calls bool, u *engine.Usage) string {
	switch {
	case calls || finish == "tool_calls" || finish == "function_call":
		return "tool_use"
	case finish == "length":
		return "max_tokens"
	case u != nil && u.StopSequence != "":
		return "stop_sequence"
	}
	return "end_turn"
}

// AppendStop appends the stop_reason and stop_sequence members.
func AppendStop(b []byte, reason string, u *engine.Usage) []byte {
	b = append(b, `"stop_reason":"`...)
	b = append(b, reason...)
	b = append(b, `","stop_sequence":`...)
	if reason == "stop_sequence" {
		return jsonenc.AppendString(b, u.StopSequence)
	}
	return append(b, "null"...)
}

// AppendUsage appends Anthropic's usage member.
func AppendUsage(b []byte, u engine.Usage) []byte {
	cached := min(u.CachedTokens, u.PromptTokens)
	b = append(b, `"usage":{"input_tokens":`...)
	b = strconv.AppendInt(b, int64(u.PromptTokens-cached), 10)
	b = append(b, `,"cache_creation_input_tokens":0,"cache_read_input_tokens":`...)
	b = strconv.AppendInt(b, int64(cached), 10)
	b = append(b, `,"output_tokens":`...)
	b = strconv.AppendInt(b, int64(u.CompletionTokens), 10)
	return append(b, '}')
}

// AppendMessageHead appends a Message's members up to its content's opening
// bracket.
func AppendMessageHead(b []byte, id, model string) []byte {
	b = append(b, `{"id":`...)
	b = jsonenc.AppendString(b, id)
	b = append(b, `,"type":"message","role":"assistant","model":`...)
	b = jsonenc.AppendString(b, model)
	return append(b, `,"content":[`...)
}

// AppendToolInput appends a call's arguments as the tool_use block's input, a JSON
// object: {} for none, or for text that is not one (a call the model cut short).
func AppendToolInput(b []byte, args string) []byte {
	a := bytes.TrimSpace([]byte(args))
	if len(a) == 0 || a[0] != '{' || !jsontext.Value(a).IsValid() {
		return append(b, "{}"...)
	}
	return append(b, a...)
}

// A Call is one complete tool call of a whole answer.
type Call struct {
	ID, Name, Arguments string // the core's call id (ToolUseID makes the block's)
}

// AppendMessage appends the Message of an answer that is not streamed: its text
// (one text block, also when empty and there is no call) and tool_use blocks.
// finish is the core's finish.
func AppendMessage(b []byte, id, model, text string, calls []Call, finish string, u *engine.Usage) []byte {
	b = AppendMessageHead(b, id, model)
	n := 0
	if text != "" || len(calls) == 0 {
		b = append(b, `{"type":"text","text":`...)
		b = jsonenc.AppendString(b, text)
		b = append(b, '}')
		n++
	}
	for _, call := range calls {
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = append(b, `{"type":"tool_use","id":`...)
		b = jsonenc.AppendString(b, ToolUseID(call.ID))
		b = append(b, `,"name":`...)
		b = jsonenc.AppendString(b, call.Name)
		b = append(b, `,"input":`...)
		b = AppendToolInput(b, call.Arguments)
		b = append(b, '}')
	}
	b = append(b, "],"...)
	b = AppendStop(b, StopReason(finish, len(calls) > 0, u), u)
	b = append(b, ',')
	b = AppendUsage(b, *u)
	return append(b, '}')
}

// appendSSE appends one event whose data is the JSON text data.
func appendSSE(b []byte, event, data string) []byte {
	b, at := sse.Begin(b, event)
	return sse.End(append(b, data...), at)
}

// Errored reports whether an error event ended the stream (nothing follows it).
func (o *Stream) Errored() bool { return o.errored }

// Start appends message_start: the Message with no content, its usage the prompt's
// tokens.
func (o *Stream) Start(b []byte, id, model string, prompt int) []byte {
	b, at := sse.Begin(b, "message_start")
	b = append(b, `{"type":"message_start","message":`...)
	b = AppendMessageHead(b, id, model)
	b = append(b, `],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":`...)
	b = strconv.AppendInt(b, int64(prompt), 10)
	return sse.End(append(b, `,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}}`...), at)
}

// Text appends a text_delta of text ("": nothing), opening a text block first if
// none is open.
func (o *Stream) Text(b []byte, text string) []byte {
	if o.errored || text == "" {
		return b
	}
	if o.open != blockText {
		b = o.closeBlock(b)
		b = o.emptyTextBlock(b)
	}
	b, at := sse.Begin(b, "content_block_delta")
	b = o.appendIndex(b, `{"type":"content_block_delta","index":`)
	b = append(b, `,"delta":{"type":"text_delta","text":`...)
	b = jsonenc.AppendString(b, text)
	return sse.End(append(b, "}}"...), at)
}

// ToolUse opens a tool_use block for the call id (the core's) of function name,
// closing the open block.
func (o *Stream) ToolUse(b []byte, id, name string) []byte {
	if o.errored {
		return b
	}
	b = o.closeBlock(b)
	b, at := o.startBlock(b, blockTool)
	o.calls++
	b = append(b, `{"type":"tool_use","id":`...)
	b = jsonenc.AppendString(b, ToolUseID(id))
	b = append(b, `,"name":`...)
	b = jsonenc.AppendString(b, name)
	return sse.End(append(b, `,"input":{}}}`...), at)
}

// ToolInput appends an input_json_delta of the open tool_use block's input (args:
// a fragment of its JSON text; "", or no tool_use block open: nothing).
func (o *Stream) ToolInput(b []byte, args string) []byte {
	if o.errored || args == "" || o.open != blockTool {
		return b
	}
	b, at := sse.Begin(b, "content_block_delta")
	b = o.appendIndex(b, `{"type":"content_block_delta","index":`)
	b = append(b, `,"delta":{"type":"input_json_delta","partial_json":`...)
	b = jsonenc.AppendString(b, args)
	return sse.End(append(b, "}}"...), at)
}

// Finish closes the open block (an answer with none gets one empty text block, as
// the whole answer has) and keeps the core's finish for Delta.
func (o *Stream) Finish(b []byte, finish string) []byte {
	if o.errored {
		return b
	}
	b = o.closeBlock(b)
	if o.blocks == 0 {
		b = o.emptyTextBlock(b)
		b = o.closeBlock(b)
	}
	o.finish = finish
	return b
}

// Delta appends message_delta: stop_reason, stop_sequence and the usage u.
func (o *Stream) Delta(b []byte, u engine.Usage) []byte {
	if o.errored {
		return b
	}
	b, at := sse.Begin(b, "message_delta")
	b = append(b, `{"type":"message_delta","delta":{`...)
	b = AppendStop(b, StopReason(o.finish, o.calls > 0, &u), &u)
	b = append(b, "},"...)
	b = AppendUsage(b, u)
	return sse.End(append(b, '}'), at)
}

// Error appends an error event (typ, msg: AppendError's) that ends the stream.
func (o *Stream) Error(b []byte, typ, msg string) []byte {
	if o.errored {
		return b
	}
	o.errored = true
	return AppendErrorEvent(b, typ, msg)
}

// End appends message_stop, unless an error event ended the stream.
func (o *Stream) End(b []byte) []byte {
	if o.errored {
		return b
	}
	return appendSSE(b, "message_stop", `{"type":"message_stop"}`)
}

// AppendPing appends Anthropic's keep-alive event.
func AppendPing(b []byte) []byte {
	return appendSSE(b, "ping", `{"type":"ping"}`)
}

// startBlock appends a content_block_start event up to its content_block's value;
// the caller appends the rest and ends the event (sse.End at at).
func (o *Stream) startBlock(b []byte, kind int8) (_ []byte, at int) {
	o.open = kind
	o.blocks++
	b, at = sse.Begin(b, "content_block_start")
	b = o.appendIndex(b, `{"type":"content_block_start","index":`)
	return append(b, `,"content_block":`...), at
}

// emptyTextBlock appends the content_block_start of a text block.
func (o *Stream) emptyTextBlock(b []byte) []byte {
	b, at := o.startBlock(b, blockText)
	return sse.End(append(b, `{"type":"text","text":""}}`...), at)
}

// appendIndex appends head and the open block's index.
func (o *Stream) appendIndex(b []byte, head string) []byte {
	b = append(b, head...)
	return strconv.AppendInt(b, int64(o.blocks-1), 10)
}

// closeBlock appends the open block's content_block_stop, if one is open.
func (o *Stream) closeBlock(b []byte) []byte {
	if o.open == blockNone {
		return b
	}
	o.open = blockNone
	b, at := sse.Begin(b, "content_block_stop")
	b = o.appendIndex(b, `{"type":"content_block_stop","index":`)
	return sse.End(append(b, '}'), at)
}

// AppendError appends an error in Anthropic's shape: {"type":"error","error":{"type",
// "message"}}.
func AppendError(b []byte, typ, msg string) []byte {
	b = append(b, `{"type":"error","error":{"type":`...)
	b = jsonenc.AppendString(b, typ)
	b = append(b, `,"message":`...)
	b = jsonenc.AppendString(b, msg)
	return append(b, "}}"...)
}

// AppendErrorEvent appends the event of an error in the middle of a stream: event:
// error, its data AppendError's.
func AppendErrorEvent(b []byte, typ, msg string) []byte {
	b, at := sse.Begin(b, "error")
	return sse.End(AppendError(b, typ, msg), at)
}

// Overloaded reports whether an error (its HTTP status and the gateway's code)
// says the engine or the server is saturated (queue full, no memory, too many
// requests in flight) or draining: Anthropic answers those 529 overloaded_error
// (its clients retry it).
func Overloaded(status int, code string) bool {
	return status == 503 && (code == "overloaded" || code == "shutting_down")
}

// Status is the HTTP status of an error answered with status elsewhere: 529 for
// Overloaded.
func Status(status int, code string) int {
	if Overloaded(status, code) {
		return 529
	}
	return status
}

// ErrorType is Anthropic's error type for an error's HTTP status and code.
func ErrorType(status int, code string) string {
	switch {
	case Overloaded(status, code):
		return "overloaded_error"
	case status == 401:
		return "authentication_error"
	case status == 403:
		return "permission_error"
	case status == 404:
		return "not_found_error"
	case status == 413:
		return "request_too_large"
	case status == 429:
		return "rate_limit_error"
	case status >= 500:
		return "api_error"
	}
	return "invalid_request_error"
}
