package anthropic

import (
	"strings"

	"github.com/lmlite/lmlite/gateway/core"
)

// This file renders a Messages request's result (core.Output): the core's events
// become a Stream's, its whole a Message, its errors Anthropic's shape.

// Output renders one Messages request's result. Only choice 0 is rendered (the
// Messages API has one); without parallel tool calls, one call.
type Output struct {
	m        *core.Meta
	parallel bool
	st       Stream
}

// NewOutput starts rendering one request's result; m is read during the calls (the
// caller keeps it). parallel is the request's parallel tool use (tool_choice's
// disable_parallel_tool_use false).
func NewOutput(m *core.Meta, parallel bool) *Output {
	return &Output{m: m, parallel: parallel}
}

// ContentType is the answer's Content-Type.
func (o *Output) ContentType(stream bool) string { return core.ContentType(stream) }

// AppendWhole appends the Message of an answer that is not streamed (choice 0;
// one tool call without parallel tool calls).
func (o *Output) AppendWhole(b []byte, w *core.Whole) []byte {
	var c core.Choice
	if len(w.Choices) > 0 {
		c = w.Choices[0]
	}
	n := len(c.Calls)
	if !o.parallel && n > 1 {
		n = 1
	}
	var arr [4]Call // most answers have few calls
	calls := arr[:0]
	for _, call := range c.Calls[:n] {
		calls = append(calls, Call{ID: call.ID, Name: call.Name, Arguments: call.Arguments})
	}
	return AppendMessage(b, MessageID(o.m.ReqID), o.m.Model, c.Content, calls, c.Finish, &w.Usage)
}

// AppendEvent appends the stream's events for ev. Only choice 0 is rendered (the
// Messages API has one).
func (o *Output) AppendEvent(b []byte, ev *core.Event) []byte {
	if o.st.Errored() || (ev.Choice != 0 && ev.Kind != core.EventUsage && ev.Kind != core.EventError) {
		return b
	}
	switch ev.Kind {
	case core.EventStart:
		b = o.st.Start(b, MessageID(o.m.ReqID), o.m.Model, o.m.Prompt)
	case core.EventText:
		b = o.st.Text(b, ev.Text)
	case core.EventCall:
		if ev.Call > 0 && !o.parallel {
			return b
		}
		if ev.Name != "" { // the call's first fragment
			b = o.st.ToolUse(b, ev.CallID, ev.Name)
		}
		b = o.st.ToolInput(b, ev.Args)
	case core.EventFinish:
		b = o.st.Finish(b, ev.Finish)
	case core.EventUsage:
		b = o.st.Delta(b, ev.Usage)
	case core.EventError:
		typ, msg := ErrorOf(ev.Err)
		b = o.st.Error(b, typ, msg)
	}
	return b
}

// AppendEnd appends message_stop, unless an error event ended the stream.
func (o *Output) AppendEnd(b []byte) []byte { return o.st.End(b) }

// AppendPing appends Anthropic's keep-alive event (core.Pinger).
func (o *Output) AppendPing(b []byte) []byte { return AppendPing(b) }

// AppendCoreError appends e in Anthropic's error shape (ErrorOf).
func AppendCoreError(b []byte, e *core.Error) []byte {
	typ, msg := ErrorOf(e)
	return AppendError(b, typ, msg)
}

// AppendCoreErrorEvent appends the event of an error in the middle of a Messages
// stream: event: error, data: {"type":"error","error":{...}}.
func AppendCoreErrorEvent(b []byte, e *core.Error) []byte {
	typ, msg := ErrorOf(e)
	return AppendErrorEvent(b, typ, msg)
}

// ErrorOf is e as Anthropic's error: its type (ErrorType) and its message, naming
// the field at fault (in this API's names, Rename) when it does not already; a
// prompt over the model's limit says "prompt is too long", as Anthropic's does
// (clients such as Claude Code look for it to compact the conversation).
func ErrorOf(e *core.Error) (typ, msg string) {
	param, msg := e.Param, e.Message
	if p, m := Rename(param, msg); p != param {
		param, msg = p, m
	}
	if param != "" && param != "body" && !strings.Contains(msg, param) {
		msg = param + ": " + msg
	}
	if e.Code == "context_length_exceeded" {
		msg = "prompt is too long: " + msg
	}
	return ErrorType(e.Status, e.Code), msg
}
