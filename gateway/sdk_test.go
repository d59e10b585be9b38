package gateway

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"
	"github.com/openai/openai-go/shared"
)

func TestSDKChat(t *testing.T) {
	ts := startServer(t, testConfig, newFakeEngine())
	c := ts.client("acme")
	var raw *http.Response
	resp, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:            "tiny",
		Messages:         []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage("hello")},
		MaxTokens:        openai.Int(5),
		Temperature:      openai.Float(0.5),
		TopP:             openai.Float(0.9),
		Seed:             openai.Int(42),
		PresencePenalty:  openai.Float(0.1),
		FrequencyPenalty: openai.Float(0.2),
	}, option.WithResponseInto(&raw), option.WithHeader("X-Request-Id", "my-req-1"))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Choices[0].Message.Content; got != "w0 w1 w2 w3 w4 " {
		t.Errorf("content %q", got)
	}
	if resp.Choices[0].FinishReason != "length" || resp.Model != "tiny" || resp.Object != "chat.completion" {
		t.Errorf("response %+v", resp)
	}
	// The prompt went through the chat template (ChatML here) and the tokenizer.
	wantPrompt := "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
	if resp.Usage.PromptTokens != int64(len(wantPrompt)+1) || resp.Usage.CompletionTokens != 5 || resp.Usage.TotalTokens != resp.Usage.PromptTokens+5 {
		t.Errorf("usage %+v", resp.Usage)
	}
	if raw.Header.Get("X-Request-Id") != "my-req-1" || raw.Header.Get("X-LMLite-Model") != "tiny" || raw.Header.Get("X-LMLite-Tier") != "fast" {
		t.Errorf("headers %v", raw.Header)
	}
	// Sampling parameters reach the engine.
	r := ts.eng.lastRequest()
	if r.Sampling.Temperature != 0.5 || r.Sampling.TopP != 0.9 || r.Sampling.Seed != 42 ||
		r.Sampling.PresencePenalty != 0.1 || r.Sampling.FrequencyPenalty != 0.2 || r.MaxTokens != 5 ||
		r.Tenant != "acme" || r.CacheSalt != "acme" {
		t.Errorf("engine request %+v", r)
	}
	// The ledger has it, under the client's request id.
	led := ts.ledger()
	if len(led) != 1 || led[0].ClientRequestID != "my-req-1" || led[0].Tenant != "acme" || led[0].CompletionTokens != 5 ||
		led[0].Status != 200 || led[0].Cost <= 0 || led[0].Model != "tiny" {
		t.Errorf("ledger %+v", led)
	}
}

func TestSDKChatStop(t *testing.T) {
	ts := startServer(t, testConfig, newFakeEngine())
	c := ts.client("acme")
	resp, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:               "tiny",
		Messages:            []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		MaxCompletionTokens: openai.Int(10),
		Stop:                openai.ChatCompletionNewParamsStopUnion{OfStringArray: []string{"w3", "zzz"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Choices[0].Message.Content; got != "w0 w1 w2 " || resp.Choices[0].FinishReason != "stop" {
		t.Errorf("content %q finish %q", got, resp.Choices[0].FinishReason)
	}
	if r := ts.eng.lastRequest(); len(r.Stop) != 2 || r.MaxTokens != 10 {
		t.Errorf("engine request %+v", r)
	}
}

func TestSDKChatStream(t *testing.T) {
	ts := startServer(t, testConfig, newFakeEngine())
	c := ts.client("acme")
	for _, usage := range []bool{false, true} {
		params := openai.ChatCompletionNewParams{
			Model:     "big",
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("count")},
			MaxTokens: openai.Int(7),
		}
		if usage {
			params.StreamOptions.IncludeUsage = openai.Bool(true)
		}
		stream := c.Chat.Completions.NewStreaming(context.Background(), params)
		var acc openai.ChatCompletionAccumulator
		chunks := 0
		for stream.Next() {
			ch := stream.Current()
			acc.AddChunk(ch)
			if len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
				chunks++
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if chunks != 7 {
			t.Errorf("%d content chunks, want one per token (7)", chunks)
		}
		if got := acc.Choices[0].Message.Content; got != "w0 w1 w2 w3 w4 w5 w6 " {
			t.Errorf("content %q", got)
		}
		if acc.Choices[0].FinishReason != "length" {
			t.Errorf("finish %q", acc.Choices[0].FinishReason)
		}
		if usage && acc.Usage.CompletionTokens != 7 {
			t.Errorf("usage %+v", acc.Usage)
		}
		if !usage && acc.Usage.CompletionTokens != 0 {
			t.Errorf("usage sent without include_usage: %+v", acc.Usage)
		}
	}
	if led := ts.ledger(); len(led) != 2 || led[1].CompletionTokens != 7 || led[1].Status != 200 {
		t.Errorf("ledger %+v", led)
	}
}

func TestSDKCompletions(t *testing.T) {
	ts := startServer(t, testConfig, newFakeEngine())
	c := ts.client("acme")
	resp, err := c.Completions.New(context.Background(), openai.CompletionNewParams{
		Model:     "tiny",
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		MaxTokens: openai.Int(3),
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].Text != "w0 w1 w2 " || resp.Choices[0].FinishReason != "length" || resp.Usage.PromptTokens != 17 {
		t.Errorf("completion %+v", resp)
	}
	// No max_tokens: OpenAI's default of 16.
	resp, err = c.Completions.New(context.Background(), openai.CompletionNewParams{
		Model:  "tiny",
		Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: []string{"x"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Usage.CompletionTokens != 16 {
		t.Errorf("default max_tokens: %+v", resp.Usage)
	}
	stream := c.Completions.NewStreaming(context.Background(), openai.CompletionNewParams{
		Model:         "tiny",
		Prompt:        openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once")},
		MaxTokens:     openai.Int(4),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var text strings.Builder
	finish := ""
	var usage int64
	for stream.Next() {
		ch := stream.Current()
		if len(ch.Choices) > 0 {
			text.WriteString(ch.Choices[0].Text)
			if ch.Choices[0].FinishReason != "" {
				finish = string(ch.Choices[0].FinishReason)
			}
		}
		if ch.Usage.CompletionTokens > 0 {
			usage = ch.Usage.CompletionTokens
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if text.String() != "w0 w1 w2 w3 " || finish != "length" || usage != 4 {
		t.Errorf("stream: %q %q %d", text.String(), finish, usage)
	}
}

func TestSDKModels(t *testing.T) {
	ts := startServer(t, testConfig, newFakeEngine())
	c := ts.client("acme")
	page, err := c.Models.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 2 || page.Data[0].ID != "tiny" || page.Data[1].ID != "big" {
		t.Errorf("models %+v", page.Data)
	}
	m, err := c.Models.Get(context.Background(), "big")
	if err != nil || m.ID != "big" || m.OwnedBy != "lmlite" {
		t.Errorf("Get(big) = %+v, %v", m, err)
	}
	c = ts.client("small")
	page, err = c.Models.List(context.Background())
	if err != nil || len(page.Data) != 1 {
		t.Errorf("small's models %+v %v", page, err)
	}
	_, err = c.Models.Get(context.Background(), "big")
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 404 || ae.Code != "model_not_found" {
		t.Errorf("Get(big) for small = %v", err)
	}
}

// TestSDKErrors: every error the SDK sees has OpenAI's shape, status, code and param.
func TestSDKErrors(t *testing.T) {
	ts := startServer(t, testConfig, newFakeEngine())
	user := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}
	cases := []struct {
		name   string
		tenant string
		params openai.ChatCompletionNewParams
		opts   []option.RequestOption
		status int
		code   string
		param  string
	}{
		{"unknown model", "acme", openai.ChatCompletionNewParams{Model: "gpt-9", Messages: user}, nil, 404, "model_not_found", "model"},
		{"max_tokens over the limit", "acme", openai.ChatCompletionNewParams{Model: "tiny", Messages: user, MaxTokens: openai.Int(100000)}, nil, 400, "", "max_tokens"},
		{"max_completion_tokens over the room", "acme", openai.ChatCompletionNewParams{Model: "tiny", Messages: user, MaxCompletionTokens: openai.Int(500)}, nil, 400, "", "max_completion_tokens"},
		{"n > 1", "acme", openai.ChatCompletionNewParams{Model: "tiny", Messages: user, N: openai.Int(2)}, nil, 400, "", "n"},
		{"tools", "acme", openai.ChatCompletionNewParams{Model: "tiny", Messages: user, Tools: []openai.ChatCompletionToolParam{{Function: shared.FunctionDefinitionParam{Name: "f"}}}}, nil, 400, "", "tools"},
		{"temperature", "acme", openai.ChatCompletionNewParams{Model: "tiny", Messages: user, Temperature: openai.Float(3)}, nil, 400, "", "temperature"},
		{"logprobs", "acme", openai.ChatCompletionNewParams{Model: "tiny", Messages: user, Logprobs: openai.Bool(true)}, nil, 400, "", "logprobs"},
		{"no messages", "acme", openai.ChatCompletionNewParams{Model: "tiny"}, nil, 400, "", "messages"},
		{"bad key", "nobody", openai.ChatCompletionNewParams{Model: "tiny", Messages: user}, []option.RequestOption{option.WithAPIKey("lml_aaaaaaaa_" + strings.Repeat("b", 32))}, 401, "invalid_api_key", ""},
		{"forbidden model (hidden as OpenAI does)", "small", openai.ChatCompletionNewParams{Model: "big", Messages: user}, nil, 404, "model_not_found", "model"},
		{"forbidden tier", "small", openai.ChatCompletionNewParams{Model: "tier:max", Messages: user}, nil, 403, "tier_not_allowed", "lmlite.tier"},
		{"budget", "broke", openai.ChatCompletionNewParams{Model: "tiny", Messages: user, MaxTokens: openai.Int(10)}, nil, 429, "insufficient_quota", ""},
		{"budget, routed", "broke", openai.ChatCompletionNewParams{Model: "auto", Messages: user, MaxTokens: openai.Int(10)}, nil, 429, "insufficient_quota", ""},
		{"bad tier", "acme", openai.ChatCompletionNewParams{Model: "tier:huge", Messages: user}, nil, 400, "model_not_found", "model"},
		{"fixed without tier", "acme", openai.ChatCompletionNewParams{Model: "auto", Messages: user}, []option.RequestOption{option.WithHeader("X-LMLite-Tier-Mode", "fixed")}, 400, "", "lmlite.tier"},
		{"fixed tier too slow", "acme", openai.ChatCompletionNewParams{Model: "auto", Messages: user}, []option.RequestOption{option.WithJSONSet("lmlite", map[string]any{"tier_mode": "fixed", "tier": "deep", "max_cost_usd": 0.0000001})}, 400, "tier_unavailable", "lmlite.max_cost_usd"},
		{"unknown parameter", "acme", openai.ChatCompletionNewParams{Model: "tiny", Messages: user}, []option.RequestOption{option.WithJSONSet("frobnicate", 1)}, 400, "", "frobnicate"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl := ts.client(c.tenant, c.opts...)
			_, err := cl.Chat.Completions.New(context.Background(), c.params)
			var ae *openai.Error
			if !errors.As(err, &ae) {
				t.Fatalf("err = %v, want an API error", err)
			}
			if ae.StatusCode != c.status || ae.Code != c.code || ae.Param != c.param || ae.Message == "" || ae.Type == "" {
				t.Errorf("got %d code=%q param=%q type=%q: %s; want %d code=%q param=%q", ae.StatusCode, ae.Code, ae.Param, ae.Type, ae.Message, c.status, c.code, c.param)
			}
			if ae.Response.Header.Get("X-Request-Id") == "" {
				t.Error("no X-Request-Id on an error")
			}
		})
	}
}

func TestSDKRateLimit(t *testing.T) {
	ts := startServer(t, testConfig, newFakeEngine())
	c := ts.client("slow")
	params := openai.ChatCompletionNewParams{Model: "tiny", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, MaxTokens: openai.Int(1)}
	if _, err := c.Chat.Completions.New(context.Background(), params); err != nil {
		t.Fatal(err)
	}
	_, err := c.Chat.Completions.New(context.Background(), params)
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 429 || ae.Code != "rate_limit_exceeded" || ae.Response.Header.Get("Retry-After") != "1" {
		t.Fatalf("second request: %v", err)
	}
}

// TestStreamIsIncremental: tokens reach the client as they are generated, not at the
// end (each is flushed): with a token every 30ms, the first arrives long before the
// last.
func TestStreamIsIncremental(t *testing.T) {
	eng := newFakeEngine()
	eng.Delay = 30 * time.Millisecond
	ts := startServer(t, testConfig, eng)
	c := ts.client("acme")
	stream := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model: "tiny", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}, MaxTokens: openai.Int(10),
	})
	var first, last time.Time
	n := 0
	for stream.Next() {
		if ch := stream.Current(); len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
			if first.IsZero() {
				first = time.Now()
			}
			last = time.Now()
			n++
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if n != 10 || last.Sub(first) < 200*time.Millisecond {
		t.Errorf("%d tokens over %v: not streamed as generated", n, last.Sub(first))
	}
}
