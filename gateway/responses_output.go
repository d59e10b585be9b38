package gateway

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/gateway/openai"
	"github.com/lmlite/lmlite/internal/jsonenc"
	"github.com/lmlite/lmlite/internal/sse"
	"github.com/lmlite/lmlite/respstore"
)

// respOutput renders one /v1/responses request's result: the Response object, or
// OpenAI's event stream (response.created, response.in_progress, then for each
// output item its .added, its content or arguments deltas and .done events, then
// response.completed, response.incomplete or response.failed carrying the whole
// Response), every event with its sequence_number. It stores the response
// (store: true) before the bytes that end the answer are written, so that a client
// that has the answer can continue from it.
type respOutput struct {
	c    *responsesCodec
	m    *outMeta
	ri   *respInput
	hex  string // the request id's hex digits: every id of the answer ends with them
	seq  int    // the next event's sequence_number
	open int8   // the item open while streaming: openNone, openText, openCall

	items  []respItem // the output's items so far (streams) or all of them
	text   strings.Builder
	args   strings.Builder
	finish string
	usage  engine.Usage
	err    *apiError
	skip   bool // a call dropped (parallel_tool_calls false): its fragments too
	failed bool // finished with an error: nothing is stored
	stored bool
	lost   bool // store: true, but the Put failed (past the plan's limits, or the store down): the answer says store false

	itemBuf [2]respItem // items' first backing array: most outputs have one or two
}

var _ finisher = (*respOutput)(nil)

const (
	openNone int8 = iota
	openText
	openCall
)

func (c *responsesCodec) newOutput(m *outMeta) output {
	o := &respOutput{c: c, m: m, ri: m.in.resp, hex: strings.TrimPrefix(m.reqID, "req_")}
	if o.ri == nil {
		o.ri = &respInput{}
	}
	o.items = o.itemBuf[:0]
	o.hex = idSafe(o.hex)
	return o
}

// appendError appends an error in OpenAI's shape, its fields named as the Responses
// API names them (respNames).
func (c *responsesCodec) appendError(b []byte, e *apiError) []byte {
	return appendErrorJSON(b, respNames(e))
}

func (c *responsesCodec) errorStatus(e *apiError) int { return e.status }

func (o *respOutput) contentType(stream bool) string {
	if stream {
		return "text/event-stream"
	}
	return "application/json"
}

// event appends an SSE event of type typ: "event: typ", and its data, an object
// whose type and sequence_number come first; body appends the other members.
func (o *respOutput) event(b []byte, typ string, body func([]byte) []byte) []byte {
	b, at := sse.Begin(b, typ)
	b = append(b, `{"type":"`...)
	b = append(b, typ...)
	b = append(b, `","sequence_number":`...)
	b = strconv.AppendInt(b, int64(o.seq), 10)
	o.seq++
	b = body(b)
	return sse.End(append(b, '}'), at)
}

// appendBroken ends a relayed Responses stream that broke with an error event, as
// OpenAI's streams report an error outside a response (brokenAppender):
// {"type":"error","code","message","param","sequence_number"}, the sequence number
// following the events relayed (one each, from 0).
func (c *responsesCodec) appendBroken(b []byte, events int, e *apiError) []byte {
	b, at := sse.Begin(b, "error")
	b = append(b, `{"type":"error","code":`...)
	b = jsonenc.AppendString(b, e.code)
	b = append(b, `,"message":`...)
	b = jsonenc.AppendString(b, e.message)
	b = append(b, `,"param":null,"sequence_number":`...)
	b = strconv.AppendInt(b, int64(events), 10)
	return sse.End(append(b, '}'), at)
}

// itemID is the id of output item k: a message "msg_…", a function call "fc_…".
func (o *respOutput) itemID(typ string, k int) string {
	p := "msg_"
	if typ == "function_call" {
		p = "fc_"
	}
	return p + o.hex + "_" + strconv.Itoa(k)
}

func (o *respOutput) appendEvent(b []byte, ev *outEvent) []byte {
	if ev.choice != 0 {
		return b // one output per response
	}
	switch ev.kind {
	case outStart:
		b = o.event(b, "response.created", func(b []byte) []byte {
			b = append(b, `,"response":`...)
			return o.appendResponse(b, "in_progress")
		})
		b = o.event(b, "response.in_progress", func(b []byte) []byte {
			b = append(b, `,"response":`...)
			return o.appendResponse(b, "in_progress")
		})
	case outText:
		if ev.text == "" {
			return b
		}
		if o.open != openText {
			b = o.closeItem(b)
			b = o.openItem(b, respItem{Type: "message", Role: "assistant"})
		}
		o.text.WriteString(ev.text)
		k := len(o.items) - 1
		b = o.event(b, "response.output_text.delta", func(b []byte) []byte {
			b = o.appendItemRef(b, k)
			b = append(b, `,"content_index":0,"delta":`...)
			b = jsonenc.AppendString(b, ev.text)
			return append(b, `,"logprobs":[]`...)
		})
	case outCall:
		if ev.name != "" || ev.callID != "" { // a call begins
			// parallel_tool_calls false: one call, the others dropped.
			if o.skip = !o.m.in.feat.parallel && o.hasCall(); o.skip {
				return b
			}
			b = o.closeItem(b)
			b = o.openItem(b, respItem{Type: "function_call", CallID: ev.callID, Name: ev.name})
		}
		if o.skip || o.open != openCall || ev.args == "" {
			return b
		}
		o.args.WriteString(ev.args)
		k := len(o.items) - 1
		b = o.event(b, "response.function_call_arguments.delta", func(b []byte) []byte {
			b = o.appendItemRef(b, k)
			b = append(b, `,"delta":`...)
			return jsonenc.AppendString(b, ev.args)
		})
	case outFinish:
		b = o.closeItem(b)
		o.finish = ev.finish
	case outUsage:
		o.usage = ev.usage
	case outError:
		b = o.closeItem(b)
		o.err = ev.err
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
func (o *respOutput) hasCall() bool {
	for _, it := range o.items {
		if it.Type == "function_call" {
			return true
		}
	}
	return false
}

// appendItemRef appends the members that name output item k in an event.
func (o *respOutput) appendItemRef(b []byte, k int) []byte {
	b = append(b, `,"item_id":`...)
	b = jsonenc.AppendString(b, o.items[k].ID)
	b = append(b, `,"output_index":`...)
	return strconv.AppendInt(b, int64(k), 10)
}

// openItem begins output item it while streaming: response.output_item.added, and
// for a message its content part (response.content_part.added).
func (o *respOutput) openItem(b []byte, it respItem) []byte {
	k := len(o.items)
	it.ID = o.itemID(it.Type, k)
	o.items = append(o.items, it)
	b = o.event(b, "response.output_item.added", func(b []byte) []byte {
		b = append(b, `,"output_index":`...)
		b = strconv.AppendInt(b, int64(k), 10)
		b = append(b, `,"item":`...)
		return openai.AppendOutputItem(b, &it, "in_progress", false)
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
func (o *respOutput) closeItem(b []byte) []byte {
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
		return openai.AppendOutputItem(b, it, "completed", false)
	})
}

// finished is told the request's end once it is settled (before a stream's
// outFinish events, which a client gone no longer gets rendered): its finish, so
// that appendEnd stores what the request was, or its failure.
func (o *respOutput) finished(w *whole, err *apiError) {
	if err != nil {
		o.failed = true
		return
	}
	if w != nil && len(w.choices) > 0 {
		o.finish = w.choices[0].finish
	}
}

// appendEnd ends the stream: the response stored, then response.completed (or
// response.incomplete, with the reason). After a failure (response.failed) nothing.
func (o *respOutput) appendEnd(b []byte) []byte {
	if o.err != nil || o.failed {
		return b
	}
	b = o.closeItem(b)
	status := o.status()
	if status == "cancelled" {
		return b // the client is gone
	}
	o.store(status)
	typ := "response.completed"
	if status == "incomplete" {
		typ = "response.incomplete"
	}
	return o.event(b, typ, func(b []byte) []byte {
		b = append(b, `,"response":`...)
		return o.appendResponse(b, status)
	})
}

// appendWhole appends the Response object of a request answered whole, stored first.
func (o *respOutput) appendWhole(b []byte, w *whole) []byte {
	if len(w.choices) > 0 {
		ch := &w.choices[0]
		calls := ch.calls
		if !o.m.in.feat.parallel && len(calls) > 1 {
			calls = calls[:1]
		}
		if ch.content != "" || len(calls) == 0 {
			o.items = append(o.items, respItem{Type: "message", ID: o.itemID("message", 0), Role: "assistant", Text: ch.content})
		}
		for _, c := range calls {
			o.items = append(o.items, respItem{Type: "function_call", ID: o.itemID("function_call", len(o.items)), CallID: c.id, Name: c.name, Arguments: c.arguments})
		}
		o.finish = ch.finish
	}
	o.usage = w.usage
	status := o.status()
	o.store(status)
	return o.appendResponse(b, status)
}

// status is the response's status once its output ended: incomplete when the output
// reached max_output_tokens (or the model's limit), cancelled when the client left.
func (o *respOutput) status() string {
	switch o.finish {
	case "length":
		return "incomplete"
	case "cancelled":
		return "cancelled"
	}
	return "completed"
}

// store keeps the response for its tenant when the request asked (store: true),
// once: its Response object and its conversation (the input items, ids given to
// those that had none, and the output's items), within the plan's limits
// (admitStore kept them). A Put that fails is logged and the answer goes on, not
// stored: the Response it carries says "store": false (a GET of its id is a 404), as
// when the request said so. That is a race at the limit (requests admitted together,
// the last Puts refused: respstore's Put is atomic, so the limit is never passed), a
// response whose own size passes responses_max_bytes, or the store down.
func (o *respOutput) store(status string) {
	if o.stored || o.failed || !o.ri.store || o.c.store == nil || status == "cancelled" {
		return
	}
	o.stored = true
	in := make([]respItem, len(o.ri.own))
	seen := make(map[string]bool, len(in))
	for i, it := range o.ri.own {
		if !validItemID(it.ID) || seen[it.ID] { // ids are unique in a response's list, and fit a store's keys
			it.ID = inputItemID(it.Type, o.hex, i)
		}
		seen[it.ID] = true
		in[i] = it
	}
	r := &storedResponse{ID: "resp_" + o.hex, Tenant: o.m.tenant, Created: o.m.created, Model: o.m.model, Previous: o.ri.previous,
		Input: in, Output: append([]respItem(nil), o.items...), Body: o.appendResponse(nil, status)}
	err := o.c.store.Put(context.Background(), r, o.ri.limits)
	if err == nil {
		return
	}
	o.lost = true
	var le *respstore.LimitError
	switch {
	case o.c.log == nil:
	case errors.As(err, &le):
		o.c.log.Warn("responses: not stored: the tenant's stored responses reached the plan's limit since the request was admitted, or this response passes it",
			"request_id", o.m.reqID, "tenant", o.m.tenant, "limit", le.Limit, "max", le.Max)
	default:
		o.c.log.Error("responses: store", "request_id", o.m.reqID, "error", err)
	}
}

// validItemID reports whether a client's item id is kept as it is: 1 to 256
// printable ASCII bytes without spaces, '/', '{' or '}' (respstore's ids).
func validItemID(s string) bool {
	if len(s) == 0 || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c > '~' || c == '/' || c == '{' || c == '}' {
			return false
		}
	}
	return true
}

// inputItemID is the id of input item i of the response whose request id's hex is
// hex, for an item the client sent without one.
func inputItemID(typ, hex string, i int) string {
	p := "msg_"
	switch typ {
	case "function_call":
		p = "fc_"
	case "function_call_output":
		p = "fco_"
	}
	return p + hex + "_in" + strconv.Itoa(i)
}

// appendResponse appends the Response object with status: its id, model, output
// items, usage (once known), error and incomplete_details, and the request's echo.
func (o *respOutput) appendResponse(b []byte, status string) []byte {
	b = append(b, `{"id":"resp_`...)
	b = append(b, o.hex...) // the request id's hex digits: nothing to escape
	b = append(b, `","object":"response","created_at":`...)
	b = strconv.AppendInt(b, o.m.created, 10)
	b = append(b, `,"status":"`...)
	b = append(b, status...)
	b = append(b, `","model":`...)
	b = jsonenc.AppendString(b, o.m.model)
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
		b = openai.AppendOutputItem(b, &o.items[i], st, true)
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
		code := o.err.code
		if code == "" {
			code = "server_error"
		}
		b = append(b, `{"code":`...)
		b = jsonenc.AppendString(b, code)
		b = append(b, `,"message":`...)
		b = jsonenc.AppendString(b, o.err.message)
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
	if echo := o.ri.echo; o.lost && o.ri.storeAt > 0 {
		b = append(b, echo[:o.ri.storeAt]...)
		b = append(b, "false"...)
		b = append(b, echo[o.ri.storeAt+len("true"):]...)
	} else {
		b = append(b, echo...)
	}
	return append(b, '}')
}
