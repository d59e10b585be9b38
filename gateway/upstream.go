package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/gateway/openai"
	"github.com/lmlite/lmlite/internal/jsonenc"
	"github.com/lmlite/lmlite/internal/sse"
	"github.com/lmlite/lmlite/tenancy"
)

// upstream is a model served by another OpenAI-compatible server, reached through a
// fasthttp.HostClient (a keep-alive connection pool per upstream host, shared by the
// models on it); responses pass through, streams event by event.
type upstream struct {
	baseURL string // for the log only: an error body never names it
	chatURL string // base URL + "/chat/completions"
	compURL string // base URL + "/completions"
	model   string // the model's name there
	auth    string // "Bearer KEY" or ""
	timeout time.Duration
	client  *fasthttp.HostClient
}

func newUpstream(id string, cu Upstream, clients map[string]*fasthttp.HostClient) (*upstream, error) {
	base := strings.TrimRight(cu.BaseURL, "/")
	pu, err := url.Parse(base)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		return nil, fmt.Errorf("gateway: model %q: upstream base_url %q is not an http(s) URL", id, cu.BaseURL)
	}
	tls := pu.Scheme == "https"
	key := pu.Scheme + "://" + pu.Host
	hc := clients[key]
	if hc == nil {
		hc = &fasthttp.HostClient{
			Addr:                     fasthttp.AddMissingPort(pu.Host, tls),
			IsTLS:                    tls,
			Name:                     "lmlite",
			NoDefaultUserAgentHeader: true,
			MaxConns:                 4096,
		}
		clients[key] = hc
	}
	u := &upstream{baseURL: pu.Redacted(), chatURL: base + "/chat/completions", compURL: base + "/completions", model: cu.Model, timeout: cu.Timeout, client: hc}
	if cu.APIKey != "" {
		u.auth = "Bearer " + cu.APIKey
	}
	return u, nil
}

// upstreamBody rewrites the client's body for the upstream: its model name, no
// "lmlite" member, usage always included in streams (for settling), and a
// completion's max_tokens made explicit. The body was already validated; one pass of
// jsontext (the JSON library that decoded it) copies its top-level members, raw,
// replacing or dropping those, and an unchanged body is forwarded as it is.
func (j *job) upstreamBody(body []byte) ([]byte, error) {
	u := j.c.m.upstream
	setModel := j.in.p.Model != u.model
	dropLMLite := j.in.p.LMLite != nil || bytes.Contains(body, []byte(`"lmlite"`))
	setUsage := j.in.stream && !j.in.usage
	setMax := j.in.kind == kindCompletion && j.in.maxDefault
	if !setModel && !dropLMLite && !setUsage && !setMax {
		return body, nil
	}
	p := getDecoder(body)
	defer putDecoder(p)
	dec := &p.d
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return nil, errors.New("the body is not a JSON object")
	}
	out := make([]byte, 0, len(body)+64)
	out = append(out, '{')
	member := func(quotedName, value []byte) {
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, quotedName...)
		out = append(out, ':')
		out = append(out, value...)
	}
	for dec.PeekKind() == '"' {
		name, err := dec.ReadValue() // the member's name as it is written, quoted
		if err != nil {
			return nil, err
		}
		v, err := dec.ReadValue()
		if err != nil {
			return nil, err
		}
		switch string(name) {
		case `"lmlite"`:
		case `"model"`:
			if !setModel {
				member(name, v)
			}
		case `"stream_options"`:
			if !setUsage {
				member(name, v)
			}
		case `"max_tokens"`:
			if !setMax {
				member(name, v)
			}
		default:
			member(name, v)
		}
	}
	if setModel {
		member([]byte(`"model"`), jsonenc.AppendString(nil, u.model))
	}
	if setUsage {
		member([]byte(`"stream_options"`), []byte(`{"include_usage":true}`))
	}
	if setMax {
		member([]byte(`"max_tokens"`), strconv.AppendInt(nil, int64(j.in.maxTokens), 10))
	}
	return append(out, '}'), nil
}

// upstreamUsage reads the usage and finish reason of an upstream response or event,
// walking its tokens with a pooled jsontext.Decoder (no allocation but an unusual
// finish reason). What it cannot read it leaves unset: a request without usage is
// charged its worst case.
func upstreamUsage(b []byte, e *tenancy.Entry) (hasUsage, hasChoices bool) {
	p := getDecoder(b)
	defer putDecoder(p)
	d := &p.d
	if tok, err := d.ReadToken(); err != nil || tok.Kind() != '{' {
		return false, false
	}
	for d.PeekKind() == '"' {
		name, err := d.ReadValue()
		if err != nil {
			return hasUsage, hasChoices
		}
		switch string(name) {
		case `"usage"`:
			if d.PeekKind() != '{' {
				break
			}
			prompt, completion, seen, ok := usageObject(d)
			if !ok {
				return hasUsage, hasChoices
			}
			if seen {
				e.PromptTokens, e.CompletionTokens, hasUsage = prompt, completion, true
			}
			continue
		case `"choices"`:
			if d.PeekKind() != '[' {
				break
			}
			d.ReadToken()
			if d.PeekKind() == '{' {
				hasChoices = true
				d.ReadToken()
				for d.PeekKind() == '"' {
					k, err := d.ReadValue()
					if err != nil {
						return hasUsage, hasChoices
					}
					v, err := d.ReadValue()
					if err != nil {
						return hasUsage, hasChoices
					}
					if string(k) == `"finish_reason"` && len(v) > 0 && v[0] == '"' {
						e.Finish = finishOf(v)
					}
				}
				d.ReadToken()
			}
			for d.PeekKind() != ']' && d.PeekKind() != 0 {
				if d.SkipValue() != nil {
					return hasUsage, hasChoices
				}
			}
			if _, err := d.ReadToken(); err != nil {
				return hasUsage, hasChoices
			}
			continue
		}
		if d.SkipValue() != nil {
			return hasUsage, hasChoices
		}
	}
	return hasUsage, hasChoices
}

// usageObject reads a usage object (the decoder at its '{'): its prompt and
// completion tokens, and whether it has prompt_tokens (seen). ok is false when the
// object is not well formed.
func usageObject(d *jsontext.Decoder) (prompt, completion int, seen, ok bool) {
	d.ReadToken()
	for d.PeekKind() == '"' {
		k, err := d.ReadValue()
		if err != nil {
			return 0, 0, false, false
		}
		v, err := d.ReadValue()
		if err != nil {
			return 0, 0, false, false
		}
		switch string(k) {
		case `"prompt_tokens"`:
			prompt, seen = jsonInt(v), true
		case `"completion_tokens"`:
			completion = jsonInt(v)
		}
	}
	if tok, err := d.ReadToken(); err != nil || tok.Kind() != '}' {
		return 0, 0, false, false
	}
	return prompt, completion, seen, true
}

// jsonInt reads a JSON integer (0 for anything else).
func jsonInt(v []byte) int {
	n := 0
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// finishOf is the finish reason of a JSON string, without allocating for the usual ones.
func finishOf(v []byte) string {
	switch string(v) {
	case `"stop"`:
		return "stop"
	case `"length"`:
		return "length"
	}
	var s string
	if jsonv2.Unmarshal(v, &s) != nil {
		return ""
	}
	return s
}

// pooledDecoder is a jsontext.Decoder reading a byte slice in place (jsontext reads a
// *bytes.Buffer's bytes without copying them), reused across requests.
type pooledDecoder struct {
	buf bytes.Buffer
	d   jsontext.Decoder
}

var decoders = sync.Pool{New: func() any { return new(pooledDecoder) }}

func getDecoder(b []byte) *pooledDecoder {
	p := decoders.Get().(*pooledDecoder)
	p.buf.Reset()
	p.buf.Write(b)
	p.d.Reset(&p.buf)
	return p
}

func putDecoder(p *pooledDecoder) {
	if p.buf.Cap() > 1<<20 {
		return // keep no large buffers alive
	}
	decoders.Put(p)
}

// runUpstream forwards the request. It returns done when a stream writer took over,
// and failed when the upstream failed before answering: the caller then tries another
// tier or answers failed (nothing has been written or settled).
func (j *job) runUpstream(ctx *fasthttp.RequestCtx) (done bool, failed *apiError) {
	s, u := j.s, j.c.m.upstream
	// The request's own body is only read (and sent, while this handler runs, when
	// nothing needs rewriting).
	body, err := j.upstreamBody(j.requestBody(ctx))
	if err != nil {
		j.fail(ctx, badRequest("body", "invalid JSON: "+err.Error()))
		return false, nil
	}
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	if j.in.kind == kindCompletion {
		req.SetRequestURI(u.compURL)
	} else {
		req.SetRequestURI(u.chatURL)
	}
	req.Header.SetMethod("POST")
	req.Header.SetContentType("application/json")
	req.Header.Set("X-Request-Id", j.reqID)
	if u.auth != "" {
		req.Header.Set("Authorization", u.auth)
	}
	req.SetBodyRaw(body)
	req.SetTimeout(u.timeout)
	resp.StreamBody = j.in.stream
	s.pred.Begin(j.c.m.id)
	sent := s.now()
	err = u.client.Do(req, resp)
	fasthttp.ReleaseRequest(req)
	why := "could not be reached"
	switch {
	case err == nil && resp.StatusCode() >= 500:
		why = "answered " + strconv.Itoa(resp.StatusCode())
		err = errors.New("upstream answered " + strconv.Itoa(resp.StatusCode()))
	case errors.Is(err, fasthttp.ErrTimeout) || errors.Is(err, os.ErrDeadlineExceeded):
		why = "did not answer in time"
	}
	if err != nil {
		s.pred.End(j.c.m.id)
		s.pred.Fail(j.c.m.id, s.now())
		s.metrics.perModel[j.c.m.id].upFailures.Inc()
		fasthttp.ReleaseResponse(resp)
		// The cause names the upstream's address: the log has it, the client does not.
		s.log.Warn("upstream failed", "request_id", j.reqID, "model", j.c.m.id, "url", u.baseURL, "error", err)
		return false, &apiError{status: 502, typ: "server_error", code: "upstream_error",
			message: "the upstream server for '" + j.c.m.id + "' " + why, reason: "upstream"}
	}
	if j.in.stream { // answering: held until it settles (a plain answer is here whole)
		j.hold()
	}
	j.setRouteHeaders(ctx)
	if resp.StatusCode() != 200 { // a client error: pass it through
		b := append([]byte(nil), resp.Body()...)
		status := resp.StatusCode()
		s.pred.End(j.c.m.id)
		fasthttp.ReleaseResponse(resp)
		j.settle(tenancy.Entry{Status: status}, nil)
		j.answer(ctx, status, "application/json", b)
		return false, nil
	}
	if !j.in.stream {
		e := tenancy.Entry{Status: 200}
		if hasUsage, _ := upstreamUsage(resp.Body(), &e); !hasUsage {
			j.worstCaseUsage(&e)
		}
		s.pred.End(j.c.m.id)
		s.pred.Observe(j.c.m.id, s.now().Sub(sent), 0)
		j.settle(e, nil)
		b := resp.Body() // copied by an HTTP answer (SetBody); a core result keeps it: its own copy
		if ctx == nil {
			b = bytes.Clone(b)
		}
		j.answer(ctx, 200, "application/json", b)
		fasthttp.ReleaseResponse(resp)
		return false, nil
	}
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.Header.Set("X-Accel-Buffering", "no")
	ctx.SetBodyStreamWriter(keepAlive(ctx, nil, func(w *bufio.Writer) {
		defer func() {
			s.inFlight.Add(-1)
			s.wg.Done()
		}()
		j.streamUpstream(w, resp, sent)
	}))
	return true, nil
}

// streamUpstream relays the upstream's events, flushing each. Every event is read as
// JSON (upstreamChunk): its usage is kept for settling, and a client that did not
// ask for usage gets none (the usage chunk dropped, a "usage" member of any other
// chunk removed). An event written over several data lines is one event
// (sse.Reader.NextEvent), relayed as it came.
//
// The charge: an answer that finished is charged the usage it reported (none
// reported: the worst case the request reserved, worstCaseUsage). One that did not
// finish (the client went away, 499, or the upstream's stream broke, 502) is charged
// what was relayed (relayedUsage).
func (j *job) streamUpstream(w *bufio.Writer, resp *fasthttp.Response, sent time.Time) {
	s := j.s
	defer fasthttp.ReleaseResponse(resp)
	e := tenancy.Entry{Status: 200}
	gone := false
	sw := sse.NewWriter(w)
	var first, last time.Time
	chunks, relayed := 0, 0
	var usage *chunkInfo // the last usage reported
	var ci chunkInfo
	var out []byte // an event rewritten without its usage
	rd := sse.NewReader(resp.BodyStream(), 16<<10)
	for {
		data, err := rd.NextEvent()
		if err != nil || bytes.Equal(data, []byte("[DONE]")) {
			break
		}
		forward := data
		if ok := upstreamChunk(data, &ci); ok {
			if ci.usage {
				u := ci
				usage = &u
			}
			if ci.finish != "" {
				e.Finish = ci.finish
			}
			if ci.member && !j.in.usage { // the client did not ask for usage
				if ci.choices == 0 {
					forward = nil // the usage chunk
				} else {
					out = withoutMember(out[:0], data, `"usage"`)
					forward = out
				}
			}
		}
		now := s.now()
		if first.IsZero() {
			first = now
		}
		last = now
		chunks++
		if forward != nil {
			if !sw.Event("", forward) {
				gone = true
				resp.CloseBodyStream() // stop the upstream
				break
			}
			relayed += ci.deltas
		}
	}
	s.pred.End(j.c.m.id)
	var timing *engine.Usage // for the latency histograms
	if !first.IsZero() && !gone {
		tpot := time.Duration(0)
		if chunks > 1 {
			tpot = last.Sub(first) / time.Duration(chunks-1)
		}
		s.pred.Observe(j.c.m.id, first.Sub(sent), tpot)
		timing = &engine.Usage{TimeToFirstToken: first.Sub(sent), TimePerOutputToken: tpot}
	}
	switch {
	case gone || e.Finish == "":
		e.Status = 499
		if !gone {
			e.Status = 502 // the upstream ended without finishing
		}
		j.relayedUsage(&e, usage, relayed)
	case usage != nil:
		e.PromptTokens, e.CompletionTokens = usage.prompt, usage.completion
	case chunks > 0:
		j.worstCaseUsage(&e)
	}
	if timing != nil {
		timing.CompletionTokens = e.CompletionTokens
	}
	j.settle(e, timing)
	if !gone {
		sw.Write(openai.AppendDone(nil))
	}
}

// relayedUsage charges an upstream stream that did not finish for what was relayed:
// the completion tokens are the output deltas relayed to the client (each chunk's
// choices with content, text, a refusal, reasoning or tool calls: an
// OpenAI-compatible server streams a token per chunk and choice, so this counts the
// tokens the client was sent, one for each chunk where a server sends several), or
// the upstream's last usage when it reported one and it is more; the prompt is that
// usage's, else the bound the request reserved (no usage seen: the upstream's count
// is not known, and the prompt was sent).
func (j *job) relayedUsage(e *tenancy.Entry, usage *chunkInfo, relayed int) {
	e.PromptTokens, e.CompletionTokens = j.c.nPrompt, relayed
	if usage != nil {
		e.PromptTokens, e.CompletionTokens = usage.prompt, max(relayed, usage.completion)
	}
}

// chunkInfo is what the gateway reads of an upstream's stream chunk (upstreamChunk).
type chunkInfo struct {
	member             bool   // the chunk has a "usage" member (an object or null)
	usage              bool   // ... an object with prompt_tokens
	prompt, completion int    // the usage's tokens
	choices            int    // the chunk's choices
	deltas             int    // choices carrying output (content, text, refusal, reasoning, tool calls)
	finish             string // the first finish reason in its choices ("": none)
}

// upstreamChunk reads a stream chunk of an upstream into ci, walking its JSON tokens
// (any spacing; nested values skipped, never recursed into by this code). It reports
// false when the chunk is not a JSON object; ci then says nothing.
func upstreamChunk(b []byte, ci *chunkInfo) bool {
	*ci = chunkInfo{}
	p := getDecoder(b)
	defer putDecoder(p)
	d := &p.d
	if tok, err := d.ReadToken(); err != nil || tok.Kind() != '{' {
		return false
	}
	for d.PeekKind() == '"' {
		name, err := d.ReadValue()
		if err != nil {
			return false
		}
		switch string(name) {
		case `"usage"`:
			ci.member = true
			if d.PeekKind() == '{' {
				prompt, completion, seen, ok := usageObject(d)
				if !ok {
					return false
				}
				if seen {
					ci.usage, ci.prompt, ci.completion = true, prompt, completion
				}
				continue
			}
		case `"choices"`:
			if d.PeekKind() != '[' {
				break
			}
			d.ReadToken()
			for d.PeekKind() == '{' {
				ci.choices++
				if !chunkChoice(d, ci) {
					return false
				}
			}
			if tok, err := d.ReadToken(); err != nil || tok.Kind() != ']' { // a choice that is not an object
				return false
			}
			continue
		}
		if d.SkipValue() != nil {
			return false
		}
	}
	tok, err := d.ReadToken()
	return err == nil && tok.Kind() == '}'
}

// chunkChoice reads one choice of a stream chunk (the decoder at its '{').
func chunkChoice(d *jsontext.Decoder, ci *chunkInfo) bool {
	d.ReadToken()
	output := false
	for d.PeekKind() == '"' {
		k, err := d.ReadValue()
		if err != nil {
			return false
		}
		switch string(k) {
		case `"finish_reason"`:
			v, err := d.ReadValue()
			if err != nil {
				return false
			}
			if len(v) > 0 && v[0] == '"' && ci.finish == "" {
				ci.finish = finishOf(v)
			}
			continue
		case `"text"`: // completions
			v, err := d.ReadValue()
			if err != nil {
				return false
			}
			output = output || len(v) > 2 && v[0] == '"'
			continue
		case `"delta"`:
			if d.PeekKind() != '{' {
				break
			}
			d.ReadToken()
			for d.PeekKind() == '"' {
				dk, err := d.ReadValue()
				if err != nil {
					return false
				}
				v, err := d.ReadValue()
				if err != nil {
					return false
				}
				switch string(dk) {
				case `"content"`, `"refusal"`, `"reasoning_content"`, `"reasoning"`:
					output = output || len(v) > 2 && v[0] == '"'
				case `"tool_calls"`:
					output = output || len(v) > 2 && v[0] == '['
				}
			}
			if tok, err := d.ReadToken(); err != nil || tok.Kind() != '}' {
				return false
			}
			continue
		}
		if d.SkipValue() != nil {
			return false
		}
	}
	if tok, err := d.ReadToken(); err != nil || tok.Kind() != '}' {
		return false
	}
	if output {
		ci.deltas++
	}
	return true
}

// withoutMember appends to dst the JSON object obj without its top-level member
// quotedName (as written, quoted); the other members are copied raw, in order.
func withoutMember(dst, obj []byte, quotedName string) []byte {
	p := getDecoder(obj)
	defer putDecoder(p)
	d := &p.d
	if tok, err := d.ReadToken(); err != nil || tok.Kind() != '{' {
		return append(dst, obj...)
	}
	dst = append(dst, '{')
	n := 0
	for d.PeekKind() == '"' {
		name, err := d.ReadValue()
		if err != nil {
			break
		}
		v, err := d.ReadValue()
		if err != nil {
			break
		}
		if string(name) == quotedName {
			continue
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst = append(dst, name...)
		dst = append(dst, ':')
		dst = append(dst, v...)
	}
	return append(dst, '}')
}

// worstCaseUsage charges an answer whose upstream reported no usage at the worst case
// the request reserved (upper bounds of its tokens): budgets must never be escaped.
func (j *job) worstCaseUsage(e *tenancy.Entry) {
	e.PromptTokens, e.CompletionTokens = j.c.nPrompt, j.c.out+j.c.predict
}
