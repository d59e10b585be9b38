package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fixture is an OpenAI-shaped test server with known delays: it is what the
// measurement code is measured against. It answers POST /v1/chat/completions and
// /v1/completions, streaming max_tokens chunks when asked to: TTFT after the
// request arrives, then ITL between chunks. Keys listed in status answer with that
// status and an OpenAI error body instead.
type fixture struct {
	TTFT, ITL time.Duration
	Hang      bool // never answer (until the client goes away)
	Status    map[string]fixtureErr
	NoUsage   bool

	mu   sync.Mutex // guards seen
	seen []seenRequest
}

type fixtureErr struct {
	Status int
	Code   string
}

type seenRequest struct {
	Key     string
	Header  http.Header
	Body    map[string]any
	Arrived time.Time
}

func (f *fixture) start(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return srv
}

func (f *fixture) requests() []seenRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seenRequest(nil), f.seen...)
}

func (f *fixture) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, `{"error":{"message":"bad json","type":"invalid_request_error","code":null}}`, 400)
		return
	}
	key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	f.mu.Lock()
	f.seen = append(f.seen, seenRequest{Key: key, Header: r.Header.Clone(), Body: body, Arrived: arrived})
	f.mu.Unlock()
	if e, ok := f.Status[key]; ok {
		w.Header().Set("Content-Type", "application/json")
		if e.Status == 429 && e.Code != "insufficient_quota" {
			w.Header().Set("Retry-After", "1")
		}
		w.WriteHeader(e.Status)
		fmt.Fprintf(w, `{"error":{"message":"refused","type":"requests","code":%q}}`, e.Code)
		return
	}
	if f.Hang {
		<-r.Context().Done()
		return
	}
	n := 4
	if v, ok := body["max_tokens"].(float64); ok {
		n = int(v)
	}
	chat := r.URL.Path == "/v1/chat/completions"
	w.Header().Set("X-LMLite-Tier", "fast")
	w.Header().Set("X-LMLite-Model", "fixture-model")
	stream, _ := body["stream"].(bool)
	sleepUntil := func(at time.Time) {
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
	}
	if !stream {
		sleepUntil(arrived.Add(f.TTFT + time.Duration(n-1)*f.ITL))
		text := strings.Repeat("tok ", n)
		w.Header().Set("Content-Type", "application/json")
		if chat {
			fmt.Fprintf(w, `{"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":%q}}],"usage":{"prompt_tokens":7,"completion_tokens":%d}}`, text, n)
		} else {
			fmt.Fprintf(w, `{"model":"m","choices":[{"index":0,"text":%q}],"usage":{"prompt_tokens":7,"completion_tokens":%d}}`, text, n)
		}
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	w.WriteHeader(200)
	fl.Flush()
	for i := 0; i < n; i++ {
		// Each chunk leaves at a fixed time after arrival: TTFT + i·ITL.
		sleepUntil(arrived.Add(f.TTFT + time.Duration(i)*f.ITL))
		if chat {
			fmt.Fprintf(w, "data: {\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d \"}}]}\n\n", i)
		} else {
			fmt.Fprintf(w, "data: {\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\"t%d \"}]}\n\n", i)
		}
		fl.Flush()
	}
	if so, ok := body["stream_options"].(map[string]any); ok && so["include_usage"] == true && !f.NoUsage {
		fmt.Fprintf(w, "data: {\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":%d,\"prompt_tokens_details\":{\"cached_tokens\":5}}}\n\n", n)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	fl.Flush()
}

// pipeTransport serves requests in this process, calling the handler with the
// response body on an io.Pipe: no socket, so a run inside a synctest bubble waits
// on the bubble's clock only, and its timings are the script's.
type pipeTransport struct{ h http.Handler }

// pipeTarget is the loopback URL a run through a pipeTransport names (never dialled).
const pipeTarget = "http://127.0.0.1:1"

func (p pipeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	pr, pw := io.Pipe()
	w := &pipeWriter{header: http.Header{}, body: pw, ready: make(chan struct{})}
	ctx := req.Context()
	stop := context.AfterFunc(ctx, func() { pw.CloseWithError(ctx.Err()) })
	go func() {
		defer stop()
		p.h.ServeHTTP(w, req)
		w.WriteHeader(200)
		pw.Close()
	}()
	select {
	case <-w.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &http.Response{StatusCode: w.status, Status: http.StatusText(w.status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: w.header, Body: pr, ContentLength: -1, Request: req}, nil
}

// pipeWriter is pipeTransport's http.ResponseWriter: the header is sent (ready
// closed) at the first WriteHeader or Write.
type pipeWriter struct {
	header http.Header
	body   *io.PipeWriter
	status int
	ready  chan struct{}
}

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
		close(w.ready)
	}
}

func (w *pipeWriter) Write(b []byte) (int, error) {
	w.WriteHeader(200)
	return w.body.Write(b)
}

func (w *pipeWriter) Flush() {}
