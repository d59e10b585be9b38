package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/configs"
	"github.com/lmlite/lmlite/tenancy"
)

// upstream is a model served by another OpenAI-compatible server, reached with a
// pooled fasthttp client; responses pass through, streams event by event.
type upstream struct {
	base    string // base URL without the trailing slash, e.g. http://h:p/v1
	model   string // the model's name there
	auth    string // "Bearer KEY" or ""
	timeout time.Duration
	client  *fasthttp.Client
}

func newUpstream(m configs.Model, c *fasthttp.Client) *upstream {
	u := &upstream{base: strings.TrimRight(m.Upstream.BaseURL, "/"), model: m.Upstream.Model, timeout: m.Upstream.Timeout, client: c}
	if m.Upstream.APIKeyEnv != "" {
		if k := os.Getenv(m.Upstream.APIKeyEnv); k != "" {
			u.auth = "Bearer " + k
		}
	}
	return u
}

// upstreamBody rewrites the client's body for the upstream: its model name, no
// "lmlite" field, and usage always included in streams (for settling).
func (j *job) upstreamBody(body []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	delete(m, "lmlite")
	name, _ := json.Marshal(j.m.upstream.model)
	m["model"] = name
	if j.stream {
		m["stream_options"] = json.RawMessage(`{"include_usage":true}`)
	}
	if j.kind == kindCompletion && j.comp.MaxTokens == nil {
		m["max_tokens"] = json.RawMessage(strconv.Itoa(j.maxTokens))
	}
	return json.Marshal(m)
}

// upstreamUsage is what the gateway reads of an upstream response.
type upstreamUsage struct {
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Choices []struct {
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
}

// runUpstream forwards the request. It returns done when a stream writer took over,
// and retry when the upstream failed before answering (so another tier may serve).
func (j *job) runUpstream(ctx *fasthttp.RequestCtx) (done, retry bool) {
	s, u := j.s, j.m.upstream
	body, err := j.upstreamBody(ctx.PostBody())
	if err != nil {
		j.fail(ctx, badRequest("body", "invalid JSON: "+err.Error()))
		return false, false
	}
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	path := "/chat/completions"
	if j.kind == kindCompletion {
		path = "/completions"
	}
	req.SetRequestURI(u.base + path)
	req.Header.SetMethod("POST")
	req.Header.SetContentType("application/json")
	req.Header.Set("X-Request-Id", j.reqID)
	if u.auth != "" {
		req.Header.Set("Authorization", u.auth)
	}
	req.SetBodyRaw(body)
	req.SetTimeout(u.timeout)
	resp.StreamBody = j.stream
	s.pred.Begin(j.m.id)
	sent := s.now()
	err = u.client.Do(req, resp)
	fasthttp.ReleaseRequest(req)
	if err == nil && resp.StatusCode() >= 500 {
		err = errors.New("upstream answered " + strconv.Itoa(resp.StatusCode()))
	}
	if err != nil {
		s.pred.End(j.m.id)
		s.pred.Fail(j.m.id, s.now())
		fasthttp.ReleaseResponse(resp)
		if j.routed {
			return false, true
		}
		j.fail(ctx, &apiError{status: 502, typ: "server_error", code: "upstream_error",
			message: "the upstream server for '" + j.m.id + "' failed: " + err.Error(), reason: "upstream"})
		return false, false
	}
	j.setRouteHeaders(ctx)
	if resp.StatusCode() != 200 { // a client error: pass it through
		b := append([]byte(nil), resp.Body()...)
		status := resp.StatusCode()
		s.pred.End(j.m.id)
		fasthttp.ReleaseResponse(resp)
		j.settle(tenancy.Entry{Status: status}, nil)
		ctx.SetStatusCode(status)
		ctx.SetContentType("application/json")
		ctx.SetBody(b)
		return false, false
	}
	if !j.stream {
		var uu upstreamUsage
		_ = json.Unmarshal(resp.Body(), &uu)
		e := tenancy.Entry{Status: 200}
		if uu.Usage != nil {
			e.PromptTokens, e.CompletionTokens = uu.Usage.PromptTokens, uu.Usage.CompletionTokens
		}
		if len(uu.Choices) > 0 && uu.Choices[0].FinishReason != nil {
			e.Finish = *uu.Choices[0].FinishReason
		}
		s.pred.End(j.m.id)
		s.pred.Observe(j.m.id, s.now().Sub(sent), 0)
		j.settle(e, nil)
		ctx.SetContentType("application/json")
		ctx.SetBody(resp.Body())
		fasthttp.ReleaseResponse(resp)
		return false, false
	}
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.Header.Set("X-Accel-Buffering", "no")
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer func() {
			s.inFlight.Add(-1)
			s.wg.Done()
		}()
		j.streamUpstream(w, resp, sent)
	})
	return true, false
}

// streamUpstream relays the upstream's events, flushing each; it keeps the usage
// event for settling and forwards it only when the client asked for usage.
func (j *job) streamUpstream(w *bufio.Writer, resp *fasthttp.Response, sent time.Time) {
	s := j.s
	defer fasthttp.ReleaseResponse(resp)
	e := tenancy.Entry{Status: 200}
	rd := bufio.NewReaderSize(resp.BodyStream(), 16<<10)
	gone := false
	var first, last time.Time
	chunks := 0
	for {
		line, err := rd.ReadSlice('\n')
		if err != nil && !(err == bufio.ErrBufferFull && len(line) > 0) {
			if len(line) == 0 {
				break
			}
		}
		if err == bufio.ErrBufferFull { // a long event: gather it whole
			rest, err2 := rd.ReadBytes('\n')
			line = append(append([]byte(nil), line...), rest...)
			err = err2
		}
		data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte("data:"))
		if ok {
			data = bytes.TrimSpace(data)
			if bytes.Equal(data, []byte("[DONE]")) {
				break
			}
			forward := true
			if bytes.Contains(data, []byte(`"usage":{`)) || bytes.Contains(data, []byte(`"finish_reason":"`)) {
				var uu upstreamUsage
				if json.Unmarshal(data, &uu) == nil {
					if uu.Usage != nil {
						e.PromptTokens, e.CompletionTokens = uu.Usage.PromptTokens, uu.Usage.CompletionTokens
						if len(uu.Choices) == 0 && !j.usage {
							forward = false
						}
					}
					if len(uu.Choices) > 0 && uu.Choices[0].FinishReason != nil {
						e.Finish = *uu.Choices[0].FinishReason
					}
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
		if err != nil {
			break
		}
	}
	s.pred.End(j.m.id)
	if !first.IsZero() && !gone {
		tpot := time.Duration(0)
		if chunks > 1 {
			tpot = last.Sub(first) / time.Duration(chunks-1)
		}
		s.pred.Observe(j.m.id, first.Sub(sent), tpot)
	}
	if gone {
		e.Status = 499
	}
	if e.Finish == "" && !gone {
		e.Status = 502 // the upstream ended without finishing
	}
	j.settle(e, nil)
	if !gone {
		w.WriteString("data: [DONE]\n\n")
		w.Flush()
	}
}
