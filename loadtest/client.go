package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lmlite/lmlite/internal/sse"
)

// Error classes of a Result that has no HTTP status (Status 0).
const (
	ErrTransport = "transport" // connection, timeout, or a stream cut short
	ErrStream    = "stream"    // a 2xx stream that carried an error event
	ErrDropped   = "dropped"   // never sent: the concurrency cap was full
	ErrCancelled = "cancelled" // still running when the drain period ended
)

// Result is what one request measured. Times are offsets on the monotonic clock.
type Result struct {
	Tenant int           // index in Scenario.Tenants
	Start  time.Duration // when it was sent, from the run's start
	// Lag is how late an open-loop request left after its scheduled time: a
	// large lag means the load generator itself could not keep up.
	Lag    time.Duration
	Warmup bool // sent during warm-up: left out of the report

	Stream bool
	// Retried says the request was sent a second time, on a new connection, because
	// the server had closed the reused keep-alive connection before answering.
	Retried bool
	Status  int    // HTTP status; 0 when none was received
	Class   string // for Status 0, or a 2xx with a stream error: one of the Err* classes
	Code    string // the OpenAI error body's code (or type), e.g. insufficient_quota
	Detail  string // the error's message, for logs

	// TTFT is the first content token's arrival after sending (streams only);
	// Tokens holds every content chunk's arrival (streams only), so that the
	// inter-token latencies are its differences.
	TTFT   time.Duration
	Tokens []time.Duration
	E2E    time.Duration

	PromptTokens     int
	CachedTokens     int  // usage.prompt_tokens_details.cached_tokens: prompt tokens from the server's prefix cache
	CompletionTokens int  // from usage when reported, else the content chunks
	UsageReported    bool // the server sent usage
	Text             string

	Tier  string // X-LMLite-Tier
	Model string // X-LMLite-Model, else the body's model
	Ask   string // the tier options sent (TierChoice.Label); "" when none
}

// Record is one request's measurements as a JSON line (requests.jsonl).
type Record struct {
	Tenant           string  `json:"tenant"`
	StartMS          float64 `json:"start_ms"` // from the run's start
	Warmup           bool    `json:"warmup,omitempty"`
	Stream           bool    `json:"stream"`
	Retried          bool    `json:"retried,omitempty"` // sent again on a new connection (see Result.Retried)
	Status           int     `json:"status"`
	Error            string  `json:"error,omitempty"` // the errors key
	Code             string  `json:"code,omitempty"`
	TTFTms           float64 `json:"ttft_ms,omitempty"`
	ITLms            float64 `json:"itl_mean_ms,omitempty"`
	E2Ems            float64 `json:"e2e_ms"`
	Chunks           int     `json:"chunks"`
	PromptTokens     int     `json:"prompt_tokens"`
	CachedTokens     int     `json:"cached_tokens,omitempty"`
	CompletionTokens int     `json:"completion_tokens"`
	Ask              string  `json:"ask,omitempty"` // the tier options sent
	Tier             string  `json:"tier,omitempty"`
	Model            string  `json:"model,omitempty"`
	LagMS            float64 `json:"lag_ms,omitempty"`
}

// Record returns r's measurements, naming its tenant.
func (r *Result) Record(tenant string) Record {
	ms := func(d time.Duration) float64 { return round3(float64(d) / float64(time.Millisecond)) }
	rec := Record{Tenant: tenant, StartMS: ms(r.Start), Warmup: r.Warmup, Stream: r.Stream, Retried: r.Retried, Status: r.Status, Error: r.ErrorKey(),
		Code: r.Code, TTFTms: ms(r.TTFT), E2Ems: ms(r.E2E), Chunks: len(r.Tokens), PromptTokens: r.PromptTokens,
		CachedTokens: r.CachedTokens, CompletionTokens: r.CompletionTokens, Ask: r.Ask, Tier: r.Tier, Model: r.Model, LagMS: ms(r.Lag)}
	if n := len(r.Tokens); n > 1 {
		rec.ITLms = ms((r.Tokens[n-1] - r.Tokens[0]) / time.Duration(n-1))
	}
	return rec
}

// setUsage takes the server's usage report.
func (r *Result) setUsage(u *usage) {
	r.PromptTokens, r.CompletionTokens, r.UsageReported = u.PromptTokens, u.CompletionTokens, true
	if d := u.PromptTokensDetails; d != nil {
		r.CachedTokens = d.CachedTokens
	}
}

// OK tells whether the request succeeded end to end.
func (r *Result) OK() bool { return r.Status >= 200 && r.Status < 300 && r.Class == "" }

// ErrorKey is the report's errors key: the HTTP status for a non-2xx, else the class;
// "" for a success.
func (r *Result) ErrorKey() string {
	switch {
	case r.Status != 0 && (r.Status < 200 || r.Status >= 300):
		return strconv.Itoa(r.Status)
	case r.Class != "":
		return r.Class
	}
	return ""
}

// newTransport returns an HTTP transport for load generation: enough idle
// connections for the whole concurrency, no compression (it would buffer SSE),
// HTTP/1.1 like the OpenAI clients against a local server.
func newTransport(concurrency int) *http.Transport {
	return &http.Transport{
		Proxy:               nil, // loopback targets never go through a proxy
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        concurrency,
		MaxIdleConnsPerHost: concurrency,
		MaxConnsPerHost:     0,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
		WriteBufferSize:     64 << 10,
		ReadBufferSize:      64 << 10,
	}
}

// do sends r to base (the server's root URL) and measures it. since gives the
// monotonic offset from the run's start. The request's context bounds it.
//
// A request lost because the server closed a reused keep-alive connection before
// answering is sent once more, on a new connection (see closedBeforeAnswer); its
// times still count from the first attempt.
func do(ctx context.Context, c *http.Client, base, key string, r *request, since func() time.Duration) Result {
	res := Result{Tenant: r.tenant, Stream: r.stream, Ask: r.ask}
	res.Start = since()
	t0 := time.Now() // monotonic reading; every later time is time.Since(t0)
	resp, stale, err := send(ctx, c, base, key, r)
	if stale {
		res.Retried = true
		resp, _, err = send(ctx, freshClient(c), base, key, r)
	}
	if err != nil {
		res.E2E = time.Since(t0)
		res.Class, res.Detail = ErrTransport, err.Error()
		return res
	}
	defer resp.Body.Close()
	res.Status = resp.StatusCode
	res.Tier = resp.Header.Get("X-LMLite-Tier")
	res.Model = resp.Header.Get("X-LMLite-Model")
	switch {
	case resp.StatusCode < 200 || resp.StatusCode >= 300:
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		res.E2E = time.Since(t0)
		res.Code, res.Detail = parseAPIError(b)
		if res.Detail == "" {
			res.Detail = strings.TrimSpace(string(b))
		}
	case r.stream && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"):
		err := readSSE(resp.Body, t0, &res)
		res.E2E = time.Since(t0)
		if err != nil && res.Class == "" {
			res.Class, res.Detail = ErrTransport, err.Error()
		}
	default:
		b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
		res.E2E = time.Since(t0)
		if err != nil {
			res.Class, res.Detail = ErrTransport, err.Error()
			break
		}
		if perr := parseCompletion(b, &res); perr != nil {
			res.Class, res.Detail = ErrStream, perr.Error()
		}
	}
	return res
}

// send makes one attempt at r. stale reports that it failed because the server
// closed the reused connection before answering (the one case worth a retry).
func send(ctx context.Context, c *http.Client, base, key string, r *request) (resp *http.Response, stale bool, err error) {
	var reused, answered atomic.Bool
	trace := &httptrace.ClientTrace{
		GotConn:              func(i httptrace.GotConnInfo) { reused.Store(i.Reused) },
		GotFirstResponseByte: func() { answered.Store(true) },
	}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, base+r.path, bytes.NewReader(r.body))
	if err != nil {
		return nil, false, err
	}
	req.Header.Set("Content-Type", "application/json")
	if r.stream {
		req.Header.Set("Accept", "text/event-stream")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range r.headers {
		req.Header.Set(k, v)
	}
	resp, err = c.Do(req)
	if err != nil {
		stale = ctx.Err() == nil && closedBeforeAnswer(err, reused.Load(), answered.Load())
	}
	return resp, stale, err
}

// closedBeforeAnswer tells whether a failed attempt is the keep-alive race: a
// server that closes idle connections (llama-server does, after a timeout) closed
// the one the client reused while the request was on its way. Go's transport
// retries that itself only for idempotent methods or when nothing was written;
// a POST that was written fails with EOF (or a reset, or "server closed idle
// connection"). It is that case only when the connection was reused and not one
// byte of response arrived: a server that answered even in part, or a fresh
// connection that failed, is a real failure and is not retried.
func closedBeforeAnswer(err error, reused, answered bool) bool {
	if !reused || answered {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		serverClosedIdle(err)
}

// serverClosedIdle reports net/http's errServerClosedIdle, the one error matched by
// its text: the transport's read loop sets it when it reads EOF on a connection with
// no request in flight (a server's keep-alive timeout), and hands it to a request
// already being written on that connection undecorated, as errors.New's value
// (transport.go, Go 1.26). It is unexported, wraps neither io.EOF nor a
// syscall.Errno, and no type or field tells it apart, so only its text does. The
// transport retries it itself only for idempotent requests; making the POST
// "idempotent" (an Idempotency-Key header) would change the request the server
// sees and retry on a pooled connection, unseen by Result.Retried.
// TestServerClosedIdleIsNetHTTPsText pins the text against the toolchain's source.
func serverClosedIdle(err error) bool {
	return strings.Contains(err.Error(), "http: server closed idle connection")
}

// freshClient returns c with a transport that opens a new connection for each
// request and keeps none, so a retry cannot land on another stale idle
// connection. A transport of another type is used as it is.
func freshClient(c *http.Client) *http.Client {
	var t *http.Transport
	switch tr := c.Transport.(type) {
	case nil:
		t = http.DefaultTransport.(*http.Transport).Clone()
	case *http.Transport:
		t = tr.Clone()
	default:
		return c
	}
	t.DisableKeepAlives = true
	fc := *c
	fc.Transport = t
	return &fc
}

// wire shapes of the OpenAI API that the measurements read.
type (
	apiError struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
	}
	usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	}
	completion struct {
		Model   string `json:"model"`
		Choices []struct {
			Text    string `json:"text"`
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
			Delta struct {
				Content          string `json:"content"`
				ReasoningContent string `json:"reasoning_content"`
			} `json:"delta"`
		} `json:"choices"`
		Usage *usage    `json:"usage"`
		Error *apiError `json:"error"`
	}
)

// parseAPIError reads an OpenAI error body: its code (or, lacking one, its type)
// and message. Anything else gives empty strings.
func parseAPIError(b []byte) (code, msg string) {
	var e struct {
		Error *apiError `json:"error"`
	}
	if json.Unmarshal(b, &e) != nil || e.Error == nil {
		return "", ""
	}
	return e.Error.code(), e.Error.Message
}

func (e *apiError) code() string {
	var s string
	if json.Unmarshal(e.Code, &s) == nil && s != "" {
		return s
	}
	if len(e.Code) > 0 && string(e.Code) != "null" {
		return string(e.Code) // a numeric code, as some servers send
	}
	return e.Type
}

// parseCompletion reads a non-streamed answer into res.
func parseCompletion(b []byte, res *Result) error {
	var c completion
	if err := json.Unmarshal(b, &c); err != nil {
		return fmt.Errorf("loadtest: completion body: %w", err)
	}
	if c.Error != nil {
		res.Code, res.Detail = c.Error.code(), c.Error.Message
		return fmt.Errorf("loadtest: error in a 2xx body: %s", c.Error.Message)
	}
	if len(c.Choices) == 0 {
		return errors.New("loadtest: completion without choices")
	}
	res.Text = c.Choices[0].Message.Content + c.Choices[0].Text
	if res.Model == "" {
		res.Model = c.Model
	}
	if c.Usage != nil {
		res.setUsage(c.Usage)
	}
	return nil
}

// errNoDone is a stream that ended without "data: [DONE]".
var errNoDone = errors.New("loadtest: stream ended before [DONE]")

// maxSSELine bounds one SSE line (a usage chunk or a long delta fits easily).
const maxSSELine = 1 << 20

// readSSE reads an OpenAI event stream as it arrives, timing every chunk that
// carries content against t0, until "data: [DONE]". Malformed events are errors of
// class stream; a stream cut short is errNoDone.
func readSSE(body io.Reader, t0 time.Time, res *Result) error {
	rd := sse.NewReader(body, 4096)
	rd.MaxLine = maxSSELine
	var text strings.Builder
	chunks := 0
	defer func() {
		res.Text = text.String()
		if !res.UsageReported {
			res.CompletionTokens = chunks
		}
	}()
	for {
		data, err := rd.Next()
		if err == io.EOF {
			return errNoDone
		}
		if err != nil {
			return fmt.Errorf("loadtest: reading stream: %w", err)
		}
		at := time.Since(t0)
		if string(data) == "[DONE]" {
			return nil
		}
		var c completion
		if err := json.Unmarshal(data, &c); err != nil {
			res.Class, res.Detail = ErrStream, "bad event: "+err.Error()
			return nil
		}
		if c.Error != nil {
			res.Code, res.Detail, res.Class = c.Error.code(), c.Error.Message, ErrStream
			return nil
		}
		if res.Model == "" {
			res.Model = c.Model
		}
		if c.Usage != nil {
			res.setUsage(c.Usage)
		}
		content := false
		for _, ch := range c.Choices {
			s := ch.Delta.Content + ch.Delta.ReasoningContent + ch.Text
			if s != "" {
				text.WriteString(s)
				content = true
			}
		}
		if content {
			if chunks == 0 {
				res.TTFT = at
			}
			res.Tokens = append(res.Tokens, at)
			chunks++
		}
	}
}
