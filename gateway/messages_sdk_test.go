package gateway

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go"
)

// anthropicClient is the official Anthropic Go SDK pointed at a server (base, with
// no /v1: the SDK adds it) with key, retries off so that errors are seen as they are.
func anthropicClient(base, key string, opts ...aoption.RequestOption) anthropic.Client {
	o := append([]aoption.RequestOption{aoption.WithBaseURL(base), aoption.WithAPIKey(key), aoption.WithMaxRetries(0)}, opts...)
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
