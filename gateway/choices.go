package gateway

import (
	"bufio"
	"context"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/toolcall"
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
					outs[i].usage = billed(outs[i].usage)
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
			u.PredictionAccepted += outs[i].usage.PredictionAccepted
			u.PredictionRejected += outs[i].usage.PredictionRejected
			u.DraftTokens += outs[i].usage.DraftTokens
			u.AcceptedTokens += outs[i].usage.AcceptedTokens
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
	outs := make([]choiceOut, len2(j.in.feat.N))
	for i := range outs {
		if j.c.parse {
			outs[i].parser = toolcall.New(j.c.syntax)
		}
		if j.in.feat.Echo {
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
	j.startOutput(ctx)
	outs := j.newOuts()
	if j.in.stream {
		j.streamTo(ctx, func(w *bufio.Writer) {
			j.streamChoices(w, events(streams, outs, nil, nil), outs, cancel)
		})
		return true
	}
	conn := connOf(ctx)
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
		if j.in.feat.Logprobs && ev.tok.ID >= 0 {
			o.lps = append(o.lps, ev.tok)
		}
	}
	cancel()
	j.s.pred.End(j.c.m.id)
	u, err := total(outs)
	j.observeLatency(outs[0].usage, outs[0].err)
	status := statusOf(u, err)
	j.settle(tenancy.Entry{Status: status, Finish: u.FinishReason, PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens}, &u)
	j.whole = j.wholeOf(outs, u, false)
	j.answerWhole(ctx, &j.whole, status, err, 1024)
	return false
}

// wholeOf is the whole result of the choices' outputs (their text, their
// tokens with logprobs): a chat choice's text parsed into its content and tool calls
// (at most one when parallel_tool_calls is false; none when a call does not parse),
// its finish "tool_calls" (or the functions API's "function_call") when it made one.
// streamed: the text was parsed as it came (the parser is spent: a new one parses it).
func (j *job) wholeOf(outs []choiceOut, u engine.Usage, streamed bool) whole {
	w := whole{Choices: make([]wholeChoice, len(outs)), Usage: u}
	for i := range outs {
		o, c := &outs[i], &w.Choices[i]
		c.Content, c.Finish, c.Tokens, c.Prompt = o.text.String(), coreFinish(o.usage.FinishReason), o.lps, o.prompt
		if o.parser == nil {
			continue
		}
		p := o
		if streamed {
			p = &choiceOut{parser: toolcall.New(j.c.syntax)}
		}
		content, calls, ok := p.parseWhole(c.Content)
		if !ok || len(calls) == 0 {
			continue
		}
		if !j.in.feat.Parallel {
			calls = calls[:1]
		}
		c.Content, c.Finish = content, "tool_calls"
		if j.in.feat.Legacy {
			c.Finish = "function_call"
		}
		c.Calls = make([]wholeCall, len(calls))
		for k, tc := range calls {
			c.Calls[k] = wholeCall{ID: j.callID(i, k), Name: tc.Name, Arguments: tc.Arguments}
		}
	}
	return w
}

// streamChoices writes the server-sent events of every choice as its tokens come:
// content text or tool-call fragments (a call's index, id and function name first,
// then its arguments' fragments) with their tokens' logprobs, as the output renders
// them.
func (j *job) streamChoices(w *bufio.Writer, events iter.Seq[tokenEvent], outs []choiceOut, cancel context.CancelFunc) {
	sw := newSSEWriter(w, j.out, cancel)
	_, keep := j.out.(finisher) // it is told the whole: keep the text
	f := &j.in.feat
	ev := &sw.ev
	// send renders ev for choice i with o's logprobs not yet sent.
	send := func(i int, o *choiceOut) {
		ev.Choice, ev.Tokens = i, o.lps
		sw.event(ev)
		o.lps = o.lps[:0]
	}
	for i := range outs {
		*ev = outEvent{Kind: outStart, Choice: i}
		sw.event(ev)
		if f.Echo && !f.Logprobs {
			outs[i].echoed = true
			*ev = outEvent{Kind: outText, Choice: i, Text: j.in.prompt, Echo: true}
			sw.event(ev)
		}
	}
	// echo sends choice i's echo with the prompt's logprobs, once they have all come
	// (before the choice's first output token or its end).
	echo := func(i int, o *choiceOut) {
		if !f.Echo || o.echoed {
			return
		}
		o.echoed = true
		*ev = outEvent{Kind: outText, Choice: i, Text: j.in.prompt, Echo: true, Tokens: o.prompt}
		sw.event(ev)
	}
	// emit sends what a piece of choice i's text gives: content or tool-call fragments.
	emit := func(i int, o *choiceOut, evs []toolcall.Event) {
		for _, e := range evs {
			switch {
			case !e.Call:
				text := o.contentOf(e)
				if text == "" {
					continue
				}
				*ev = outEvent{Kind: outText, Text: text}
			case !f.Parallel && e.Index > 0:
				continue
			default:
				o.contentOf(e)
				*ev = outEvent{Kind: outCall, Call: e.Index, Args: e.Arguments}
				if e.Name != "" {
					ev.Name, ev.CallID = e.Name, j.callID(i, e.Index)
				}
			}
			send(i, o)
		}
	}
	for te := range events {
		if sw.gone {
			continue
		}
		o := &outs[te.i]
		if te.tok.Prompt {
			o.prompt = append(o.prompt, te.tok)
			continue
		}
		echo(te.i, o)
		if te.end {
			if o.parser != nil {
				if evs, err := o.parser.Finish(); err == nil {
					emit(te.i, o, evs)
				}
				if h := o.flush(); h != "" {
					*ev = outEvent{Kind: outText, Text: h}
					send(te.i, o)
				}
			}
			continue
		}
		t := te.tok
		if f.Logprobs && t.ID >= 0 {
			o.lps = append(o.lps, t)
		}
		if t.Text == "" {
			continue // a character still split across tokens: its logprobs go with the next chunk
		}
		if keep {
			o.text.WriteString(t.Text)
		}
		if o.parser != nil {
			emit(te.i, o, o.parser.Feed(t.Text))
			continue
		}
		*ev = outEvent{Kind: outText, Text: t.Text}
		send(te.i, o)
	}
	cancel()
	j.s.pred.End(j.c.m.id)
	u, err := total(outs)
	j.observeLatency(outs[0].usage, outs[0].err)
	status := statusOf(u, err)
	if sw.gone {
		status = 499
	}
	j.settle(tenancy.Entry{Status: status, Finish: u.FinishReason, PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens}, &u)
	if err != nil && status != 499 {
		e := generationError(err)
		j.finished(nil, e)
		*ev = outEvent{Kind: outError, Err: e.wire()}
		sw.event(ev)
		sw.end()
		return
	}
	if keep {
		j.whole = j.wholeOf(outs, u, true)
		j.finished(&j.whole, nil)
	}
	for i := range outs {
		o := &outs[i]
		*ev = outEvent{Kind: outFinish, Finish: coreFinish(o.usage.FinishReason)}
		if o.calls > 0 {
			ev.Finish = "tool_calls"
			if f.Legacy {
				ev.Finish = "function_call"
			}
		}
		send(i, o)
	}
	*ev = outEvent{Kind: outUsage, Usage: u}
	sw.event(ev)
	sw.end()             // a Responses output stores here
	j.settleCarried(nil) // if no stored response carried the settlement
}
