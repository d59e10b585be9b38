package gateway

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/tenancy"
)

// startCapabilityServer serves, for "auto" (balanced: balanced, then fast), in the
// balanced tier the stories model (512 tokens, a template without tools) and a
// generated one with ChatML (no tools; 2,048 tokens), ranked in that order, and in
// the fast tier a generated model with Qwen's template (tools; 2,048 tokens), the
// one that embeds.
func startCapabilityServer(t *testing.T) *engineServer {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "engine", "testdata", "families", "qwen.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path, plain := filepath.Join(dir, "toolsm.gguf"), filepath.Join(dir, "plain.gguf")
	if err := genmodel.Generate(genmodel.Options{Arch: "llama", Preset: "tiny", Type: "q8_0", Seed: 5, ChatTemplate: string(src)}, path); err != nil {
		t.Fatal(err)
	}
	if err := genmodel.Generate(genmodel.Options{Arch: "llama", Preset: "tiny", Type: "q8_0", Seed: 6}, plain); err != nil {
		t.Fatal(err)
	}
	return startEngine(t, `
ledger: {sync: process}
models:
  - {id: story, path: $STORIES, max_model_len: 512}
  - {id: toolsm, path: `+path+`, max_model_len: 2048, embeddings: true}
  - {id: plain, path: `+plain+`, max_model_len: 2048}
tiers:
  balanced: [{model: story, quality: 0.9}, {model: plain, quality: 0.6}]
  fast: [{model: toolsm, quality: 0.5}]
plans:
  open: {default_tier_mode: balanced, requests_per_second: 1000, burst: 1000, max_concurrency: 100}
tenants:
  - {id: acme, plan: open}
`, engine.Config{})
}

// servedBy is the model that served a chat request (X-LMLite-Model).
func servedBy(t *testing.T, c openai.Client, p openai.ChatCompletionNewParams) string {
	t.Helper()
	var raw *http.Response
	if _, err := c.Chat.Completions.New(context.Background(), p, option.WithResponseInto(&raw)); err != nil {
		t.Fatal(err)
	}
	return raw.Header.Get("X-LMLite-Model")
}

// TestAutoRoutesByWhatTheRequestNeeds: on "auto", a request with tools goes to the
// model whose template renders tools, though models without it rank higher (one of
// them fits the prompt); a request without tools takes the highest-ranked model; a
// prompt over that model's context goes to the next that it fits; a model named
// explicitly still takes tools through the fallback prompt.
func TestAutoRoutesByWhatTheRequestNeeds(t *testing.T) {
	es := startCapabilityServer(t)
	c := es.client
	tools := openai.ChatCompletionNewParams{Model: "auto", Messages: user("What is the weather in Paris?"),
		Tools: weatherTools(), MaxTokens: openai.Int(40), Seed: openai.Int(1)}
	if got := servedBy(t, c, tools); got != "toolsm" {
		t.Errorf("auto with tools served by %q, want toolsm (the template with tools)", got)
	}
	plain := openai.ChatCompletionNewParams{Model: "auto", Messages: user("Once upon a time"), MaxTokens: openai.Int(8)}
	if got := servedBy(t, c, plain); got != "story" {
		t.Errorf("auto without tools served by %q, want story", got)
	}
	long := plain
	long.Messages = user(strings.Repeat("the little dog ran to the park and ", 60))
	if got := servedBy(t, c, long); got != "plain" {
		t.Errorf("auto with a prompt over story's 512 tokens served by %q, want plain", got)
	}
	tools.Model = "plain"
	if got := servedBy(t, c, tools); got != "plain" {
		t.Errorf("plain named with tools served by %q", got)
	}
	none := tools
	none.Model = "auto"
	none.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("none")}
	if got := servedBy(t, c, none); got == "toolsm" {
		t.Errorf("auto with tool_choice none served by %q, want a balanced model", got)
	}
}

// TestAutoEmbeddingsTakesAModelThatEmbeds: /v1/embeddings with model "auto" is served
// by a model that embeds, skipping those that only generate; with none it is a 400
// naming model.
func TestAutoEmbeddingsTakesAModelThatEmbeds(t *testing.T) {
	es := startCapabilityServer(t)
	resp, err := es.client.Embeddings.New(context.Background(), openai.EmbeddingNewParams{Model: "auto",
		Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("the sea")}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Model != "toolsm" || len(resp.Data) != 1 {
		t.Errorf("auto embeddings from %q: %+v", resp.Model, resp)
	}
	// An embeddings request's user is kept hashed too.
	if _, err := es.client.Embeddings.New(context.Background(), openai.EmbeddingNewParams{Model: "toolsm",
		Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("x")}, User: openai.String("bob")}); err != nil {
		t.Fatal(err)
	}
	var users []string
	es.store.Ledger(func(e tenancy.Entry) error { users = append(users, e.User); return nil })
	if len(users) != 2 || users[0] != "" || len(users[1]) != 32 {
		t.Errorf("ledger users %q", users)
	}
	ts := startServer(t, testConfig, newFakeEngine())
	r, body := ts.post("/v1/embeddings", ts.keys["acme"], `{"model":"auto","input":"x"}`)
	if e := parseErr(t, body); r.StatusCode != 400 || e.Error.Param == nil || *e.Error.Param != "model" {
		t.Errorf("auto embeddings with no model that embeds: %d %s", r.StatusCode, body)
	}
}
