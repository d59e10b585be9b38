package gateway

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"

	"github.com/lmlite/lmlite/configs"
	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/tenancy"
)

// The whole path with the real embedded engine: a generated tiny model served by the
// Block behind the gateway, driven by the official OpenAI SDK.
func TestSDKWithEmbeddedEngine(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tiny.gguf")
	if err := genmodel.Generate(genmodel.Options{Arch: "llama", Preset: "tiny", Type: "q8_0", Seed: 3}, path); err != nil {
		t.Fatal(err)
	}
	cfg, err := configs.Parse([]byte(`
ledger: {sync: process}
models:
  - {id: tiny, path: ` + path + `, max_model_len: 256, prompt_usd_per_1k: 0.001, completion_usd_per_1k: 0.002}
tiers:
  fast: [{model: tiny, quality: 0.5}]
plans:
  open: {}
tenants:
  - {id: acme, plan: open}
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = dir
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var mcs []engine.ModelConfig
	for i := range cfg.Models {
		mcs = append(mcs, cfg.Models[i].EngineConfig())
	}
	block, err := engine.New(engine.Config{Models: mcs})
	if err != nil {
		t.Fatal(err)
	}
	defer block.Close()
	if err := block.Load(context.Background(), "tiny"); err != nil {
		t.Fatal(err)
	}
	store, err := tenancy.Open(filepath.Join(dir, "lmlite.db"), tenancy.Options{Sync: tenancy.SyncProcess})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	key, _, err := store.CreateKey("acme", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(mustGatewayConfig(t, cfg), block, tenancy.New(store), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Shutdown(context.Background())
	client := openai.NewClient(option.WithBaseURL("http://"+ln.Addr().String()+"/v1"), option.WithAPIKey(key), option.WithMaxRetries(0))
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
	_, err = client.Completions.New(ctx, openai.CompletionNewParams{
		Model:     "tiny",
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("hi")},
		MaxTokens: openai.Int(1000),
	})
	var apiErr *openai.Error
	if err == nil || !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Message+apiErr.Param, "max_tokens") {
		t.Fatalf("max_tokens over the limit: %v", err)
	}
}
