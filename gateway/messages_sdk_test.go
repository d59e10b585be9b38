package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go"

	"github.com/lmlite/lmlite/engine"
)

// anthropicClient is the official Anthropic Go SDK pointed at a server (base, with
// no /v1: the SDK adds it) with key, retries off so that errors are seen as they are.
func anthropicClient(base, key string, opts ...aoption.RequestOption) anthropic.Client {
	o := append([]aoption.RequestOption{aoption.WithoutEnvironmentDefaults(), aoption.WithBaseURL(base), aoption.WithAPIKey(key), aoption.WithMaxRetries(0)}, opts...)
	return anthropic.NewClient(o...)
}

// anthropicError is err as the SDK's error type, or fails the test.
func anthropicError(t *testing.T, err error, status int, typ string) *anthropic.Error {
	t.Helper()
	var ae *anthropic.Error
	if !errors.As(err, &ae) {
		t.Fatalf("error %v, want the SDK's %d %s", err, status, typ)
	}
	if ae.StatusCode != status || string(ae.Type()) != typ {
		t.Fatalf("error %d %s (%s), want %d %s", ae.StatusCode, ae.Type(), ae.RawJSON(), status, typ)
	}
	return ae
}

// TestSDKMessagesCountTokens: count_tokens is the prompt's tokens as the core
// renders and tokenizes it on the model the request would run on: the same count as
// chat/completions' prompt_tokens for the same conversation; it charges nothing
// (its ledger entry has no tokens, no cost); it is authenticated (the SDK's
// x-api-key) and rate limited, its errors in Anthropic's shape.
func TestSDKMessagesCountTokens(t *testing.T) {
	ts := startServer(t, testConfig, newFakeEngine())
	ctx := context.Background()
	c := anthropicClient(ts.url, ts.keys["acme"])
	var raw *http.Response
	n, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{
		Model:    "tiny",
		System:   anthropic.MessageCountTokensParamsSystemUnion{OfString: anthropic.String("be brief")},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))},
	}, aoption.WithResponseInto(&raw))
	if err != nil {
		t.Fatal(err)
	}
	oc := ts.client("acme")
	chat, err := oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "tiny", Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage("hello")}, MaxTokens: openai.Int(1),
	})
	if err != nil {
		t.Fatal(err)
	}
	wantPrompt := "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
	if n.InputTokens != chat.Usage.PromptTokens || n.InputTokens != int64(len(wantPrompt)+1) {
		t.Fatalf("count_tokens %d, chat's prompt_tokens %d, want %d", n.InputTokens, chat.Usage.PromptTokens, len(wantPrompt)+1)
	}
	if raw.Header.Get("X-LMLite-Model") != "tiny" {
		t.Errorf("headers %v", raw.Header)
	}
	led := ts.ledger()
	if len(led) != 2 || led[0].Status != 200 || led[0].PromptTokens != 0 || led[0].CompletionTokens != 0 || led[0].Cost != 0 || led[0].Model != "tiny" {
		t.Errorf("count_tokens' ledger entry %+v", led[0])
	}
	if ts.srv.ten.InFlight("acme") != 0 {
		t.Error("count_tokens left a concurrency slot taken")
	}

	params := anthropic.MessageCountTokensParams{Model: "big", Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("x"))}}
	// A bad key, another tenant's model (404: the same as a model that does not
	// exist), a rate limit: the SDK's error type with Anthropic's types.
	bad, small := anthropicClient(ts.url, "lml_wrong"), anthropicClient(ts.url, ts.keys["small"])
	_, err = bad.Messages.CountTokens(ctx, params)
	anthropicError(t, err, 401, "authentication_error")
	_, err = small.Messages.CountTokens(ctx, params)
	anthropicError(t, err, 404, "not_found_error")
	slow := anthropicClient(ts.url, ts.keys["slow"])
	if _, err = slow.Messages.CountTokens(ctx, params); err != nil {
		t.Fatal(err)
	}
	_, err = slow.Messages.CountTokens(ctx, params)
	anthropicError(t, err, 429, "rate_limit_error")
	// An image block is a 400 naming it.
	_, err = c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: "tiny", Messages: []anthropic.MessageParam{
		anthropic.NewUserMessage(anthropic.NewTextBlock("look"), anthropic.NewImageBlockBase64("image/png", "iVBORw0KGgo="))}})
	ae := anthropicError(t, err, 400, "invalid_request_error")
	if want := "messages[0].content[1]"; !strings.Contains(ae.Message, want) {
		t.Errorf("image block: %q does not name %s", ae.Message, want)
	}
}

// userText is a conversation of one user message.
func userText(text string) []anthropic.MessageParam {
	return []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(text))}
}

// textOf is a Message's text blocks' text.
func textOf(m *anthropic.Message) string {
	var b strings.Builder
	for _, c := range m.Content {
		if c.Type == "text" {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

// streamMessage streams a request through the SDK and returns the accumulated
// Message and the events' types in order.
func streamMessage(t *testing.T, c anthropic.Client, p anthropic.MessageNewParams, opts ...aoption.RequestOption) (anthropic.Message, []string) {
	t.Helper()
	st := c.Messages.NewStreaming(context.Background(), p, opts...)
	var acc anthropic.Message
	var types []string
	for st.Next() {
		ev := st.Current()
		types = append(types, ev.Type)
		if err := acc.Accumulate(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	return acc, types
}

// TestSDKMessages: messages.New and the streaming accumulator give the same
// Message: the model's text, stop_reason max_tokens, usage equal to count_tokens
// for the prompt; sampling parameters, stop_sequences (stop_reason stop_sequence
// with the string), metadata.user_id (the ledger's user hash) and the anthropic
// headers reach the engine and the ledger as they would through chat/completions.
func TestSDKMessages(t *testing.T) {
	ts := startServer(t, testConfig, newFakeEngine())
	ctx := context.Background()
	c := anthropicClient(ts.url, ts.keys["acme"], aoption.WithHeader("anthropic-beta", "prompt-caching-2024-07-31"))
	p := anthropic.MessageNewParams{
		Model: "tiny", MaxTokens: 5, Messages: userText("hello"),
		System:   []anthropic.TextBlockParam{{Text: "be brief"}},
		Metadata: anthropic.MetadataParam{UserID: anthropic.String("end-user-7")},
	}
	sampling := []aoption.RequestOption{aoption.WithJSONSet("temperature", 0.5), aoption.WithJSONSet("top_p", 0.9), aoption.WithJSONSet("top_k", 20)}
	var raw *http.Response
	m, err := c.Messages.New(ctx, p, append(sampling, aoption.WithResponseInto(&raw))...)
	if err != nil {
		t.Fatal(err)
	}
	if textOf(m) != "w0 w1 w2 w3 w4 " || m.StopReason != anthropic.StopReasonMaxTokens || m.Type != "message" || m.Role != "assistant" ||
		m.Model != "tiny" || !strings.HasPrefix(m.ID, "msg_") || len(m.Content) != 1 {
		t.Fatalf("message %+v", m)
	}
	wantPrompt := "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
	if m.Usage.InputTokens != int64(len(wantPrompt)+1) || m.Usage.OutputTokens != 5 || m.Usage.CacheReadInputTokens != 0 {
		t.Errorf("usage %+v", m.Usage)
	}
	n, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: "tiny", Messages: p.Messages,
		System: anthropic.MessageCountTokensParamsSystemUnion{OfTextBlockArray: p.System}})
	if err != nil || n.InputTokens != m.Usage.InputTokens {
		t.Errorf("count_tokens %v %v, usage.input_tokens %d", n, err, m.Usage.InputTokens)
	}
	if raw.Header.Get("X-LMLite-Model") != "tiny" || raw.Header.Get("Content-Type") != "application/json" {
		t.Errorf("headers %v", raw.Header)
	}
	r := ts.eng.lastRequest()
	if r.Sampling.Temperature != 0.5 || r.Sampling.TopP != 0.9 || r.Sampling.TopK != 20 || r.MaxTokens != 5 || r.Tenant != "acme" {
		t.Errorf("engine request %+v", r)
	}
	led := ts.ledger()
	if len(led) != 2 || led[0].Status != 200 || led[0].CompletionTokens != 5 || led[0].Cost <= 0 ||
		led[0].User == "" || led[0].User != ts.srv.hashIdentifier("acme", "end-user-7") {
		t.Errorf("ledger %+v", led)
	}

	// Streamed: Anthropic's event sequence, accumulated into the same Message.
	sm, types := streamMessage(t, c, p, sampling...)
	want := "message_start content_block_start " + strings.Repeat("content_block_delta ", 5) + "content_block_stop message_delta message_stop"
	if strings.Join(types, " ") != want {
		t.Errorf("events %v", types)
	}
	if textOf(&sm) != textOf(m) || sm.StopReason != m.StopReason || sm.Usage.InputTokens != m.Usage.InputTokens ||
		sm.Usage.OutputTokens != m.Usage.OutputTokens || sm.ID == m.ID || !strings.HasPrefix(sm.ID, "msg_") {
		t.Errorf("streamed %+v, not streamed %+v", sm, m)
	}

	// stop_sequences: stop_reason stop_sequence, naming the string.
	p.StopSequences = []string{"w3", "zzz"}
	for _, stream := range []bool{false, true} {
		var got anthropic.Message
		if stream {
			got, _ = streamMessage(t, c, p)
		} else {
			r, err := c.Messages.New(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			got = *r
		}
		if textOf(&got) != "w0 w1 w2 " || got.StopReason != anthropic.StopReasonStopSequence || got.StopSequence != "w3" {
			t.Errorf("stream %v: stop sequence: %q %s %q", stream, textOf(&got), got.StopReason, got.StopSequence)
		}
	}

	// The key as Authorization: Bearer, and anthropic-version, work too (raw HTTP).
	resp, body := ts.post("/v1/messages", ts.keys["acme"], `{"model":"tiny","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`,
		"anthropic-version", "2023-06-01")
	if resp.StatusCode != 200 || !strings.Contains(body, `"type":"message"`) {
		t.Errorf("bearer: %d %s", resp.StatusCode, body)
	}
}

// TestSDKMessagesErrors: errors in Anthropic's shape through the SDK's error type:
// a bad key (401), another plan's model (404, as a model that does not exist), a
// rate limit (429), an overloaded engine (529), max_tokens missing and an image
// block (400 naming them); every refused request is settled (no slot left taken).
func TestSDKMessagesErrors(t *testing.T) {
	eng := newFakeEngine()
	eng.Refuse = map[string]error{"big": engine.ErrQueueFull}
	ts := startServer(t, testConfig, eng)
	ctx := context.Background()
	p := anthropic.MessageNewParams{Model: "tiny", MaxTokens: 3, Messages: userText("hi")}
	bad, small, slow, acme := anthropicClient(ts.url, "lml_wrong"), anthropicClient(ts.url, ts.keys["small"]),
		anthropicClient(ts.url, ts.keys["slow"]), anthropicClient(ts.url, ts.keys["acme"])
	_, err := bad.Messages.New(ctx, p)
	anthropicError(t, err, 401, "authentication_error")
	if resp, body := ts.post("/v1/messages", "", `{"model":"tiny","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`); resp.StatusCode != 401 ||
		!strings.HasPrefix(body, `{"type":"error","error":{"type":"authentication_error","message":`) {
		t.Errorf("no key: %d %s", resp.StatusCode, body)
	}
	big := p
	big.Model = "big"
	_, err = small.Messages.New(ctx, big)
	anthropicError(t, err, 404, "not_found_error")
	_, err = acme.Messages.New(ctx, big)
	anthropicError(t, err, 529, "overloaded_error")
	if _, err = slow.Messages.New(ctx, p); err != nil {
		t.Fatal(err)
	}
	_, err = slow.Messages.New(ctx, p)
	anthropicError(t, err, 429, "rate_limit_error")
	_, err = acme.Messages.New(ctx, p, aoption.WithJSONDel("max_tokens"))
	if ae := anthropicError(t, err, 400, "invalid_request_error"); !strings.Contains(ae.Message, "max_tokens") {
		t.Errorf("max_tokens missing: %s", ae.Message)
	}
	img := p
	img.Messages = []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("look"), anthropic.NewImageBlockBase64("image/png", "iVBORw0KGgo="))}
	_, err = acme.Messages.New(ctx, img)
	if ae := anthropicError(t, err, 400, "invalid_request_error"); !strings.Contains(ae.Message, "messages[0].content[1]") {
		t.Errorf("image block: %s", ae.Message)
	}
	if resp, body := ts.get("/v1/messages", ts.keys["acme"]); resp.StatusCode != 405 ||
		!strings.HasPrefix(body, `{"type":"error","error":{"type":"invalid_request_error","message":`) {
		t.Errorf("GET: %d %s", resp.StatusCode, body)
	}
	_, err = acme.Messages.New(ctx, p, aoption.WithJSONSet("frequency_penalty", 1))
	if ae := anthropicError(t, err, 400, "invalid_request_error"); !strings.Contains(ae.Message, "frequency_penalty") {
		t.Errorf("unknown member: %s", ae.Message)
	}
	// Streamed requests are refused the same way, before the stream starts.
	st := acme.Messages.NewStreaming(ctx, img)
	for st.Next() {
	}
	anthropicError(t, st.Err(), 400, "invalid_request_error")
}

// TestMessagesPing: a stream that waits sends Anthropic's ping events (here the
// client asks for keep-alives every 20ms, as a forwarding process does; the default
// is pingEvery) between the message's events.
func TestMessagesPing(t *testing.T) {
	eng := newFakeEngine()
	eng.Delay = 150 * time.Millisecond
	ts := startServer(t, testConfig, eng)
	resp, body := ts.post("/v1/messages", "", `{"model":"tiny","max_tokens":2,"stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		"x-api-key", ts.keys["acme"], ForwardedHeader, "test", KeepAliveHeader, "20ms")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if !strings.Contains(body, "event: ping\ndata: {\"type\":\"ping\"}\n\n") || !strings.HasPrefix(body, "event: message_start\n") ||
		!strings.HasSuffix(body, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n") || strings.Contains(body, ": keep-alive") {
		t.Fatalf("stream:\n%s", body)
	}
}

// anthropicWeatherTools are the tools of the chat tool tests (features_test.go) as an Anthropic
// client tool, and get_time with an empty schema.
func anthropicWeatherTools() []anthropic.ToolUnionParam {
	var schema struct {
		Properties map[string]any `json:"properties"`
		Required   []string       `json:"required"`
	}
	json.Unmarshal([]byte(weatherParams), &schema)
	return []anthropic.ToolUnionParam{
		{OfTool: &anthropic.ToolParam{Name: "get_weather", Description: anthropic.String("The weather in a city"),
			InputSchema: anthropic.ToolInputSchemaParam{Properties: schema.Properties, Required: schema.Required,
				ExtraFields: map[string]any{"additionalProperties": false}}}},
		{OfTool: &anthropic.ToolParam{Name: "get_time", Description: anthropic.String("The time now"), InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{}}}},
	}
}

// seed is the body's lmlite.seed (the Messages API has no seed).
func seed(n int) aoption.RequestOption {
	return aoption.WithJSONSet("lmlite", map[string]any{"seed": n})
}

// TestSDKMessagesToolRoundTrip: on the real engine, tool_choice tool makes a
// tool_use block (id toolu_…, name, input a JSON object that validates against the
// tool's input_schema; stop_reason tool_use), the same streamed (input_json_delta
// fragments add up to the same input); the client sends the assistant's message back
// with a tool_result, and the model answers in text (tool_choice none), streamed and
// not, its prompt longer by the result.
func TestSDKMessagesToolRoundTrip(t *testing.T) {
	es := startEngineServer(t)
	ctx := context.Background()
	c := anthropicClient(es.base, es.key)
	v := compileSchema(t, weatherParams)
	p := anthropic.MessageNewParams{
		Model: "tiny", MaxTokens: 120, Messages: userText("What is the weather in Paris?"), Tools: anthropicWeatherTools(),
		ToolChoice: anthropic.ToolChoiceUnionParam{OfTool: &anthropic.ToolChoiceToolParam{Name: "get_weather"}},
	}
	m, err := c.Messages.New(ctx, p, seed(5), aoption.WithJSONSet("temperature", 0.8))
	if err != nil {
		t.Fatal(err)
	}
	if m.StopReason != anthropic.StopReasonToolUse || len(m.Content) == 0 {
		t.Fatalf("message %+v", m)
	}
	use := m.Content[len(m.Content)-1]
	if use.Type != "tool_use" || use.Name != "get_weather" || !strings.HasPrefix(use.ID, "toolu_") {
		t.Fatalf("tool_use block %+v", use)
	}
	validate(t, v, string(use.Input))
	sm, types := streamMessage(t, c, p, seed(5), aoption.WithJSONSet("temperature", 0.8))
	suse := sm.Content[len(sm.Content)-1]
	if sm.StopReason != anthropic.StopReasonToolUse || suse.Type != "tool_use" || suse.Name != use.Name || string(suse.Input) != string(use.Input) {
		t.Fatalf("streamed %+v (%s), not streamed %+v (%s)", suse, suse.Input, use, use.Input)
	}
	if n := strings.Count(strings.Join(types, " "), "content_block_delta"); n < 2 {
		t.Fatalf("%d deltas: the input came in one piece (%v)", n, types)
	}

	msgs := append(p.Messages, m.ToParam(), anthropic.NewUserMessage(anthropic.NewToolResultBlock(use.ID, `{"temperature": 21, "sky": "clear"}`, false)))
	next := anthropic.MessageNewParams{Model: "tiny", MaxTokens: 12, Messages: msgs, Tools: anthropicWeatherTools(),
		ToolChoice: anthropic.ToolChoiceUnionParam{OfNone: &anthropic.ToolChoiceNoneParam{}}}
	for _, stream := range []bool{false, true} {
		var a anthropic.Message
		if stream {
			a, _ = streamMessage(t, c, next, seed(5))
		} else {
			r, err := c.Messages.New(ctx, next, seed(5))
			if err != nil {
				t.Fatal(err)
			}
			a = *r
		}
		if a.StopReason == anthropic.StopReasonToolUse || len(a.Content) != 1 || a.Content[0].Type != "text" || a.Content[0].Text == "" {
			t.Fatalf("answer after the tool result (stream %v): %+v", stream, a)
		}
		if in, before := a.Usage.InputTokens+a.Usage.CacheReadInputTokens, m.Usage.InputTokens+m.Usage.CacheReadInputTokens; in <= before {
			t.Fatalf("prompt %d tokens after the tool result, %d before", in, before)
		}
	}
}

// TestSDKMessagesDeterminism: on the real engine, the same conversation gives the
// same text through /v1/messages as through /v1/chat/completions, greedy and sampled
// with the same seed (lmlite.seed); count_tokens is the input_tokens of a prompt the
// prefix cache has not seen, and input_tokens + cache_read_input_tokens once it has;
// a stop sequence from the greedy text ends the output before it (stop_reason
// stop_sequence, naming it, as the engine reports it).
func TestSDKMessagesDeterminism(t *testing.T) {
	es := startEngineServer(t)
	ctx := context.Background()
	c := anthropicClient(es.base, es.key)
	const system, question = "You are terse.", "Tell me about the sea."
	p := anthropic.MessageNewParams{Model: "tiny", MaxTokens: 24, System: []anthropic.TextBlockParam{{Text: system}}, Messages: userText(question)}
	n, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: "tiny", Messages: p.Messages,
		System: anthropic.MessageCountTokensParamsSystemUnion{OfString: anthropic.String(system)}})
	if err != nil {
		t.Fatal(err)
	}
	chat := func(temp float64, seed int64) string {
		r, err := es.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "tiny", MaxTokens: openai.Int(24),
			Messages:    []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(system), openai.UserMessage(question)},
			Temperature: openai.Float(temp), Seed: openai.Int(seed)})
		if err != nil {
			t.Fatal(err)
		}
		return r.Choices[0].Message.Content
	}
	var first *anthropic.Message
	for _, tc := range []struct {
		temp float64
		seed int
	}{{0, 1}, {0.8, 7}, {0.8, 8}} {
		m, err := c.Messages.New(ctx, p, aoption.WithJSONSet("temperature", tc.temp), seed(tc.seed))
		if err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = m
		}
		want := chat(tc.temp, int64(tc.seed))
		if got := textOf(m); got != want || got == "" {
			t.Fatalf("temperature %v seed %d: messages %q, chat %q", tc.temp, tc.seed, got, want)
		}
		sm, _ := streamMessage(t, c, p, aoption.WithJSONSet("temperature", tc.temp), seed(tc.seed))
		if textOf(&sm) != textOf(m) {
			t.Fatalf("temperature %v seed %d: streamed %q, not %q", tc.temp, tc.seed, textOf(&sm), textOf(m))
		}
		if m.Usage.InputTokens+m.Usage.CacheReadInputTokens != n.InputTokens {
			t.Fatalf("count_tokens %d, usage %+v", n.InputTokens, m.Usage)
		}
	}
	if first.Usage.InputTokens != n.InputTokens || first.Usage.CacheReadInputTokens != 0 {
		t.Fatalf("the first request (nothing cached): count_tokens %d, usage %+v", n.InputTokens, first.Usage)
	}

	text := []rune(textOf(first))
	stop := string(text[len(text)/2 : len(text)/2+2])
	want := string(text)[:strings.Index(string(text), stop)]
	p.StopSequences = []string{stop}
	for _, stream := range []bool{false, true} {
		var m anthropic.Message
		if stream {
			m, _ = streamMessage(t, c, p, aoption.WithJSONSet("temperature", 0))
		} else {
			r, err := c.Messages.New(ctx, p, aoption.WithJSONSet("temperature", 0))
			if err != nil {
				t.Fatal(err)
			}
			m = *r
		}
		if textOf(&m) != want || m.StopReason != anthropic.StopReasonStopSequence || m.StopSequence != stop {
			t.Fatalf("stop %q (stream %v): %q %s %q, want %q", stop, stream, textOf(&m), m.StopReason, m.StopSequence, want)
		}
	}
}
