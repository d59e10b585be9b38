package gateway

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/openai/openai-go"

	"github.com/lmlite/lmlite/engine"
)

// The whole path with the real embedded engine: a generated tiny model served by the
// Block behind the gateway, driven by the official OpenAI SDK.
func TestSDKWithEmbeddedEngine(t *testing.T) {
	es := startEngine(t, `
ledger: {sync: process}
models:
  - {id: tiny, path: $TINY, max_model_len: 256, prompt_usd_per_1k: 0.001, completion_usd_per_1k: 0.002}
tiers:
  fast: [{model: tiny, quality: 0.5}]
plans:
  open: {}
tenants:
  - {id: acme, plan: open}
`, engine.Config{})
	client := es.client
	ctx := context.Background()

	// Greedy chat, twice: the same answer, full length; the second time the prompt's
	// whole KV blocks come from the prefix cache, and the usage says how many.
	var first string
	for i := range 2 {
		resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:       "tiny",
			Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me a story about a dragon, a knight and a very long road to the sea")},
			MaxTokens:   openai.Int(16),
			Temperature: openai.Float(0),
		})
		if err != nil {
			t.Fatal(err)
		}
		if cached := resp.Usage.PromptTokensDetails.CachedTokens; (i == 0) != (cached == 0) || cached%16 != 0 || cached >= resp.Usage.PromptTokens {
			t.Fatalf("request %d: %d of %d prompt tokens cached", i, cached, resp.Usage.PromptTokens)
		}
		c := resp.Choices[0]
		if c.FinishReason != "length" || resp.Usage.CompletionTokens != 16 || c.Message.Content == "" {
			t.Fatalf("chat: finish %q, usage %+v, content %q", c.FinishReason, resp.Usage, c.Message.Content)
		}
		if i == 0 {
			first = c.Message.Content
		} else if c.Message.Content != first {
			t.Fatalf("greedy answers differ: %q vs %q", first, c.Message.Content)
		}
	}
	// The same request streamed gives the same text, chunk by chunk.
	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:       "tiny",
		Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me a story about a dragon, a knight and a very long road to the sea")},
		MaxTokens:   openai.Int(16),
		Temperature: openai.Float(0),
	})
	var sb strings.Builder
	chunks := 0
	for stream.Next() {
		for _, ch := range stream.Current().Choices {
			sb.WriteString(ch.Delta.Content)
			if ch.Delta.Content != "" {
				chunks++
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if sb.String() != first || chunks < 2 {
		t.Fatalf("streamed %q in %d chunks, want %q", sb.String(), chunks, first)
	}
	// max_tokens over the model's limit is refused naming the field.
	_, err := client.Completions.New(ctx, openai.CompletionNewParams{
		Model:     "tiny",
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("hi")},
		MaxTokens: openai.Int(1000),
	})
	var apiErr *openai.Error
	if err == nil || !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Message+apiErr.Param, "max_tokens") {
		t.Fatalf("max_tokens over the limit: %v", err)
	}
}
