package openai

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/gateway/core"
	"github.com/lmlite/lmlite/internal/jsonenc"
	"github.com/lmlite/lmlite/internal/sse"
)

// This file renders a Responses request's result (core.Output): the Response
// object, or OpenAI's event sequence (each item opened, its deltas, closed; the
// items themselves by items_out.go).

// ResponseOutput renders one /v1/responses request's result: the Response object, or
// OpenAI's event stream (response.created, response.in_progress, then for each
// output item its .added, its content or arguments deltas and .done events, then
// response.completed, response.incomplete or response.failed carrying the whole
// Response), every event with its sequence_number. It stores the response
// (store: true) before the bytes that end the answer are written, so that a client
// that has the answer can continue from it.
type ResponseOutput struct {
	m    *core.Meta
	opt  ResponseOptions
	hex  string // the request id's hex digits: every id of the answer ends with them
	id   string // the response's id: ResponseID
	seq  int    // the next event's sequence_number
	open int8   // the item open while streaming: openNone, openText, openCall

	items  []Item // the output's items so far (streams) or all of them
	text   strings.Builder
	args   strings.Builder
	finish string
	usage  engine.Usage
	err    *core.Error
	skip   bool // a call dropped (parallel_tool_calls false): its fragments too
	failed bool // finished with an error: nothing is stored
	stored bool
	lost   bool // store: true, but the Put failed (past the plan's limits, or the store down): the answer says store false

	itemBuf [2]Item // items' first backing array: most outputs have one or two
}

var (
	_ core.Output   = (*ResponseOutput)(nil)
	_ core.Finisher = (*ResponseOutput)(nil)
)

const (
	openNone int8 = iota
	openText
	openCall
)

// ResponseOptions are what a Responses output needs of its request.
type ResponseOptions struct {
	Parallel bool   // parallel_tool_calls: without, one call (the others dropped)
	Echo     []byte // the Response object's members echoing the request (",\"instructions\":…")
	StoreAt  int    // where Echo's store value (true or false) begins
	// Store, when the response is to be stored (store: true; nil: not), keeps it,
	// once, before the bytes that end the answer.
	Store Storer
}

// A Storer keeps a response: its id ("resp_…"), its output items and its Response
// object. An error means it was not stored: the answer says "store": false.
type Storer interface {
	StoreResponse(id string, output []Item, body []byte) error
}

// NewResponseOutput starts rendering one request's result; m is read during the
// calls (the caller keeps it).
func NewResponseOutput(m *core.Meta, opt ResponseOptions) *ResponseOutput {
	o := &ResponseOutput{m: m, opt: opt, hex: idSafe(strings.TrimPrefix(m.ReqID, "req_"))}
	o.id = ResponseID(m)
	o.items = o.itemBuf[:0]
	return o
}

// ResponseID is the id of the response of the request m: "resp_", the request's
// start in Unix milliseconds as 11 hex digits (m.StartMilli; none when it is 0),
// and the request id's digits. The time first makes the ids of the responses a
// tenant stores in a row follow each other in a store's key order (respstore's
// bbolt appends them to the last pages of its tree, instead of rewriting a page
// anywhere in it for each one); the request id's random digits keep it unique.
func ResponseID(m *core.Meta) string {
	hex := idSafe(strings.TrimPrefix(m.ReqID, "req_"))
	if m.StartMilli <= 0 {
		return "resp_" + hex
	}
	b := make([]byte, 0, 5+11+len(hex))
	b = append(b, "resp_"...)
	for i := 10; i >= 0; i-- {
		b = append(b, "0123456789abcdef"[(m.StartMilli>>(4*i))&0xf])
	}
	return string(append(b, hex...))
}

// ContentType is the answer's Content-Type.
func (o *ResponseOutput) ContentType(stream bool) string { return core.ContentType(stream) }

// AppendBrokenStream ends a relayed Responses stream that broke with an error
// event, as OpenAI's streams report an error outside a response:
// {"type":"error","code","message","param","sequence_number"}, the sequence number
// following the events relayed (one each, from 0).
func AppendBrokenStream(b []byte, events int, e *core.Error) []byte {
	b, at := sse.Begin(b, "error")
	b = append(b, `{"type":"error","code":`...)
	b = jsonenc.AppendString(b, e.Code)
	b = append(b, `,"message":`...)
	b = jsonenc.AppendString(b, e.Message)
	b = append(b, `,"param":null,"sequence_number":`...)
	b = strconv.AppendInt(b, int64(events), 10)
	return sse.End(append(b, '}'), at)
}

// event appends an SSE event of type typ: "event: typ", and its data, an object
// whose type and sequence_number come first; body appends the other members.
func (o *ResponseOutput) event(b []byte, typ string, body func([]byte) []byte) []byte {
	b, at := sse.Begin(b, typ)
	b = append(b, `{"type":"`...)
	b = append(b, typ...)
	b = append(b, `","sequence_number":`...)
	b = strconv.AppendInt(b, int64(o.seq), 10)
	o.seq++
	b = body(b)
	return sse.End(append(b, '}'), at)
}

// itemID is the id of output item k: a message "msg_…", a function call "fc_…".
func (o *ResponseOutput) itemID(typ string, k int) string {
	p := "msg_"
	if typ == "function_call" {
		p = "fc_"
	}
	return p + o.hex + "_" + strconv.Itoa(k)
}

func (o *ResponseOutput) AppendEvent(b []byte, ev *core.Event) []byte {
	if ev.Choice != 0 {
		return b // one output per response
	}
	switch ev.Kind {
	case core.EventStart:
		b = o.event(b, "response.created", func(b []byte) []byte {
			b = append(b, `,"response":`...)
			return o.appendResponse(b, "in_progress")
		})
		b = o.event(b, "response.in_progress", func(b []byte) []byte {
			b = append(b, `,"response":`...)
			return o.appendResponse(b, "in_progress")
		})
	case core.EventText:
		if ev.Text == "" {
			return b
		}
		if o.open != openText {
			b = o.closeItem(b)
			b = o.openItem(b, Item{Type: "message", Role: "assistant"})
		}
		o.text.WriteString(ev.Text)
		k := len(o.items) - 1
		b = o.event(b, "response.output_text.delta", func(b []byte) []byte {
			b = o.appendItemRef(b, k)
			b = append(b, `,"content_index":0,"delta":`...)
			b = jsonenc.AppendString(b, ev.Text)
			return append(b, `,"logprobs":[]`...)
		})
	case core.EventCall:
		if ev.Name != "" || ev.CallID != "" { // a call begins
			// parallel_tool_calls false: one call, the others dropped.
			if o.skip = !o.opt.Parallel && o.hasCall(); o.skip {
				return b
			}
			b = o.closeItem(b)
			b = o.openItem(b, Item{Type: "function_call", CallID: ev.CallID, Name: ev.Name})
		}
		if o.skip || o.open != openCall || ev.Args == "" {
			return b
		}
		o.args.WriteString(ev.Args)
		k := len(o.items) - 1
		b = o.event(b, "response.function_call_arguments.delta", func(b []byte) []byte {
			b = o.appendItemRef(b, k)
			b = append(b, `,"delta":`...)
			return jsonenc.AppendString(b, ev.Args)
		})
	case core.EventFinish:
		b = o.closeItem(b)
		o.finish = ev.Finish
	case core.EventUsage:
		o.usage = ev.Usage
	case core.EventError:
		b = o.closeItem(b)
		o.err = ev.Err
		b = o.event(b, "response.failed", func(b []byte) []byte {
			b = append(b, `,"response":`...)
			return o.appendResponse(b, "failed")
		})
	}
	return b
}

// idSafe is s with every byte but letters, digits, '-' and '_' made '_' (the
// server's request ids are hex already; an id of ours is never escaped in JSON).
func idSafe(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			b := []byte(s)
			for k, c := range b {
				if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
					b[k] = '_'
				}
			}
			return string(b)
		}
	}
	return s
}

// hasCall reports whether the output has a function call.
func (o *ResponseOutput) hasCall() bool {
	for _, it := range o.items {
		if it.Type == "function_call" {
			return true
		}
	}
	return false
}

// appendItemRef appends the members that name output item k in an event.
func (o *ResponseOutput) appendItemRef(b []byte, k int) []byte {
	b = append(b, `,"item_id":`...)
	b = jsonenc.AppendString(b, o.items[k].ID)
	b = append(b, `,"output_index":`...)
	return strconv.AppendInt(b, int64(k), 10)
}

// openItem begins output item it while streaming: response.output_item.added, and
// for a message its content part (response.content_part.added).
func (o *ResponseOutput) openItem(b []byte, it Item) []byte {
	k := len(o.items)
	it.ID = o.itemID(it.Type, k)
	o.items = append(o.items, it)
	b = o.event(b, "response.output_item.added", func(b []byte) []byte {
		b = append(b, `,"output_index":`...)
		b = strconv.AppendInt(b, int64(k), 10)
		b = append(b, `,"item":`...)
		return AppendOutputItem(b, &it, "in_progress", false)
	})
	if it.Type == "message" {
		o.open = openText
		o.text.Reset()
		b = o.event(b, "response.content_part.added", func(b []byte) []byte {
			b = o.appendItemRef(b, k)
			return append(b, `,"content_index":0,"part":{"type":"output_text","text":"","annotations":[],"logprobs":[]}`...)
		})
	} else {
		o.open = openCall
		o.args.Reset()
	}
	return b
}

// closeItem ends the item open while streaming: a message's
// response.output_text.done and response.content_part.done, a call's
// response.function_call_arguments.done, then response.output_item.done.
func (o *ResponseOutput) closeItem(b []byte) []byte {
	if o.open == openNone {
		return b
	}
	k := len(o.items) - 1
	it := &o.items[k]
	if o.open == openText {
		it.Text = o.text.String()
		b = o.event(b, "response.output_text.done", func(b []byte) []byte {
			b = o.appendItemRef(b, k)
			b = append(b, `,"content_index":0,"text":`...)
			b = jsonenc.AppendString(b, it.Text)
			return append(b, `,"logprobs":[]`...)
		})
		b = o.event(b, "response.content_part.done", func(b []byte) []byte {
			b = o.appendItemRef(b, k)
			b = append(b, `,"content_index":0,"part":{"type":"output_text","text":`...)
			b = jsonenc.AppendString(b, it.Text)
			return append(b, `,"annotations":[],"logprobs":[]}`...)
		})
	} else {
		it.Arguments = o.args.String()
		b = o.event(b, "response.function_call_arguments.done", func(b []byte) []byte {
			b = o.appendItemRef(b, k)
			b = append(b, `,"name":`...)
			b = jsonenc.AppendString(b, it.Name)
			b = append(b, `,"arguments":`...)
			return jsonenc.AppendString(b, it.Arguments)
		})
	}
	o.open = openNone
	return o.event(b, "response.output_item.done", func(b []byte) []byte {
		b = append(b, `,"output_index":`...)
		b = strconv.AppendInt(b, int64(k), 10)
		b = append(b, `,"item":`...)
		return AppendOutputItem(b, it, "completed", false)
	})
}

// finished is told the request's end once it is settled (before a stream's
// outFinish events, which a client gone no longer gets rendered): its finish, so
// that appendEnd stores what the request was, or its failure.
func (o *ResponseOutput) Finished(w *core.Whole, err *core.Error) {
	if err != nil {
		o.failed = true
		return
	}
	if w != nil && len(w.Choices) > 0 {
		o.finish = w.Choices[0].Finish
	}
}

// appendEnd ends the stream: the response stored, then response.completed (or
// response.incomplete, with the reason). After a failure (response.failed) nothing.
func (o *ResponseOutput) AppendEnd(b []byte) []byte {
	if o.err != nil || o.failed {
		return b
	}
	b = o.closeItem(b)
	status := o.status()
	if status == "cancelled" {
		return b // the client is gone
	}
	typ := "response.completed"
	if status == "incomplete" {
		typ = "response.incomplete"
	}
	return o.event(b, typ, func(b []byte) []byte {
		b = append(b, `,"response":`...)
		return o.appendStored(b, status)
	})
}

// appendWhole appends the Response object of a request answered whole, stored first.
func (o *ResponseOutput) AppendWhole(b []byte, w *core.Whole) []byte {
	if len(w.Choices) > 0 {
		ch := &w.Choices[0]
		calls := ch.Calls
		if !o.opt.Parallel && len(calls) > 1 {
			calls = calls[:1]
		}
		if ch.Content != "" || len(calls) == 0 {
			o.items = append(o.items, Item{Type: "message", ID: o.itemID("message", 0), Role: "assistant", Text: ch.Content})
		}
		for _, c := range calls {
			o.items = append(o.items, Item{Type: "function_call", ID: o.itemID("function_call", len(o.items)), CallID: c.ID, Name: c.Name, Arguments: c.Arguments})
		}
		o.finish = ch.Finish
	}
	o.usage = w.Usage
	return o.appendStored(b, o.status())
}

// appendStored appends the Response object with status, the response stored first
// when the request asked: the bytes rendered for the answer are the ones stored
// (rendered once), and a store that fails renders them again, saying "store": false.
func (o *ResponseOutput) appendStored(b []byte, status string) []byte {
	at := len(b)
	b = o.appendResponse(b, status)
	if o.store(status, b[at:]) {
		b = o.appendResponse(b[:at], status)
	}
	return b
}

// store keeps the response (its Response object, body) when the request asked
// (ResponseOptions.Store), once, unless it failed or the client left; it reports
// whether the store failed (lost): the answer then says "store": false.
func (o *ResponseOutput) store(status string, body []byte) (lost bool) {
	if o.stored || o.failed || o.opt.Store == nil || status == "cancelled" {
		return false
	}
	o.stored = true
	// The Storer owns what it is given: body is the answer's buffer, so a copy.
	if o.opt.Store.StoreResponse(o.id, append([]Item(nil), o.items...), bytes.Clone(body)) != nil {
		o.lost = true
	}
	return o.lost
}

// status is the response's status once its output ended: incomplete when the output
// reached max_output_tokens (or the model's limit), cancelled when the client left.
func (o *ResponseOutput) status() string {
	switch o.finish {
	case "length":
		return "incomplete"
	case "cancelled":
		return "cancelled"
	}
	return "completed"
}

// appendResponse appends the Response object with status: its id, model, output
// items, usage (once known), error and incomplete_details, and the request's echo.
func (o *ResponseOutput) appendResponse(b []byte, status string) []byte {
	b = append(b, `{"id":"`...)
	b = append(b, o.id...) // hex digits: nothing to escape
	b = append(b, `","object":"response","created_at":`...)
	b = strconv.AppendInt(b, o.m.Created, 10)
	b = append(b, `,"status":"`...)
	b = append(b, status...)
	b = append(b, `","model":`...)
	b = jsonenc.AppendString(b, o.m.Model)
	b = append(b, `,"output":[`...)
	done := status != "in_progress"
	for i := range o.items {
		if i > 0 {
			b = append(b, ',')
		}
		st := "completed"
		if !done {
			st = "in_progress"
		} else if status == "incomplete" && i == len(o.items)-1 {
			st = "incomplete"
		}
		b = AppendOutputItem(b, &o.items[i], st, true)
	}
	b = append(b, `],"output_text":`...)
	text := ""
	for i := range o.items {
		if o.items[i].Type == "message" { // an output has one message at most
			text = o.items[i].Text
			break
		}
	}
	b = jsonenc.AppendString(b, text)
	b = append(b, `,"error":`...)
	if status == "failed" && o.err != nil {
		code := o.err.Code
		if code == "" {
			code = "server_error"
		}
		b = append(b, `{"code":`...)
		b = jsonenc.AppendString(b, code)
		b = append(b, `,"message":`...)
		b = jsonenc.AppendString(b, o.err.Message)
		b = append(b, '}')
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"incomplete_details":`...)
	if status == "incomplete" {
		b = append(b, `{"reason":"max_output_tokens"}`...)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"usage":`...)
	if done && status != "failed" {
		u := o.usage
		b = append(b, `{"input_tokens":`...)
		b = strconv.AppendInt(b, int64(u.PromptTokens), 10)
		b = append(b, `,"input_tokens_details":{"cached_tokens":`...)
		b = strconv.AppendInt(b, int64(u.CachedTokens), 10)
		b = append(b, `},"output_tokens":`...)
		b = strconv.AppendInt(b, int64(u.CompletionTokens), 10)
		b = append(b, `,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":`...)
		b = strconv.AppendInt(b, int64(u.PromptTokens+u.CompletionTokens), 10)
		b = append(b, '}')
	} else {
		b = append(b, "null"...)
	}
	if echo := o.opt.Echo; o.lost && o.opt.StoreAt > 0 {
		b = append(b, echo[:o.opt.StoreAt]...)
		b = append(b, "false"...)
		b = append(b, echo[o.opt.StoreAt+len("true"):]...)
	} else {
		b = append(b, echo...)
	}
	return append(b, '}')
}
