package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/gateway/core"
)

// probeCodec is a wire format of its own, made for these tests: a body
// {"model", "say", "max", "stream"}, the key in X-Probe-Key, errors as
// "ERR <status> <type> <message>" (529 for an overloaded engine), events as text
// lines, a ping event, and the whole and the end it is told (finisher). It proves
// what the core leaves to a codec and what it keeps.
type probeCodec struct {
	mu       sync.Mutex
	finished []string // "ok <content>" or "err <message>", with the ledger's length then
	ledger   func() int
}

func (c *probeCodec) decode(in *input, body []byte, tenant string) *apiError {
	var r struct {
		Model  string `json:"model"`
		Say    string `json:"say"`
		Max    int    `json:"max"`
		Stream bool   `json:"stream"`
	}
	if err := jsonv2.Unmarshal(body, &r, strictJSON); err != nil {
		return badRequest("body", "probe: "+err.Error())
	}
	if tenant == "" {
		return badRequest("tenant", "probe: decoded without its tenant")
	}
	in.p = &commonParams{Model: r.Model, Stream: r.Stream}
	in.msgs = []engine.Message{{Role: "user", Content: r.Say}}
	in.promptBytes, in.maxTokens = len(r.Say), r.Max
	in.feat = features{N: 1, Parallel: true}
	return in.chatTail()
}

func (c *probeCodec) newOutput(m *outMeta) output { return &probeOutput{c: c, m: m} }

func (c *probeCodec) appendError(b []byte, e *apiError) []byte {
	return append(b, "ERR "+strconv.Itoa(c.errorStatus(e))+" "+e.typ+" "+e.message...)
}

func (c *probeCodec) errorStatus(e *apiError) int {
	if e.code == "overloaded" {
		return 529
	}
	return e.status
}

func (c *probeCodec) apiKey(h *fasthttp.RequestHeader) []byte { return h.Peek("X-Probe-Key") }

type probeOutput struct {
	c *probeCodec
	m *outMeta
}

func (o *probeOutput) ContentType(stream bool) string { return "text/x-probe" }

// appendEvent appends an event as a line and a blank line (keep-alives go between
// events, after a blank line).
func (o *probeOutput) AppendEvent(b []byte, ev *outEvent) []byte {
	b = o.appendLine(b, ev)
	if len(b) > 0 {
		b = append(b, '\n')
	}
	return b
}

func (o *probeOutput) appendLine(b []byte, ev *outEvent) []byte {
	switch ev.Kind {
	case outStart:
		return append(b, "start "+o.m.Model+"\n"...)
	case outText:
		return append(b, "text "+ev.Text+"\n"...)
	case outFinish:
		return append(b, "finish "+ev.Finish+"\n"...)
	case outUsage:
		return append(b, "usage "+strconv.Itoa(ev.Usage.PromptTokens)+" "+strconv.Itoa(ev.Usage.CompletionTokens)+"\n"...)
	case outError:
		return append(b, "error "+ev.Err.Message+"\n"...)
	}
	return b
}

func (o *probeOutput) AppendEnd(b []byte) []byte { return append(b, "end\n"...) }

func (o *probeOutput) AppendWhole(b []byte, w *whole) []byte {
	return append(b, "whole "+w.Choices[0].Content+" "+w.Choices[0].Finish+" "+strconv.Itoa(w.Usage.CompletionTokens)...)
}

func (o *probeOutput) AppendPing(b []byte) []byte { return append(b, "ping\n\n"...) }

func (o *probeOutput) Finished(w *whole, e *core.Error) {
	o.c.mu.Lock()
	defer o.c.mu.Unlock()
	n := strconv.Itoa(o.c.ledger())
	if e != nil {
		o.c.finished = append(o.c.finished, "err "+e.Message+" "+n)
		return
	}
	o.c.finished = append(o.c.finished, "ok "+w.Choices[0].Content+" "+n)
}

func (c *probeCodec) told() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.finished...)
}

// serveProbe serves handleGenerate with c on its own loopback listener.
func serveProbe(t *testing.T, ts *testServer, c codec) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := ts.srv
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { s.handleGenerate(ctx, s.requestID(ctx), c) }}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

func probePost(t *testing.T, url, key, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	if key != "" {
		req.Header.Set("X-Probe-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestCodecRendersTheCore: a wire format is a codec over the one core. A request in
// the probe's format authenticates by the probe's header, runs on the engine and
// is settled by the core, and its answer, streamed or whole, is what the probe
// renders of the core's events; the probe is told the result after the ledger has
// the request.
func TestCodecRendersTheCore(t *testing.T) {
	eng := newFakeEngine()
	ts := startServer(t, testConfig, eng)
	c := &probeCodec{ledger: func() int { return len(ts.ledger()) }}
	url := serveProbe(t, ts, c)
	key := ts.keys["acme"]

	st, body := probePost(t, url, key, `{"model":"tiny","say":"hi","max":3}`)
	if st != 200 || body != "whole w0 w1 w2  length 3" {
		t.Fatalf("whole: %d %q", st, body)
	}
	st, body = probePost(t, url, key, `{"model":"tiny","say":"hi","max":2,"stream":true}`)
	if want := "start tiny\n\ntext w0 \n\ntext w1 \n\nfinish length\n\nusage 53 2\n\nend\n"; st != 200 || body != want {
		t.Fatalf("stream: %d %q, want %q", st, body, want)
	}
	if got := c.told(); len(got) != 2 || got[0] != "ok w0 w1 w2  1" || got[1] != "ok w0 w1  2" {
		t.Fatalf("finished: %q", got)
	}
}

// TestCodecErrorShape: every error of a request in the probe's format is in the
// probe's shape with its status: a missing key (before the job), a key in the
// wrong header, a rate quota's refusal, a bad body (the codec's own), an unknown model (routing), and an
// engine that refuses as overloaded (529, the probe's status for it, after
// admission: the probe is told).
func TestCodecErrorShape(t *testing.T) {
	eng := newFakeEngine()
	eng.Refuse = map[string]error{"big": engine.ErrQueueFull}
	ts := startServer(t, testConfig, eng)
	c := &probeCodec{ledger: func() int { return len(ts.ledger()) }}
	url := serveProbe(t, ts, c)
	key := ts.keys["acme"]
	cases := []struct {
		key, body, want string
		status          int
	}{
		{"", `{"model":"tiny","say":"hi","max":1}`, "ERR 401 invalid_request_error missing API key", 401},
		{"lml_wrong", `{"model":"tiny","say":"hi","max":1}`, "ERR 401 invalid_request_error incorrect API key provided", 401},
		{key, `{"model":"tiny","say":"hi","nope":1}`, "ERR 400 invalid_request_error probe: ", 400},
		{key, `{"model":"nope","say":"hi","max":1}`, "ERR 404 invalid_request_error ", 404},
		{key, `{"model":"big","say":"hi","max":1}`, "ERR 529 server_error ", 529},
	}
	for _, tc := range cases {
		st, body := probePost(t, url, tc.key, tc.body)
		if st != tc.status || !strings.HasPrefix(body, tc.want) {
			t.Errorf("%s: %d %q, want %d %q…", tc.body, st, body, tc.status, tc.want)
		}
	}
	// A rate quota's refusal (before the body is decoded): 429 in the probe's shape.
	slow := ts.keys["slow"]
	var st int
	var body string
	for range 3 {
		if st, body = probePost(t, url, slow, `{"model":"tiny","say":"hi","max":1}`); st == 429 {
			break
		}
	}
	if st != 429 || !strings.HasPrefix(body, "ERR 429 requests rate limit reached") {
		t.Errorf("rate limited: %d %q", st, body)
	}
	// Bearer is OpenAI's header, not the probe's.
	req, _ := http.NewRequest("POST", url, strings.NewReader(`{"model":"tiny","say":"hi","max":1}`))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("a Bearer key for the probe: %d, want 401", resp.StatusCode)
	}
}

// TestCodecPings: while a stream waits for its tokens, an output that is a pinger
// writes its own keep-alive event between events.
func TestCodecPings(t *testing.T) {
	old := pingEvery
	pingEvery = 20 * time.Millisecond
	t.Cleanup(func() { pingEvery = old })
	eng := newFakeEngine()
	eng.Delay = 120 * time.Millisecond
	ts := startServer(t, testConfig, eng)
	c := &probeCodec{ledger: func() int { return len(ts.ledger()) }}
	url := serveProbe(t, ts, c)
	req, _ := http.NewRequest("POST", url, strings.NewReader(`{"model":"tiny","say":"hi","max":2,"stream":true}`))
	req.Header.Set("X-Probe-Key", ts.keys["acme"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if sc.Text() != "" {
			lines = append(lines, sc.Text())
		}
	}
	pings := 0
	for i, l := range lines {
		if l == "ping" {
			pings++
			if i == 0 || i == len(lines)-1 {
				t.Errorf("a ping outside the stream's events: %q", lines)
			}
		}
	}
	if pings == 0 || lines[0] != "start tiny" || lines[len(lines)-1] != "end" {
		t.Fatalf("%d pings in %q", pings, lines)
	}
}
