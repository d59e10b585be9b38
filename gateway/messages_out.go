package gateway

import (
	"strings"

	"github.com/lmlite/lmlite/gateway/anthropic"
)

// This file renders a Messages request's result (messages.go) through package
// anthropic: the core's events become an anthropic.Stream's, its whole an
// anthropic Message, its errors Anthropic's shape.

// newOutput starts rendering one Messages request's result.
func (c *messagesCodec) newOutput(m *outMeta) output {
	return &messagesOutput{m: m}
}

// messagesOutput renders one request's result.
type messagesOutput struct {
	m  *outMeta
	st anthropic.Stream
}

func (o *messagesOutput) contentType(stream bool) string {
	if stream {
		return "text/event-stream"
	}
	return "application/json"
}

// appendWhole appends the Message of an answer that is not streamed (choice 0;
// one tool call without parallel tool calls).
func (o *messagesOutput) appendWhole(b []byte, w *whole) []byte {
	var c wholeChoice
	if len(w.choices) > 0 {
		c = w.choices[0]
	}
	n := len(c.calls)
	if !o.m.in.feat.parallel && n > 1 {
		n = 1
	}
	var arr [4]anthropic.Call // most answers have few calls
	calls := arr[:0]
	for _, call := range c.calls[:n] {
		calls = append(calls, anthropic.Call{ID: call.id, Name: call.name, Arguments: call.arguments})
	}
	return anthropic.AppendMessage(b, anthropic.MessageID(o.m.reqID), o.m.model, c.content, calls, c.finish, &w.usage)
}

// appendEvent appends the stream's events for ev. Only choice 0 is rendered (the
// Messages API has one).
func (o *messagesOutput) appendEvent(b []byte, ev *outEvent) []byte {
	if o.st.Errored() || (ev.choice != 0 && ev.kind != outUsage && ev.kind != outError) {
		return b
	}
	switch ev.kind {
	case outStart:
		b = o.st.Start(b, anthropic.MessageID(o.m.reqID), o.m.model, o.m.prompt)
	case outText:
		b = o.st.Text(b, ev.text)
	case outCall:
		if ev.call > 0 && !o.m.in.feat.parallel {
			return b
		}
		if ev.name != "" { // the call's first fragment
			b = o.st.ToolUse(b, ev.callID, ev.name)
		}
		b = o.st.ToolInput(b, ev.args)
	case outFinish:
		b = o.st.Finish(b, ev.finish)
	case outUsage:
		b = o.st.Delta(b, ev.usage)
	case outError:
		typ, msg := messagesError(ev.err)
		b = o.st.Error(b, typ, msg)
	}
	return b
}

// appendMessagesErrorEvent appends the event of an error in the middle of a
// Messages stream: event: error, data: {"type":"error","error":{...}}.
func appendMessagesErrorEvent(b []byte, e *apiError) []byte {
	typ, msg := messagesError(e)
	return anthropic.AppendErrorEvent(b, typ, msg)
}

// appendBroken ends a relayed Messages stream that broke with an error event
// (brokenAppender); nothing follows it, as in a stream that fails here.
func (c *messagesCodec) appendBroken(b []byte, _ int, e *apiError) []byte {
	return appendMessagesErrorEvent(b, e)
}

// appendEnd appends message_stop, unless an error event ended the stream.
func (o *messagesOutput) appendEnd(b []byte) []byte { return o.st.End(b) }

// appendPing appends Anthropic's keep-alive event (pinger).
func (o *messagesOutput) appendPing(b []byte) []byte { return anthropic.AppendPing(b) }

// appendError appends e in Anthropic's error shape (messagesError).
func (c *messagesCodec) appendError(b []byte, e *apiError) []byte {
	typ, msg := messagesError(e)
	return anthropic.AppendError(b, typ, msg)
}

// messagesError is e as Anthropic's error: its type (anthropic.ErrorType) and its
// message, naming the field at fault (in this API's names) when it does not
// already; a prompt over the model's limit says "prompt is too long", as
// Anthropic's does (clients such as Claude Code look for it to compact the
// conversation).
func messagesError(e *apiError) (typ, msg string) {
	e = messagesNames(e)
	msg = e.message
	if e.param != "" && e.param != "body" && !strings.Contains(msg, e.param) {
		msg = e.param + ": " + msg
	}
	if e.code == "context_length_exceeded" {
		msg = "prompt is too long: " + msg
	}
	return anthropic.ErrorType(e.status, e.code), msg
}

// errorStatus is e's status, but 529 for an overloaded engine or server, as
// Anthropic answers (its clients retry it).
func (c *messagesCodec) errorStatus(e *apiError) int {
	return anthropic.Status(e.status, e.code)
}

var (
	_ codec  = (*messagesCodec)(nil)
	_ output = (*messagesOutput)(nil)
	_ pinger = (*messagesOutput)(nil)
)
