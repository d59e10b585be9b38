package gateway

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"
	"github.com/valyala/fasthttp"

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
	if bl := back.ledger(); len(bl) != 1 || bl[0].RequestID != led[0].RequestID {
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
// case the request reserved, so a budget cannot be escaped through it.
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
	led := front.ledger()
	// prompt bound: 5 bytes + 16 per message; 10 output tokens; $1 per 1K each.
	if len(led) != 1 || led[0].PromptTokens != 21 || led[0].CompletionTokens != 10 || led[0].Cost != money.USD(0.031) {
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
