package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/tenancy"
	"github.com/openai/openai-go"
)

// TestGrammarBudgetIsAClientError: a generation ended by its grammar budget (the
// client's schema is too expensive to enforce) is answered 400 invalid_request_error
// grammar_budget_exceeded, the OpenAI shape (or that error event at the end of a
// stream), and settled with that status; not a 500 server error.
func TestGrammarBudgetIsAClientError(t *testing.T) {
	err := fmt.Errorf("%w: one token's mask takes more than 1048576 steps", engine.ErrGrammarBudget)
	e := generationError(err)
	if e.status != 400 || e.typ != "invalid_request_error" || e.code != "grammar_budget_exceeded" {
		t.Errorf("answer: %d %s %s, want 400 invalid_request_error grammar_budget_exceeded", e.status, e.typ, e.code)
	}
	if got := string(appendErrorJSON(nil, e)); got == "" || e.message == "" {
		t.Errorf("empty error body %q", got)
	}
	if s := statusOf(engine.Usage{}, err); s != 400 {
		t.Errorf("settled status %d, want 400", s)
	}
}

// TestGrammarBudgetThroughTheGateway: a model whose grammar budget (grammar_mask_steps
// 50) no schema's first mask fits answers a json_schema request 400
// grammar_budget_exceeded before any token, as the official SDK sees it; streamed,
// the stream ends with that error; the ledger records the grammar time spent.
func TestGrammarBudgetThroughTheGateway(t *testing.T) {
	es := startEngine(t, `
ledger: {sync: process}
models:
  - {id: tiny, path: $TINY, max_model_len: 2048, max_concurrency: 4, grammar_mask_steps: 50, prompt_usd_per_1k: 0.001, completion_usd_per_1k: 0.002}
tiers:
  fast: [{model: tiny, quality: 0.5}]
plans:
  open: {requests_per_second: 1000, burst: 1000, max_concurrency: 100}
tenants:
  - {id: acme, plan: open}
`, engine.Config{})
	_, err := es.client.Chat.Completions.New(context.Background(), schemaParams(1))
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 400 || ae.Code != "grammar_budget_exceeded" || ae.Type != "invalid_request_error" {
		t.Fatalf("not streamed: %v, want 400 grammar_budget_exceeded", err)
	}
	stream := es.client.Chat.Completions.NewStreaming(context.Background(), schemaParams(1))
	for stream.Next() {
		if c := stream.Current(); len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
			t.Errorf("streamed a token: %q", c.Choices[0].Delta.Content)
		}
	}
	// The SDK hands an error event back as text: "received error while streaming: "
	// and the event's error object, whose code is the kind.
	var event struct {
		Code string `json:"code"`
		Type string `json:"type"`
	}
	if err := stream.Err(); err == nil {
		t.Error("streamed without an error, want the grammar budget's error event")
	} else if _, obj, ok := strings.Cut(err.Error(), "streaming: "); !ok || json.Unmarshal([]byte(obj), &event) != nil ||
		event.Code != "grammar_budget_exceeded" || event.Type != "invalid_request_error" {
		t.Errorf("streamed: %v, want the error event of code grammar_budget_exceeded", err)
	}
	var led []tenancy.Entry
	es.store.Ledger(func(e tenancy.Entry) error { led = append(led, e); return nil })
	if len(led) != 2 {
		t.Fatalf("%d ledger entries, want 2", len(led))
	}
	for _, e := range led {
		if e.Status != 400 || e.GrammarTime <= 0 {
			t.Errorf("ledger entry: status %d, grammar time %v; want 400 and the time spent", e.Status, e.GrammarTime)
		}
	}
}
