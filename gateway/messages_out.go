package gateway

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/internal/jsonenc"
	"github.com/lmlite/lmlite/internal/sse"
)

// This file renders a Messages request's result (messages.go): Anthropic's Message
// object, or its event stream, and errors in Anthropic's shape.
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

// newOutput starts rendering one Messages request's result.
func (c *messagesCodec) newOutput(m *outMeta) output {
	return &messagesOutput{m: m}
}

// Content blocks a stream has open.
const (
	blockNone int8 = iota
	blockText
	blockTool
)

// messagesOutput renders one request's result; a stream's state is the block it has
// open and how many it has started.
type messagesOutput struct {
	m       *outMeta
	open    int8   // the block the stream has open
	blocks  int    // content blocks started
	calls   int    // tool_use blocks started
	finish  string // the choice's finish, kept for message_delta
	errored bool   // an error event was sent: nothing follows it
}

func (o *messagesOutput) contentType(stream bool) string {
	if stream {
		return "text/event-stream"
	}
	return "application/json"
}

// messageID is the Message's id: "msg_" and the request id's hex digits.
func messageID(reqID string) string { return "msg_" + strings.TrimPrefix(reqID, "req_") }

// toolUseID is a tool_use block's id, "toolu_" with the core's call id's digits:
// unique in the server's answers and the same for the same request.
func toolUseID(callID string) string { return "toolu_" + strings.TrimPrefix(callID, "call_") }

// stopReason is Anthropic's stop_reason for the choice's finish.
func stopReason(finish string, calls bool, u *engine.Usage) string {
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

// appendStop appends the stop_reason and stop_sequence members.
func appendStop(b []byte, reason string, u *engine.Usage) []byte {
	b = append(b, `"stop_reason":"`...)
	b = append(b, reason...)
	b = append(b, `","stop_sequence":`...)
	if reason == "stop_sequence" {
		return jsonenc.AppendString(b, u.StopSequence)
	}
	return append(b, "null"...)
}

// appendMessagesUsage appends Anthropic's usage object.
func appendMessagesUsage(b []byte, u engine.Usage) []byte {
	cached := min(u.CachedTokens, u.PromptTokens)
	b = append(b, `"usage":{"input_tokens":`...)
	b = strconv.AppendInt(b, int64(u.PromptTokens-cached), 10)
	b = append(b, `,"cache_creation_input_tokens":0,"cache_read_input_tokens":`...)
	b = strconv.AppendInt(b, int64(cached), 10)
	b = append(b, `,"output_tokens":`...)
	b = strconv.AppendInt(b, int64(u.CompletionTokens), 10)
	return append(b, '}')
}

// appendMessageHead appends a Message's members up to its content's opening bracket.
func (o *messagesOutput) appendMessageHead(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = jsonenc.AppendString(b, messageID(o.m.reqID))
	b = append(b, `,"type":"message","role":"assistant","model":`...)
	b = jsonenc.AppendString(b, o.m.model)
	return append(b, `,"content":[`...)
}

// appendToolInput appends a call's arguments as the tool_use block's input, a JSON
// object: {} for none, or for text that is not one (a call the model cut short).
func appendToolInput(b []byte, args string) []byte {
	a := bytes.TrimSpace([]byte(args))
	if len(a) == 0 || a[0] != '{' || !jsontext.Value(a).IsValid() {
		return append(b, "{}"...)
	}
	return append(b, a...)
}

// appendWhole appends the Message of an answer that is not streamed: its text (one
// text block, also when empty and nothing else was written) and tool_use blocks.
func (o *messagesOutput) appendWhole(b []byte, w *whole) []byte {
	var c wholeChoice
	if len(w.choices) > 0 {
		c = w.choices[0]
	}
	calls := c.calls
	if !o.m.in.feat.parallel && len(calls) > 1 {
		calls = calls[:1]
	}
	b = o.appendMessageHead(b)
	n := 0
	if c.content != "" || len(calls) == 0 {
		b = append(b, `{"type":"text","text":`...)
		b = jsonenc.AppendString(b, c.content)
		b = append(b, '}')
		n++
	}
	for _, call := range calls {
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = append(b, `{"type":"tool_use","id":`...)
		b = jsonenc.AppendString(b, toolUseID(call.id))
		b = append(b, `,"name":`...)
		b = jsonenc.AppendString(b, call.name)
		b = append(b, `,"input":`...)
		b = appendToolInput(b, call.arguments)
		b = append(b, '}')
	}
	b = append(b, "],"...)
	b = appendStop(b, stopReason(c.finish, len(calls) > 0, &w.usage), &w.usage)
	b = append(b, ',')
	b = appendMessagesUsage(b, w.usage)
	return append(b, '}')
}

// appendSSE appends one event whose data is the JSON text data.
func appendSSE(b []byte, event, data string) []byte {
	b, at := sse.Begin(b, event)
	return sse.End(append(b, data...), at)
}

// appendEvent appends the stream's events for ev. Only choice 0 is rendered (the
// Messages API has one).
func (o *messagesOutput) appendEvent(b []byte, ev *outEvent) []byte {
	if o.errored || (ev.choice != 0 && ev.kind != outUsage && ev.kind != outError) {
		return b
	}
	switch ev.kind {
	case outStart:
		var at int
		b, at = sse.Begin(b, "message_start")
		b = append(b, `{"type":"message_start","message":`...)
		b = o.appendMessageHead(b)
		b = append(b, `],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":`...)
		b = strconv.AppendInt(b, int64(o.m.prompt), 10)
		b = sse.End(append(b, `,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}}`...), at)
	case outText:
		if ev.text == "" {
			return b
		}
		if o.open != blockText {
			b = o.closeBlock(b)
			b = o.emptyTextBlock(b)
		}
		var at int
		b, at = sse.Begin(b, "content_block_delta")
		b = o.appendIndex(b, `{"type":"content_block_delta","index":`)
		b = append(b, `,"delta":{"type":"text_delta","text":`...)
		b = jsonenc.AppendString(b, ev.text)
		b = sse.End(append(b, "}}"...), at)
	case outCall:
		if ev.call > 0 && !o.m.in.feat.parallel {
			return b
		}
		if ev.name != "" { // the call's first fragment
			b = o.closeBlock(b)
			var at int
			b, at = o.startBlock(b, blockTool)
			o.calls++
			b = append(b, `{"type":"tool_use","id":`...)
			b = jsonenc.AppendString(b, toolUseID(ev.callID))
			b = append(b, `,"name":`...)
			b = jsonenc.AppendString(b, ev.name)
			b = sse.End(append(b, `,"input":{}}}`...), at)
		}
		if ev.args == "" || o.open != blockTool {
			return b
		}
		var at int
		b, at = sse.Begin(b, "content_block_delta")
		b = o.appendIndex(b, `{"type":"content_block_delta","index":`)
		b = append(b, `,"delta":{"type":"input_json_delta","partial_json":`...)
		b = jsonenc.AppendString(b, ev.args)
		b = sse.End(append(b, "}}"...), at)
	case outFinish:
		b = o.closeBlock(b)
		if o.blocks == 0 { // nothing written: one empty text block, as the whole answer has
			b = o.emptyTextBlock(b)
			b = o.closeBlock(b)
		}
		o.finish = ev.finish
	case outUsage:
		u := ev.usage
		var at int
		b, at = sse.Begin(b, "message_delta")
		b = append(b, `{"type":"message_delta","delta":{`...)
		b = appendStop(b, stopReason(o.finish, o.calls > 0, &u), &u)
		b = append(b, "},"...)
		b = appendMessagesUsage(b, u)
		b = sse.End(append(b, '}'), at)
	case outError:
		o.errored = true
		b = appendMessagesErrorEvent(b, ev.err)
	}
	return b
}

// appendMessagesErrorEvent appends the event of an error in the middle of a
// Messages stream: event: error, data: {"type":"error","error":{...}}.
func appendMessagesErrorEvent(b []byte, e *apiError) []byte {
	b, at := sse.Begin(b, "error")
	return sse.End(messagesAPI.appendError(b, e), at)
}

// appendBroken ends a relayed Messages stream that broke with an error event
// (brokenAppender); nothing follows it, as in a stream that fails here.
func (c *messagesCodec) appendBroken(b []byte, _ int, e *apiError) []byte {
	return appendMessagesErrorEvent(b, e)
}

// startBlock appends a content_block_start event up to its content_block's value;
// the caller appends the rest and ends the event (sse.End at at).
func (o *messagesOutput) startBlock(b []byte, kind int8) (_ []byte, at int) {
	o.open = kind
	o.blocks++
	b, at = sse.Begin(b, "content_block_start")
	b = o.appendIndex(b, `{"type":"content_block_start","index":`)
	return append(b, `,"content_block":`...), at
}

// emptyTextBlock appends the content_block_start of a text block.
func (o *messagesOutput) emptyTextBlock(b []byte) []byte {
	b, at := o.startBlock(b, blockText)
	return sse.End(append(b, `{"type":"text","text":""}}`...), at)
}

// appendIndex appends head and the open block's index.
func (o *messagesOutput) appendIndex(b []byte, head string) []byte {
	b = append(b, head...)
	return strconv.AppendInt(b, int64(o.blocks-1), 10)
}

// closeBlock appends the open block's content_block_stop, if one is open.
func (o *messagesOutput) closeBlock(b []byte) []byte {
	if o.open == blockNone {
		return b
	}
	o.open = blockNone
	b, at := sse.Begin(b, "content_block_stop")
	b = o.appendIndex(b, `{"type":"content_block_stop","index":`)
	return sse.End(append(b, '}'), at)
}

// appendEnd appends message_stop, unless an error event ended the stream.
func (o *messagesOutput) appendEnd(b []byte) []byte {
	if o.errored {
		return b
	}
	return appendSSE(b, "message_stop", `{"type":"message_stop"}`)
}

// appendPing appends Anthropic's keep-alive event (pinger).
func (o *messagesOutput) appendPing(b []byte) []byte {
	return appendSSE(b, "ping", `{"type":"ping"}`)
}

// appendError appends e in Anthropic's error shape: {"type":"error","error":{"type",
// "message"}}, the message naming the field at fault (in this API's names) when it
// does not already; a prompt over the model's limit says "prompt is too long", as
// Anthropic's does (clients such as Claude Code look for it to compact the
// conversation).
func (c *messagesCodec) appendError(b []byte, e *apiError) []byte {
	e = messagesNames(e)
	msg := e.message
	if e.param != "" && e.param != "body" && !strings.Contains(msg, e.param) {
		msg = e.param + ": " + msg
	}
	if e.code == "context_length_exceeded" {
		msg = "prompt is too long: " + msg
	}
	b = append(b, `{"type":"error","error":{"type":`...)
	b = jsonenc.AppendString(b, messagesErrorType(e))
	b = append(b, `,"message":`...)
	b = jsonenc.AppendString(b, msg)
	return append(b, "}}"...)
}

// errorStatus is e's status, but 529 for an overloaded engine or server, as
// Anthropic answers (its clients retry it).
func (c *messagesCodec) errorStatus(e *apiError) int {
	if overloadedError(e) {
		return 529
	}
	return e.status
}

// overloadedError reports whether e says the engine or the server is saturated
// (queue full, no memory, too many requests in flight) or draining.
func overloadedError(e *apiError) bool {
	return e.status == 503 && (e.code == "overloaded" || e.code == "shutting_down")
}

// messagesErrorType is Anthropic's error type for e's status.
func messagesErrorType(e *apiError) string {
	switch {
	case overloadedError(e):
		return "overloaded_error"
	case e.status == 401:
		return "authentication_error"
	case e.status == 403:
		return "permission_error"
	case e.status == 404:
		return "not_found_error"
	case e.status == 413:
		return "request_too_large"
	case e.status == 429:
		return "rate_limit_error"
	case e.status >= 500:
		return "api_error"
	}
	return "invalid_request_error"
}

var (
	_ codec  = (*messagesCodec)(nil)
	_ output = (*messagesOutput)(nil)
	_ pinger = (*messagesOutput)(nil)
)
