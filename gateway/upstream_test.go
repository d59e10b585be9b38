package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"
	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/internal/sse"
	"github.com/lmlite/lmlite/money"
	"github.com/lmlite/lmlite/tenancy"
)

// TestUpstream puts one lmlite (the front) before another (the upstream, itself a
// real OpenAI-compatible server): responses and streams pass through, usage is settled
// at the front's prices, and a failing upstream makes the router step down a tier.
func TestUpstream(t *testing.T) {
	back := startServer(t, testConfig, newFakeEngine())
	t.Setenv("LMLITE_TEST_UPSTREAM_KEY", back.keys["acme"])
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadURL := "http://" + dead.Addr().String() + "/v1"
	dead.Close() // nothing listens there
	front := startServer(t, `
ledger: {sync: process}
models:
  - {id: local, path: tiny.gguf, prompt_usd_per_1k: 0.001, completion_usd_per_1k: 0.001}
  - id: remote
    upstream: {base_url: "`+back.url+`/v1", model: tiny, api_key_env: LMLITE_TEST_UPSTREAM_KEY}
    max_model_len: 512
    prompt_usd_per_1k: 1
    completion_usd_per_1k: 2
  - id: dead
    upstream: {base_url: "`+deadURL+`"}
tiers:
  fast: [{model: local}]
  balanced: [{model: local}]
  deep: [{model: remote}]
  max: [{model: dead}]
plans: {open: {max_concurrency: 1}} # sequential: a leaked slot would refuse the next request
tenants: [{id: acme, plan: open}]
`, newFakeEngineWith("local"))
	c := front.client("acme")
	var raw *http.Response
	resp, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "remote", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, MaxTokens: openai.Int(4),
	}, option.WithResponseInto(&raw), option.WithJSONSet("lmlite", map[string]any{"max_latency_ms": 60000}))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].Message.Content != "w0 w1 w2 w3 " || raw.Header.Get("X-LMLite-Model") != "remote" || raw.Header.Get("X-LMLite-Tier") != "deep" {
		t.Errorf("passthrough: %+v %v", resp, raw.Header)
	}
	// The upstream saw the request under its own name, without the lmlite field.
	if r := back.eng.lastRequest(); r.MaxTokens != 4 {
		t.Errorf("upstream request %+v", r)
	}
	led := front.ledger()
	if len(led) != 1 || led[0].PromptTokens != int(resp.Usage.PromptTokens) || led[0].CompletionTokens != 4 ||
		led[0].Cost != money.Money(resp.Usage.PromptTokens*1_000_000+4*2_000_000) || led[0].Finish != "length" {
		t.Errorf("front ledger %+v (usage %+v)", led, resp.Usage)
	}
	if bl := back.ledger(); len(bl) != 1 || bl[0].ClientRequestID != led[0].RequestID {
		t.Errorf("the request id did not travel upstream: %+v vs %+v", bl, led)
	}

	// Streams pass through event by event; usage only when asked for.
	for _, usage := range []bool{false, true} {
		params := openai.ChatCompletionNewParams{Model: "remote", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, MaxTokens: openai.Int(5)}
		if usage {
			params.StreamOptions.IncludeUsage = openai.Bool(true)
		}
		st := c.Chat.Completions.NewStreaming(context.Background(), params)
		var acc openai.ChatCompletionAccumulator
		for st.Next() {
			acc.AddChunk(st.Current())
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		if acc.Choices[0].Message.Content != "w0 w1 w2 w3 w4 " || (acc.Usage.CompletionTokens == 5) != usage {
			t.Errorf("stream usage=%v: %q %+v", usage, acc.Choices[0].Message.Content, acc.Usage)
		}
	}
	if led := front.ledger(); len(led) != 3 || led[2].CompletionTokens != 5 || led[1].CompletionTokens != 5 {
		t.Errorf("stream ledger %+v", led)
	}

	// Text completions too.
	cr, err := c.Completions.New(context.Background(), openai.CompletionNewParams{
		Model: "remote", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("x")}, MaxTokens: openai.Int(2)})
	if err != nil || cr.Choices[0].Text != "w0 w1 " {
		t.Errorf("completion %+v %v", cr, err)
	}

	// A client error of the upstream passes through with its status.
	_, err = c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "remote", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, Temperature: openai.Float(1.5), TopP: openai.Float(0.5),
		MaxTokens: openai.Int(500)})
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 400 || ae.Param != "max_tokens" {
		t.Errorf("upstream 400: %v", err)
	}

	// A dead upstream: named directly it answers 502; as the max tier, the router steps
	// down to the next tier.
	_, err = c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "dead", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, MaxTokens: openai.Int(2)})
	if !errors.As(err, &ae) || ae.StatusCode != 502 || ae.Code != "upstream_error" {
		t.Errorf("dead upstream: %v", err)
	}
	resp, err = c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "auto", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, MaxTokens: openai.Int(2),
	}, option.WithResponseInto(&raw), option.WithHeader("X-LMLite-Tier-Mode", "max"))
	if err != nil || raw.Header.Get("X-LMLite-Tier") != "deep" || raw.Header.Get("X-LMLite-Model") != "remote" {
		t.Errorf("step down from a failed tier: %v %v", err, raw.Header)
	}
	// Fixed on the dead tier: refused with 502, and the tenant's slot is released.
	for i := 0; i < 2; i++ {
		_, err = c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model: "tier:max", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, MaxTokens: openai.Int(2)})
		if !errors.As(err, &ae) || (ae.StatusCode != 502 && ae.StatusCode != 503) {
			t.Errorf("fixed on a dead tier: %v", err)
		}
	}
	// ...and while it counts as failing, the router skips it at once.
	if !front.srv.pred.Stats("dead", front.srv.now()).Failing {
		t.Error("the dead upstream is not marked failing")
	}
	metrics := string(mustGet(t, front.url+"/metrics"))
	for _, want := range []string{
		`lmlite_model_state{model="remote",state="ready"} 1`,
		`lmlite_time_to_first_token_seconds_count{model="remote"} 2`, // the two streams
		`lmlite_upstream_failures_total{model="dead"} 1`,             // then marked failing: the router skips it
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func mustGet(t *testing.T, url string) []byte {
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return []byte(sb.String())
}

// TestUpstreamWithoutUsage: an upstream that reports no usage is charged the worst
// case the request reserved, so a budget cannot be escaped through it; with a
// prediction, its rejected tokens' worst case too.
func TestUpstreamWithoutUsage(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	up := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`)
	}}
	go up.Serve(ln)
	defer up.Shutdown()
	front := startServer(t, `
models:
  - {id: m, upstream: {base_url: "http://`+ln.Addr().String()+`/v1"}, prompt_usd_per_1k: 1, completion_usd_per_1k: 1}
plans: {open: {}}
tenants: [{id: acme, plan: open}]
`, nil)
	c := front.client("acme")
	if _, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}, MaxTokens: openai.Int(10)}); err != nil {
		t.Fatal(err)
	}
	// With a prediction, the worst case has its rejected tokens too (its bytes + 1,
	// billed as completion tokens upstream as here).
	p := openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}, MaxTokens: openai.Int(10)}
	p.Prediction.Content.OfString = openai.String("hello there")
	if _, err := c.Chat.Completions.New(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	led := front.ledger()
	// prompt bound: 5 bytes + 16 per message; 10 output tokens (+ 12 for the
	// prediction's 11 bytes); $1 per 1K each.
	if len(led) != 2 || led[0].PromptTokens != 21 || led[0].CompletionTokens != 10 || led[0].Cost != money.USD(0.031) ||
		led[1].PromptTokens != 21 || led[1].CompletionTokens != 22 || led[1].Cost != money.USD(0.043) {
		t.Errorf("ledger %+v", led)
	}
}

// TestUpstreamBodyRewrite: the body sent upstream keeps every member but those it
// rewrites, raw and in order: the model's upstream name, no lmlite, usage in streams,
// a completion's max_tokens made explicit.
func TestUpstreamBodyRewrite(t *testing.T) {
	cases := []struct {
		kind      kind
		body, out string
	}{
		{kindChat, `{"model":"m","messages":[{"role":"user","content":"x \"lmlite\""}]}`,
			`{"messages":[{"role":"user","content":"x \"lmlite\""}],"model":"up"}`},
		{kindChat, `{"model": "up", "lmlite": {"tier": "fast"}, "stream": true, "stream_options": {"include_usage": false}, "n": 1, "messages": [{"role":"user","content":"x"}]}`,
			`{"model":"up","stream":true,"n":1,"messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}}`},
		{kindChat, `{"model":"up","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}]}`,
			`{"model":"up","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}]}`},
		{kindCompletion, `{"model":"up","prompt":"p"}`, `{"model":"up","prompt":"p","max_tokens":16}`},
	}
	for _, c := range cases {
		j := &job{c: choice{m: &model{id: "m", upstream: &upstream{model: "up"}}}}
		if aerr := j.in.parse(c.kind, []byte(c.body)); aerr != nil {
			t.Fatalf("%s: %s", c.body, aerr.message)
		}
		got, err := j.upstreamBody([]byte(c.body))
		if err != nil || string(got) != c.out {
			t.Errorf("upstreamBody(%s)\n = %s, %v\nwant %s", c.body, got, err, c.out)
		}
	}
}

// TestUpstreamUsage reads usage and finish reasons, and nothing from what it cannot read.
func TestUpstreamUsage(t *testing.T) {
	cases := []struct {
		in                 string
		usage, choices     bool
		prompt, completion int
		finish             string
	}{
		{`{"choices":[{"index":0,"message":{"content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`, true, true, 5, 1, "stop"},
		{`{"choices":[],"usage":{"completion_tokens":2,"prompt_tokens":3}}`, true, false, 3, 2, ""},
		{`{"choices":[{"delta":{"content":"x"},"finish_reason":null}]}`, false, true, 0, 0, ""},
		{`{"choices":[{"finish_reason":"content_filter"},{"finish_reason":"stop"}]}`, false, true, 0, 0, "content_filter"},
		{`{"usage":{"prompt_tokens":"x"}}`, true, false, 0, 0, ""},
		{`{"usage":null,"choices":null}`, false, false, 0, 0, ""},
		{`[1,2]`, false, false, 0, 0, ""},
		{`{"usage":{"prompt_tokens":4`, false, false, 0, 0, ""},
	}
	for _, c := range cases {
		var e tenancy.Entry
		u, ch := upstreamUsage([]byte(c.in), &e)
		if u != c.usage || ch != c.choices || e.PromptTokens != c.prompt || e.CompletionTokens != c.completion || e.Finish != c.finish {
			t.Errorf("%s: usage %v choices %v %d/%d %q", c.in, u, ch, e.PromptTokens, e.CompletionTokens, e.Finish)
		}
	}
}

// TestUpstreamErrorHidesItsAddress: a 502 from an upstream that cannot be reached
// does not name the upstream's address (its host and port, its URL) to the client;
// the server's log does.
func TestUpstreamErrorHidesItsAddress(t *testing.T) {
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := dead.Addr().String()
	dead.Close() // nothing listens there
	var logs logBuffer
	front := startServerWith(t, `
models:
  - {id: m, upstream: {base_url: "http://`+addr+`/v1/secret-path"}, prompt_usd_per_1k: 1, completion_usd_per_1k: 1}
plans: {open: {}}
tenants: [{id: acme, plan: open}]
`, nil, Options{Logger: logs.logger()}, nil)
	for _, stream := range []bool{false, true} {
		resp, body := front.post("/v1/chat/completions", front.keys["acme"],
			`{"model":"m","stream":`+strconv.FormatBool(stream)+`,"max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`)
		if resp.StatusCode != 502 || !strings.Contains(body, `"code":"upstream_error"`) {
			t.Errorf("stream %v: %d %s", stream, resp.StatusCode, body)
		}
		_, port, _ := net.SplitHostPort(addr)
		if strings.Contains(body, addr) || strings.Contains(body, "127.0.0.1") || strings.Contains(body, port) || strings.Contains(body, "secret-path") {
			t.Errorf("stream %v: the answer names the upstream: %s", stream, body)
		}
	}
	if !strings.Contains(logs.String(), addr) {
		t.Errorf("the log does not name the upstream that failed:\n%s", logs.String())
	}
}

// sseUpstream serves an OpenAI-compatible event stream on a loopback port: events is
// called with the stream's writer for each request. It returns the base URL (…/v1).
func sseUpstream(t *testing.T, events func(w *bufio.Writer)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStreamWriter(events)
	}}
	go up.Serve(ln)
	t.Cleanup(func() { up.Shutdown() })
	return "http://" + ln.Addr().String() + "/v1"
}

// TestUpstreamStreamParsedAsJSON: an upstream's events are read as JSON, not matched
// byte by byte: a usage written `"usage" : {` with spaces, a finish reason with
// spaces and a chunk pretty-printed over several data lines (one SSE event) are an
// answer (200) charged its reported usage. A client that did not ask for usage gets
// none, neither the usage chunk nor the "usage" members of the other chunks; one that
// asked gets it.
func TestUpstreamStreamParsedAsJSON(t *testing.T) {
	url := sseUpstream(t, func(w *bufio.Writer) {
		for _, ev := range []string{
			"data: {\ndata:   \"id\": \"c1\",\ndata:   \"object\": \"chat.completion.chunk\",\ndata:   \"choices\": [\ndata:     {\"index\": 0, \"delta\": {\"role\": \"assistant\", \"content\": \"\"}, \"finish_reason\": null}\ndata:   ],\ndata:   \"usage\": null\ndata: }\n\n",
			"data: { \"id\" : \"c1\", \"object\" : \"chat.completion.chunk\", \"choices\" : [ { \"index\" : 0, \"delta\" : { \"content\" : \"Hel\" }, \"finish_reason\" : null } ], \"usage\" : null }\n\n",
			"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":null}]}\n\n",
			"data: { \"id\" : \"c1\", \"object\" : \"chat.completion.chunk\", \"choices\" : [ { \"index\" : 0, \"delta\" : { }, \"finish_reason\" : \"stop\" } ] }\n\n",
			"data: { \"id\" : \"c1\", \"object\" : \"chat.completion.chunk\", \"choices\" : [ ],\n" +
				"data:   \"usage\" : { \"prompt_tokens\" : 7 , \"completion_tokens\" : 2 , \"total_tokens\" : 9 } }\n\n",
			"data: [DONE]\n\n",
		} {
			w.WriteString(ev)
			w.Flush()
		}
	})
	front := startServer(t, `
models:
  - {id: m, upstream: {base_url: "`+url+`"}, prompt_usd_per_1k: 1, completion_usd_per_1k: 2}
plans: {open: {}}
tenants: [{id: acme, plan: open}]
`, nil)
	for i, usage := range []bool{false, true} {
		body := `{"model":"m","stream":true,"max_tokens":500,"messages":[{"role":"user","content":"hi"}]}`
		if usage {
			body = `{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":500,"messages":[{"role":"user","content":"hi"}]}`
		}
		resp, out := front.post("/v1/chat/completions", front.keys["acme"], body)
		if resp.StatusCode != 200 || !strings.HasSuffix(out, "data: [DONE]\n\n") {
			t.Fatalf("usage %v: %d %s", usage, resp.StatusCode, out)
		}
		// The client's stream, read as the SDK reads it.
		var text strings.Builder
		var got *openai.CompletionUsage
		rd := sse.NewReader(strings.NewReader(out), 1024)
		for {
			ev, err := rd.NextEvent()
			if err != nil || string(ev) == "[DONE]" {
				break
			}
			var ch openai.ChatCompletionChunk
			if err := json.Unmarshal(ev, &ch); err != nil {
				t.Fatalf("usage %v: event %q: %v", usage, ev, err)
			}
			for _, c := range ch.Choices {
				text.WriteString(c.Delta.Content)
			}
			if ch.JSON.Usage.Valid() {
				got = &ch.Usage
			}
		}
		if text.String() != "Hello" {
			t.Errorf("usage %v: text %q", usage, text.String())
		}
		if !usage && strings.Contains(out, `"usage"`) {
			t.Errorf("usage reached a client that did not ask for it:\n%s", out)
		}
		if usage && (got == nil || got.PromptTokens != 7 || got.CompletionTokens != 2) {
			t.Errorf("the usage asked for: %+v\n%s", got, out)
		}
		led := front.ledger()
		if len(led) != i+1 || led[i].Status != 200 || led[i].PromptTokens != 7 || led[i].CompletionTokens != 2 ||
			led[i].Cost != money.USD(0.007+0.004) || led[i].Finish != "stop" {
			t.Errorf("usage %v: ledger %+v", usage, led)
		}
	}
}

// TestUpstreamStreamCancelChargesRelayed: a client that goes away in the middle of an
// upstream stream (no usage seen yet) is charged what was relayed to it, the content
// chunks it was sent (one token each) and the prompt's bound, not the worst case of
// its max_tokens.
func TestUpstreamStreamCancelChargesRelayed(t *testing.T) {
	const before = 5 // chunks the client reads before it goes away
	gone := make(chan struct{})
	stopped := make(chan int, 1) // chunks the upstream wrote
	url := sseUpstream(t, func(w *bufio.Writer) {
		n := 0
		defer func() { stopped <- n }()
		chunk := func() error {
			n++
			w.WriteString(`data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok "},"finish_reason":null}]}` + "\n\n")
			return w.Flush()
		}
		for range before {
			if chunk() != nil {
				return
			}
		}
		<-gone
		for range 200 { // until the gateway closes the stream
			time.Sleep(20 * time.Millisecond)
			if chunk() != nil {
				return
			}
		}
	})
	front := startServer(t, `
models:
  - {id: m, upstream: {base_url: "`+url+`"}, prompt_usd_per_1k: 1, completion_usd_per_1k: 1}
plans: {open: {}}
tenants: [{id: acme, plan: open}]
`, nil)
	req, _ := http.NewRequest("POST", front.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"max_tokens":1000,"messages":[{"role":"user","content":"hello"}]}`))
	req.Header.Set("Authorization", "Bearer "+front.keys["acme"])
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	rd := sse.NewReader(resp.Body, 4096)
	for i := 0; i < before; {
		ev, err := rd.NextEvent()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(ev), `"tok "`) {
			i++
		}
	}
	resp.Body.Close() // the client goes away
	close(gone)
	var wrote int
	select {
	case wrote = <-stopped:
	case <-time.After(20 * time.Second):
		t.Fatal("the upstream stream was not closed after the client went away")
	}
	var led []tenancy.Entry
	for deadline := time.Now().Add(10 * time.Second); len(led) == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		led = front.ledger()
	}
	// prompt bound: 5 bytes + 16 per message.
	if len(led) != 1 || led[0].Status != 499 || led[0].PromptTokens != 21 || led[0].CompletionTokens < before ||
		led[0].CompletionTokens > wrote || led[0].Cost != money.Money(int64(21+led[0].CompletionTokens)*1_000_000) {
		t.Errorf("ledger %+v (the upstream wrote %d chunks)", led, wrote)
	}
}

// TestUpstreamChunk reads stream chunks with any spacing: usage, finish reasons and
// the choices carrying output; and withoutMember drops a chunk's usage member.
func TestUpstreamChunk(t *testing.T) {
	cases := []struct {
		in   string
		ok   bool
		want chunkInfo
	}{
		{`{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}`, true, chunkInfo{choices: 1, deltas: 1}},
		{`{ "choices" : [ { "delta" : { "content" : "" } } ] , "usage" : null }`, true, chunkInfo{member: true, choices: 1}},
		{"{\n \"choices\": [],\n \"usage\" : { \"completion_tokens\" : 3, \"prompt_tokens\" : 4 }\n}", true,
			chunkInfo{member: true, usage: true, prompt: 4, completion: 3}},
		{`{"choices":[{"text":"a","finish_reason":"length"},{"delta":{"tool_calls":[{"index":0}]}},{"delta":{"role":"assistant"}}]}`, true,
			chunkInfo{choices: 3, deltas: 2, finish: "length"}},
		{`{"choices":[{"delta":{"reasoning_content":"hm"},"finish_reason" : "stop"}]}`, true, chunkInfo{choices: 1, deltas: 1, finish: "stop"}},
		{`{"usage":{"completion_tokens":2}}`, true, chunkInfo{member: true}},
		{`{"choices":[1]}`, false, chunkInfo{}},
		{`{"choices":[{"delta":{"content":"x"}}]`, false, chunkInfo{}},
		{`[DONE]`, false, chunkInfo{}},
	}
	for _, c := range cases {
		var ci chunkInfo
		if ok := upstreamChunk([]byte(c.in), &ci); ok != c.ok || (ok && ci != c.want) {
			t.Errorf("%s: %v %+v, want %v %+v", c.in, ok, ci, c.ok, c.want)
		}
	}
	got := withoutMember(nil, []byte("{ \"id\" : \"a\",\n \"usage\" : {\"prompt_tokens\": 1}, \"choices\" : [ ] }"), `"usage"`)
	if string(got) != `{"id":"a","choices":[ ]}` {
		t.Errorf("withoutMember: %s", got)
	}
}

// FuzzUpstreamChunk: any chunk is read without panicking, and a JSON object without
// its usage member is still a JSON object, with no usage member.
func FuzzUpstreamChunk(f *testing.F) {
	f.Add([]byte(`{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}],"usage":null}`))
	f.Add([]byte(`{ "choices" : [ ], "usage" : { "prompt_tokens" : 1 } }`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var ci chunkInfo
		upstreamChunk(b, &ci)
		if !json.Valid(b) || len(bytes.TrimSpace(b)) == 0 || bytes.TrimSpace(b)[0] != '{' {
			return
		}
		out := withoutMember(nil, b, `"usage"`)
		var m map[string]json.RawMessage
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("%s → %s: %v", b, out, err)
		}
		if _, ok := m["usage"]; ok {
			t.Fatalf("%s → %s: usage kept", b, out)
		}
	})
}
