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
	setMax := j.in.kind == kindCompletion && j.in.comp.MaxTokens == nil
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
			d.ReadToken()
			var prompt, completion int
			seen := false
			for d.PeekKind() == '"' {
				k, err := d.ReadValue()
				if err != nil {
					return hasUsage, hasChoices
				}
				v, err := d.ReadValue()
				if err != nil {
					return hasUsage, hasChoices
				}
				switch string(k) {
				case `"prompt_tokens"`:
					prompt, seen = jsonInt(v), true
				case `"completion_tokens"`:
					completion = jsonInt(v)
				}
			}
			if _, err := d.ReadToken(); err != nil {
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
	body, err := j.upstreamBody(ctx.PostBody())
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
	j.setRouteHeaders(ctx)
	if resp.StatusCode() != 200 { // a client error: pass it through
		b := append([]byte(nil), resp.Body()...)
		status := resp.StatusCode()
		s.pred.End(j.c.m.id)
		fasthttp.ReleaseResponse(resp)
		j.settle(tenancy.Entry{Status: status}, nil)
		ctx.SetStatusCode(status)
		ctx.SetContentType("application/json")
		ctx.SetBody(b)
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
		ctx.SetContentType("application/json")
		ctx.SetBody(resp.Body())
		fasthttp.ReleaseResponse(resp)
		return false, nil
	}
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.Header.Set("X-Accel-Buffering", "no")
	ctx.SetBodyStreamWriter(keepAlive(ctx, func(w *bufio.Writer) {
		defer func() {
			s.inFlight.Add(-1)
			s.wg.Done()
		}()
		j.streamUpstream(w, resp, sent)
	}))
	return true, nil
}

// streamUpstream relays the upstream's events, flushing each; it keeps the usage
// event for settling and forwards it only when the client asked for usage.
func (j *job) streamUpstream(w *bufio.Writer, resp *fasthttp.Response, sent time.Time) {
	s := j.s
	defer fasthttp.ReleaseResponse(resp)
	e := tenancy.Entry{Status: 200}
	gone := false
	var first, last time.Time
	chunks := 0
	sawUsage := false
	rd := sse.NewReader(resp.BodyStream(), 16<<10)
	for {
		data, err := rd.Next()
		if err != nil || bytes.Equal(data, []byte("[DONE]")) {
			break
		}
		forward := true
		if bytes.Contains(data, []byte(`"usage":{`)) || bytes.Contains(data, []byte(`"finish_reason":"`)) {
			hasUsage, hasChoices := upstreamUsage(data, &e)
			sawUsage = sawUsage || hasUsage
			if hasUsage && !hasChoices && !j.in.usage {
				forward = false // the client did not ask for the usage event
			}
		}
		now := s.now()
		if first.IsZero() {
			first = now
		}
		last = now
		chunks++
		if forward && !gone {
			w.WriteString("data: ")
			w.Write(data)
			w.WriteString("\n\n")
			if w.Flush() != nil {
				gone = true
				resp.CloseBodyStream() // stop the upstream
				break
			}
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
	if !sawUsage && chunks > 0 {
		j.worstCaseUsage(&e)
	}
	if gone {
		e.Status = 499
	}
	if e.Finish == "" && !gone {
		e.Status = 502 // the upstream ended without finishing
	}
	if timing != nil {
		timing.CompletionTokens = e.CompletionTokens
	}
	j.settle(e, timing)
	if !gone {
		w.WriteString("data: [DONE]\n\n")
		w.Flush()
	}
}

// worstCaseUsage charges an answer whose upstream reported no usage at the worst case
// the request reserved (upper bounds of its tokens): budgets must never be escaped.
func (j *job) worstCaseUsage(e *tenancy.Entry) {
	e.PromptTokens, e.CompletionTokens = j.c.nPrompt, j.c.out
}
