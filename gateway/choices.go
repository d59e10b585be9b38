package gateway

import (
	"bufio"
	"context"
	"iter"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/toolcall"
	"github.com/lmlite/lmlite/internal/jsonenc"
	"github.com/lmlite/lmlite/tenancy"
)

// This file answers the requests that need more than one text: n choices, logprobs,
// tool calls parsed from the output, or the prompt echoed (respondChoices). Plain
// requests take respondEmbedded's shorter path.

// choiceOut is what one choice produced.
type choiceOut struct {
	text   strings.Builder // the output text (completions with echo: the prompt first)
	parser *toolcall.Parser
	lps    []engine.Token // tokens with their logprobs, not yet sent (streams) or all
	prompt []engine.Token // echo with logprobs: the prompt's tokens with theirs (engine.Request.PromptLogprobs)
	echoed bool           // streams: the echo chunk is written
	offset int            // completions: the text's length before the next token
	calls  int            // tool calls begun
	held   string         // white space after the content so far: dropped if a call follows
	usage  engine.Usage
	err    error
}

// tokenEvent is a token of choice i, or (end) the end of its stream.
type tokenEvent struct {
	i   int
	tok engine.Token
	end bool
}

// The select in events has one case per possible choice.
const _ = uint(engine.MaxChoices-8) + uint(8-engine.MaxChoices)

// events reads every choice's stream from the calling goroutine, none waiting for
// another's reader (a stream never blocks its producer): it waits for any stream's
// Ready and takes what each has. A stream's tokens come in order, then its end event
// (its usage and error stored in outs first). onTick runs at each tick while it
// waits (tick nil: never).
func events(streams []*engine.Stream, outs []choiceOut, tick <-chan time.Time, onTick func()) iter.Seq[tokenEvent] {
	return func(yield func(tokenEvent) bool) {
		var ready [engine.MaxChoices]<-chan struct{}
		bufs := make([][]engine.Token, len(streams))
		for i, st := range streams {
			ready[i] = st.Ready()
		}
		left := len(streams)
		for left > 0 {
			select {
			case <-ready[0]:
			case <-ready[1]:
			case <-ready[2]:
			case <-ready[3]:
			case <-ready[4]:
			case <-ready[5]:
			case <-ready[6]:
			case <-ready[7]:
			case <-tick:
				onTick()
				continue
			}
			for i, st := range streams {
				if ready[i] == nil {
					continue
				}
				toks, done := st.Take(bufs[i])
				bufs[i] = toks
				for _, t := range toks {
					if !yield(tokenEvent{i: i, tok: t}) {
						return
					}
				}
				if done {
					ready[i] = nil
					left--
					outs[i].usage, outs[i].err = st.Wait(context.Background())
					if !yield(tokenEvent{i: i, end: true}) {
						return
					}
				}
			}
		}
	}
}

// total is the request's usage: the prompt once, every choice's output tokens; the
// first error of a choice.
func total(outs []choiceOut) (engine.Usage, error) {
	u := outs[0].usage
	var err error
	for i := range outs {
		if i > 0 {
			u.CompletionTokens += outs[i].usage.CompletionTokens
			if outs[i].usage.FinishReason == engine.FinishCancelled {
				u.FinishReason = engine.FinishCancelled
			}
		}
		if err == nil {
			err = outs[i].err
		}
	}
	return u, err
}

func (j *job) newOuts() []choiceOut {
	outs := make([]choiceOut, len2(j.in.feat.n))
	for i := range outs {
		if j.c.parse {
			outs[i].parser = toolcall.New(j.c.syntax)
		}
		if j.in.feat.echo {
			outs[i].text.WriteString(j.in.prompt)
		}
	}
	return outs
}

func len2(n int) int { return max(n, 1) }

// callID is the id of tool call k of choice i: unique in the server's answers (the
// request id is) and the same for the same request id.
func (j *job) callID(i, k int) string {
	return "call_" + strings.TrimPrefix(j.reqID, "req_") + "_" + strconv.Itoa(i) + "_" + strconv.Itoa(k)
}

// contentOf is the content an event of the tool-call parser sends now: white space
// before a call is dropped (a message that only calls tools has null content), so
// it is held until text that is not white space follows. A call drops it.
func (o *choiceOut) contentOf(e toolcall.Event) string {
	if e.Call {
		o.held = ""
		if e.Name != "" {
			o.calls = max(o.calls, e.Index+1)
		}
		return ""
	}
	text := o.held + e.Content
	send := strings.TrimRight(text, " \t\r\n")
	o.held = text[len(send):]
	return send
}

// flush is the held white space at the end of an output, kept when no call came.
func (o *choiceOut) flush() string {
	h := o.held
	o.held = ""
	if o.calls > 0 {
		return ""
	}
	return h
}

// parseWhole parses a whole output as streamChoices does piece by piece: the
// content and the calls; ok is false when a call does not parse (the output is
// then content as it is).
func (o *choiceOut) parseWhole(text string) (content string, calls []toolcall.Call, ok bool) {
	ev := o.parser.Feed(text)
	tail, err := o.parser.Finish()
	if err != nil {
		return text, nil, false
	}
	var sb strings.Builder
	for _, e := range append(ev, tail...) {
		sb.WriteString(o.contentOf(e))
	}
	sb.WriteString(o.flush())
	_, calls = toolcall.Collect(append(ev, tail...))
	return sb.String(), calls, true
}

// respondChoices answers from the choices' streams, as JSON or as server-sent events.
func (j *job) respondChoices(ctx *fasthttp.RequestCtx, streams []*engine.Stream, cancel context.CancelFunc) bool {
	j.setRouteHeaders(ctx)
	id := j.newID()
	outs := j.newOuts()
	if j.in.stream {
		ctx.SetContentType("text/event-stream")
		ctx.Response.Header.Set("Cache-Control", "no-cache")
		ctx.Response.Header.Set("X-Accel-Buffering", "no")
		ctx.SetBodyStreamWriter(keepAlive(ctx, func(w *bufio.Writer) {
			defer func() {
				j.s.inFlight.Add(-1)
				j.s.wg.Done()
			}()
			j.streamChoices(w, events(streams, outs, nil, nil), outs, cancel, id)
		}))
		return true
	}
	conn := ctx.Conn()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	closed := func() {
		if connClosed(conn) {
			cancel() // the client went away: stop generating
		}
	}
	for ev := range events(streams, outs, tick.C, closed) {
		if ev.end {
			continue
		}
		o := &outs[ev.i]
		if ev.tok.Prompt {
			o.prompt = append(o.prompt, ev.tok)
			continue
		}
		o.text.WriteString(ev.tok.Text)
		if j.in.feat.logprobs && ev.tok.ID >= 0 {
			o.lps = append(o.lps, ev.tok)
		}
	}
	cancel()
	j.s.pred.End(j.c.m.id)
	u, err := total(outs)
	j.observeLatency(outs[0].usage, outs[0].err)
	status := statusOf(u, err)
	j.settle(tenancy.Entry{Status: status, Finish: u.FinishReason, PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens}, &u)
	if err != nil && status != 499 {
		j.s.writeError(ctx, j.reqID, generationError(err))
		return false
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(j.appendChoices(make([]byte, 0, 1024), id, outs, u))
	return false
}

// appendChoices appends a whole response with every choice.
func (j *job) appendChoices(b []byte, id string, outs []choiceOut, u engine.Usage) []byte {
	chat := j.in.kind == kindChat
	if chat {
		b = j.appendHead(b, id, "chat.completion")
	} else {
		b = j.appendHead(b, id, "text_completion")
	}
	b = append(b, `,"choices":[`...)
	for i := range outs {
		o := &outs[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"index":`...)
		b = strconv.AppendInt(b, int64(i), 10)
		finish := finishReason(o.usage.FinishReason)
		if !chat {
			b = append(b, `,"text":`...)
			b = jsonenc.AppendString(b, o.text.String())
			b = append(b, `,"logprobs":`...)
			if j.in.feat.logprobs {
				off := 0
				if j.in.feat.echo {
					off = len(j.in.prompt)
				}
				b = appendLegacyLogprobs(b, o.prompt, len(j.in.prompt), o.lps, off)
			} else {
				b = append(b, "null"...)
			}
		} else {
			content := o.text.String()
			var calls []toolcall.Call
			if o.parser != nil {
				c, cs, ok := o.parseWhole(content)
				if ok && len(cs) > 0 {
					content, calls = c, cs
					if !j.in.feat.parallel {
						calls = calls[:1]
					}
					finish = "tool_calls"
				}
			}
			b = append(b, `,"message":{"role":"assistant","content":`...)
			if len(calls) > 0 && content == "" {
				b = append(b, "null"...)
			} else {
				b = jsonenc.AppendString(b, content)
			}
			if len(calls) > 0 && j.in.feat.legacy { // the functions API's answer: one call
				finish = "function_call"
				b = append(b, `,"function_call":{"name":`...)
				b = jsonenc.AppendString(b, calls[0].Name)
				b = append(b, `,"arguments":`...)
				b = jsonenc.AppendString(b, calls[0].Arguments)
				b = append(b, '}')
			} else if len(calls) > 0 {
				b = append(b, `,"tool_calls":[`...)
				for k, c := range calls {
					if k > 0 {
						b = append(b, ',')
					}
					b = append(b, `{"id":`...)
					b = jsonenc.AppendString(b, j.callID(i, k))
					b = append(b, `,"type":"function","function":{"name":`...)
					b = jsonenc.AppendString(b, c.Name)
					b = append(b, `,"arguments":`...)
					b = jsonenc.AppendString(b, c.Arguments)
					b = append(b, "}}"...)
				}
				b = append(b, ']')
			}
			b = append(b, `,"refusal":null},"logprobs":`...)
			if j.in.feat.logprobs {
				b = appendChatLogprobs(b, o.lps)
			} else {
				b = append(b, "null"...)
			}
		}
		b = append(b, `,"finish_reason":"`...)
		b = append(b, finish...)
		b = append(b, `"}`...)
	}
	b = append(b, "],"...)
	b = appendUsage(b, u)
	return append(b, '}')
}

// appendFloat appends a logprob; -Inf (a token the model gives no chance) is
// OpenAI's floor, -9999.
func appendFloat(b []byte, f float32) []byte {
	if math.IsInf(float64(f), -1) || math.IsNaN(float64(f)) {
		return append(b, "-9999.0"...)
	}
	return strconv.AppendFloat(b, float64(f), 'g', -1, 32)
}

// appendTokenLogprob appends OpenAI's {"token", "logprob", "bytes"} members.
func appendTokenLogprob(b []byte, piece string, lp float32) []byte {
	b = append(b, `"token":`...)
	b = jsonenc.AppendString(b, piece)
	b = append(b, `,"logprob":`...)
	b = appendFloat(b, lp)
	b = append(b, `,"bytes":[`...)
	for k := 0; k < len(piece); k++ {
		if k > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(piece[k]), 10)
	}
	return append(b, ']')
}

// appendChatLogprobs appends a chat choice's logprobs object for tokens.
func appendChatLogprobs(b []byte, toks []engine.Token) []byte {
	b = append(b, `{"content":[`...)
	for i, t := range toks {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '{')
		b = appendTokenLogprob(b, t.Piece, t.Logprob)
		b = append(b, `,"top_logprobs":[`...)
		for k, tl := range t.TopLogprobs {
			if k > 0 {
				b = append(b, ',')
			}
			b = append(b, '{')
			b = appendTokenLogprob(b, tl.Piece, tl.Logprob)
			b = append(b, '}')
		}
		b = append(b, "]}"...)
	}
	return append(b, `],"refusal":null}`...)
}

// appendLegacyLogprobs appends a text completion's logprobs object (OpenAI's legacy
// shape): tokens, token_logprobs, top_logprobs (token → logprob) and text_offset,
// for the echoed prompt's tokens (the first with null logprobs: nothing precedes
// it), their offsets counted from 0 within the prompt's plen bytes, then the
// output's tokens, their offsets in the choice's text counted from off.
func appendLegacyLogprobs(b []byte, prompt []engine.Token, plen int, toks []engine.Token, off int) []byte {
	all := func(yield func(int, engine.Token) bool) {
		for i, t := range prompt {
			if !yield(i, t) {
				return
			}
		}
		for i, t := range toks {
			if !yield(len(prompt)+i, t) {
				return
			}
		}
	}
	b = append(b, `{"tokens":[`...)
	for i, t := range all {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonenc.AppendString(b, t.Piece)
	}
	b = append(b, `],"token_logprobs":[`...)
	for i, t := range all {
		if i > 0 {
			b = append(b, ',')
		}
		if i == 0 && len(prompt) > 0 {
			b = append(b, "null"...)
			continue
		}
		b = appendFloat(b, t.Logprob)
	}
	b = append(b, `],"top_logprobs":[`...)
	for i, t := range all {
		if i > 0 {
			b = append(b, ',')
		}
		if i == 0 && len(prompt) > 0 {
			b = append(b, "null"...)
			continue
		}
		b = append(b, '{')
		seen := 0
		for _, tl := range t.TopLogprobs {
			if dupPiece(t.TopLogprobs, tl) {
				continue
			}
			if seen > 0 {
				b = append(b, ',')
			}
			seen++
			b = jsonenc.AppendString(b, tl.Piece)
			b = append(b, ':')
			b = appendFloat(b, tl.Logprob)
		}
		b = append(b, '}')
	}
	b = append(b, `],"text_offset":[`...)
	poff := 0
	for i, t := range all {
		if i > 0 {
			b = append(b, ',')
		}
		if i < len(prompt) {
			b = strconv.AppendInt(b, int64(poff), 10)
			poff = min(poff+len(t.Text), plen)
			continue
		}
		b = strconv.AppendInt(b, int64(off), 10)
		off += len(t.Text)
	}
	return append(b, "]}"...)
}

// dupPiece reports whether an earlier (more likely) entry of top has tl's text: a
// JSON object keeps one member per name, the most likely.
func dupPiece(top []engine.TopLogprob, tl engine.TopLogprob) bool {
	for _, o := range top {
		if o.ID == tl.ID {
			return false
		}
		if o.Piece == tl.Piece {
			return true
		}
	}
	return false
}

// streamChoices writes the server-sent events of every choice as its tokens come:
// chat deltas of content or tool calls (index, id, function name first, then
// argument fragments) with their tokens' logprobs, each chunk naming its choice.
func (j *job) streamChoices(w *bufio.Writer, events iter.Seq[tokenEvent], outs []choiceOut, cancel context.CancelFunc, id string) {
	chat := j.in.kind == kindChat
	buf := make([]byte, 0, 1024)
	delta := make([]byte, 0, 256)
	gone := false
	write := func(b []byte) {
		if gone {
			return
		}
		w.Write(b)
		if w.Flush() != nil {
			gone = true
			cancel()
		}
	}
	for i := range outs {
		if chat {
			buf = j.appendChoiceChunk(buf[:0], id, i, []byte(`"role":"assistant","content":""`), nil, "")
			write(buf)
		} else if j.in.feat.echo && !j.in.feat.logprobs {
			delta = jsonenc.AppendString(delta[:0], j.in.prompt)
			buf = j.appendChoiceChunk(buf[:0], id, i, delta, nil, "")
			write(buf)
			outs[i].offset = len(j.in.prompt)
		}
	}
	// echo writes choice i's echo chunk with the prompt's logprobs, once they have
	// all come (before the choice's first output token or its end).
	echo := func(i int, o *choiceOut) {
		if chat || !j.in.feat.echo || !j.in.feat.logprobs || o.echoed {
			return
		}
		o.echoed = true
		delta = jsonenc.AppendString(delta[:0], j.in.prompt)
		buf = j.appendChoiceChunk(buf[:0], id, i, delta, o, "")
		write(buf)
	}
	// emit writes what a piece of choice i's text gives: content or tool-call deltas.
	emit := func(i int, o *choiceOut, evs []toolcall.Event) {
		for _, e := range evs {
			delta = delta[:0]
			switch {
			case !e.Call:
				text := o.contentOf(e)
				if text == "" {
					continue
				}
				delta = append(delta, `"content":`...)
				delta = jsonenc.AppendString(delta, text)
			case !j.in.feat.parallel && e.Index > 0:
				continue
			case j.in.feat.legacy: // the functions API's delta: function_call
				o.contentOf(e)
				delta = append(delta, `"function_call":{`...)
				if e.Name != "" {
					delta = append(delta, `"name":`...)
					delta = jsonenc.AppendString(delta, e.Name)
					delta = append(delta, ',')
				}
				delta = append(delta, `"arguments":`...)
				delta = jsonenc.AppendString(delta, e.Arguments)
				delta = append(delta, '}')
			default:
				o.contentOf(e)
				delta = append(delta, `"tool_calls":[{"index":`...)
				delta = strconv.AppendInt(delta, int64(e.Index), 10)
				if e.Name != "" {
					delta = append(delta, `,"id":`...)
					delta = jsonenc.AppendString(delta, j.callID(i, e.Index))
					delta = append(delta, `,"type":"function","function":{"name":`...)
					delta = jsonenc.AppendString(delta, e.Name)
					delta = append(delta, `,"arguments":`...)
				} else {
					delta = append(delta, `,"function":{"arguments":`...)
				}
				delta = jsonenc.AppendString(delta, e.Arguments)
				delta = append(delta, "}}]"...)
			}
			buf = j.appendChoiceChunk(buf[:0], id, i, delta, o, "")
			write(buf)
		}
	}
	for ev := range events {
		if gone {
			continue
		}
		o := &outs[ev.i]
		if ev.tok.Prompt {
			o.prompt = append(o.prompt, ev.tok)
			continue
		}
		echo(ev.i, o)
		if ev.end {
			if o.parser != nil {
				if evs, err := o.parser.Finish(); err == nil {
					emit(ev.i, o, evs)
				}
				if h := o.flush(); h != "" {
					delta = jsonenc.AppendString(append(delta[:0], `"content":`...), h)
					buf = j.appendChoiceChunk(buf[:0], id, ev.i, delta, o, "")
					write(buf)
				}
			}
			continue
		}
		t := ev.tok
		if j.in.feat.logprobs && t.ID >= 0 {
			o.lps = append(o.lps, t)
		}
		if t.Text == "" {
			continue // a character still split across tokens: its logprobs go with the next chunk
		}
		switch {
		case o.parser != nil:
			emit(ev.i, o, o.parser.Feed(t.Text))
		case chat:
			delta = jsonenc.AppendString(append(delta[:0], `"content":`...), t.Text)
			buf = j.appendChoiceChunk(buf[:0], id, ev.i, delta, o, "")
			write(buf)
		default:
			delta = jsonenc.AppendString(delta[:0], t.Text)
			buf = j.appendChoiceChunk(buf[:0], id, ev.i, delta, o, "")
			write(buf)
		}
	}
	cancel()
	j.s.pred.End(j.c.m.id)
	u, err := total(outs)
	j.observeLatency(outs[0].usage, outs[0].err)
	status := statusOf(u, err)
	if gone {
		status = 499
	}
	j.settle(tenancy.Entry{Status: status, Finish: u.FinishReason, PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens}, &u)
	if err != nil && status != 499 {
		buf = append(buf[:0], "data: "...)
		buf = appendErrorJSON(buf, generationError(err))
		buf = append(buf, "\n\n"...)
		write(buf)
	} else {
		for i := range outs {
			o := &outs[i]
			finish := finishReason(o.usage.FinishReason)
			if o.calls > 0 {
				finish = "tool_calls"
				if j.in.feat.legacy {
					finish = "function_call"
				}
			}
			delta = delta[:0]
			if !chat {
				delta = append(delta, `""`...)
			}
			buf = j.appendChoiceChunk(buf[:0], id, i, delta, o, finish)
			write(buf)
		}
		if j.in.usage {
			buf = j.appendUsageChunk(buf[:0], id, u)
			write(buf)
		}
	}
	write([]byte("data: [DONE]\n\n"))
}

// appendChoiceChunk appends one SSE event for choice i: delta holds the chat delta's
// members (or a completion's text as a JSON string); the logprobs of o's tokens not
// yet sent go with it; finish is "" until the choice's last chunk.
func (j *job) appendChoiceChunk(b []byte, id string, i int, delta []byte, o *choiceOut, finish string) []byte {
	b = append(b, "data: "...)
	chat := j.in.kind == kindChat
	if chat {
		b = j.appendHead(b, id, "chat.completion.chunk")
	} else {
		b = j.appendHead(b, id, "text_completion")
	}
	b = append(b, `,"choices":[{"index":`...)
	b = strconv.AppendInt(b, int64(i), 10)
	if chat {
		b = append(b, `,"delta":{`...)
		b = append(b, delta...)
		b = append(b, `},"logprobs":`...)
	} else {
		b = append(b, `,"text":`...)
		b = append(b, delta...)
		b = append(b, `,"logprobs":`...)
	}
	switch {
	case o == nil || !j.in.feat.logprobs || (len(o.lps) == 0 && o.prompt == nil && finish != ""):
		b = append(b, "null"...)
	case chat:
		b = appendChatLogprobs(b, o.lps)
		o.lps = o.lps[:0]
	case o.prompt != nil:
		b = appendLegacyLogprobs(b, o.prompt, len(j.in.prompt), nil, 0)
		o.prompt, o.offset = nil, len(j.in.prompt)
	default:
		b = appendLegacyLogprobs(b, nil, 0, o.lps, o.offset)
		for _, t := range o.lps {
			o.offset += len(t.Text)
		}
		o.lps = o.lps[:0]
	}
	b = append(b, `,"finish_reason":`...)
	if finish == "" {
		b = append(b, "null"...)
	} else {
		b = append(b, '"')
		b = append(b, finish...)
		b = append(b, '"')
	}
	b = append(b, "}]"...)
	if j.in.usage {
		b = append(b, `,"usage":null`...)
	}
	return append(b, "}\n\n"...)
}
