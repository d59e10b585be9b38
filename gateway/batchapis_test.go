package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go"
	"github.com/openai/openai-go/responses"

	"github.com/lmlite/lmlite/batch"
	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/money"
	"github.com/lmlite/lmlite/respstore"
	"github.com/lmlite/lmlite/tenancy"
)

// startBatchAPIsServer serves the generated tiny llama (priced, so that lines cost)
// with the Batch API on and stored responses in bbolt, to two tenants.
func startBatchAPIsServer(t *testing.T) *engineServer {
	t.Helper()
	rb, err := respstore.OpenBolt(filepath.Join(t.TempDir(), "responses.db"), respstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rb.Close() })
	bs, err := batch.OpenStore(filepath.Join(t.TempDir(), "batch"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bs.Close() })
	return startEngineWith(t, `
ledger: {sync: process}
models:
  - {id: tiny, path: $TINY, max_model_len: 2048, max_concurrency: 16, prompt_usd_per_1k: 0.001, completion_usd_per_1k: 0.002}
tiers:
  fast: [{model: tiny, quality: 0.5}]
plans:
  open: {requests_per_second: 1000, burst: 1000, max_concurrency: 100}
tenants:
  - {id: acme, plan: open}
  - {id: other, plan: open}
`, engine.Config{}, Options{Responses: rb, Batches: bs, BatchConcurrency: 2}, nil)
}

// runBatch uploads lines, runs a batch on endpoint (with metadata meta) to its end,
// and returns it with its output and error lines.
func runBatch(t *testing.T, c openai.Client, endpoint string, meta map[string]string, lines ...string) (*openai.Batch, []outLine, []outLine) {
	t.Helper()
	f := upload(t, c, lines...)
	b, err := c.Batches.New(context.Background(), openai.BatchNewParams{InputFileID: f.ID,
		Endpoint: openai.BatchNewParamsEndpoint(endpoint), CompletionWindow: openai.BatchNewParamsCompletionWindow24h, Metadata: meta})
	if err != nil {
		t.Fatal(err)
	}
	b = waitBatch(t, c, b.ID)
	return b, content(t, c, b.OutputFileID), content(t, c, b.ErrorFileID)
}

// lineEntries is the ledger's entries of a batch's lines, by the line's index.
func lineEntries(es *engineServer, batchID string) map[string]tenancy.Entry {
	out := map[string]tenancy.Entry{}
	es.store.Ledger(func(e tenancy.Entry) error {
		if i, ok := strings.CutPrefix(e.RequestID, batchID+"-"); ok {
			out[i] = e
		}
		return nil
	})
	return out
}

// TestBatchResponsesLines: a batch on /v1/responses runs Responses lines through the
// core; each output line's body is a Responses object (the SDK's type), the same
// output as the same request made interactively (greedy), its usage the line's
// ledger entry. A line's response is stored (store defaults to true, as OpenAI's):
// its tenant reads it back, another tenant gets 404; a line with "store": false
// stores none. A line the Responses API refuses fails validation, naming its line.
func TestBatchResponsesLines(t *testing.T) {
	es := startBatchAPIsServer(t)
	ctx := context.Background()
	c := es.client
	line := func(id, extra string) string {
		return fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/v1/responses","body":{"model":"tiny","input":"Once upon a time","instructions":"Continue.","max_output_tokens":12,"temperature":0%s}}`, id, extra)
	}
	b, out, bad := runBatch(t, c, "/v1/responses", nil, line("kept", ""), line("unstored", `,"store":false`))
	if b.Status != openai.BatchStatusCompleted || b.RequestCounts.Completed != 2 || len(out) != 2 || len(bad) != 0 {
		t.Fatalf("batch %+v: %d out, %d errors", b, len(out), len(bad))
	}
	want, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "tiny", Input: textInput("Once upon a time"),
		Instructions: openai.String("Continue."), MaxOutputTokens: openai.Int(12), Temperature: openai.Float(0), Store: openai.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	entries := lineEntries(es, b.ID)
	index := map[string]string{"kept": "0", "unstored": "1"} // the lines' indexes in the file
	got := map[string]responses.Response{}
	for _, l := range out {
		var r responses.Response
		if l.Response == nil || l.Response.StatusCode != 200 || json.Unmarshal(l.Response.Body, &r) != nil {
			t.Fatalf("line %+v", l)
		}
		if r.Object != "response" || r.Status != want.Status || !strings.HasPrefix(r.ID, "resp_") || r.Model != "tiny" ||
			r.OutputText() == "" || r.OutputText() != want.OutputText() {
			t.Errorf("line %s: %s\nwant the output %q (%s)", l.CustomID, l.Response.Body, want.OutputText(), want.Status)
		}
		if r.Usage.InputTokens != want.Usage.InputTokens || r.Usage.OutputTokens != want.Usage.OutputTokens {
			t.Errorf("line %s: usage %+v, interactive %+v", l.CustomID, r.Usage, want.Usage)
		}
		e := entries[index[l.CustomID]]
		if e.Status != 200 || int64(e.PromptTokens) != r.Usage.InputTokens || int64(e.CompletionTokens) != r.Usage.OutputTokens || e.Cost <= 0 {
			t.Errorf("line %s: ledger %+v, usage %+v", l.CustomID, e, r.Usage)
		}
		got[l.CustomID] = r
	}
	// Stored as store says; another tenant's 404.
	kept, err := c.Responses.Get(ctx, got["kept"].ID, responses.ResponseGetParams{})
	if err != nil || kept.OutputText() != got["kept"].OutputText() {
		t.Errorf("the stored line's response: %v %+v", err, kept)
	}
	other := es.sdk("other")
	if _, err := other.Responses.Get(ctx, got["kept"].ID, responses.ResponseGetParams{}); !isStatus(err, 404) {
		t.Errorf("another tenant reads a line's stored response: %v", err)
	}
	if _, err := c.Responses.Get(ctx, got["unstored"].ID, responses.ResponseGetParams{}); !isStatus(err, 404) {
		t.Errorf("a store:false line's response was stored: %v", err)
	}
	// A built-in tool the Responses API does not serve: the batch fails validation at line 2.
	b, _, _ = runBatch(t, c, "/v1/responses", nil, line("ok", ""), line("web", `,"tools":[{"type":"web_search"}]`))
	if b.Status != openai.BatchStatusFailed || len(b.Errors.Data) != 1 || b.Errors.Data[0].Line != 2 {
		t.Errorf("a batch with a web_search line: %+v", b)
	}
}

// TestBatchMessagesLines: a batch on /v1/messages runs Anthropic Messages lines
// through the core; each output line's body is an Anthropic Message (the SDK's
// type), the same as the same request made with the Anthropic SDK (greedy), its usage
// the line's ledger entry; a line Messages refuses fails validation. The
// batch's spend cap holds for Messages lines as for chat lines: the lines past it
// are not run, and what ran is at most the cap.
func TestBatchMessagesLines(t *testing.T) {
	es := startBatchAPIsServer(t)
	ctx := context.Background()
	c := es.client
	line := func(id string, maxTokens int, extra string) string {
		return fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/v1/messages","body":{"model":"tiny","max_tokens":%d,"temperature":0,"system":"Continue.","messages":[{"role":"user","content":"Once upon a time"}]%s}}`, id, maxTokens, extra)
	}
	b, out, bad := runBatch(t, c, "/v1/messages", nil, line("a", 10, ""), line("b", 10, `,"metadata":{"user_id":"u"}`))
	if b.Status != openai.BatchStatusCompleted || len(out) != 2 || len(bad) != 0 {
		t.Fatalf("batch %+v: %d out, %d errors", b, len(out), len(bad))
	}
	ac := anthropicClient(es.base, es.key)
	want, err := ac.Messages.New(ctx, anthropic.MessageNewParams{Model: "tiny", MaxTokens: 10,
		System: []anthropic.TextBlockParam{{Text: "Continue."}}, Messages: userText("Once upon a time")}, aoption.WithJSONSet("temperature", 0))
	if err != nil {
		t.Fatal(err)
	}
	// Anthropic's input_tokens leaves out the tokens read from the cache.
	prompt := func(m *anthropic.Message) int64 { return m.Usage.InputTokens + m.Usage.CacheReadInputTokens }
	entries := lineEntries(es, b.ID)
	index := map[string]string{"a": "0", "b": "1"} // the lines' indexes in the file
	for _, l := range out {
		var m anthropic.Message
		if l.Response == nil || l.Response.StatusCode != 200 || json.Unmarshal(l.Response.Body, &m) != nil {
			t.Fatalf("line %+v", l)
		}
		if m.Type != "message" || m.Role != "assistant" || !strings.HasPrefix(m.ID, "msg_") || textOf(&m) == "" || textOf(&m) != textOf(want) ||
			m.StopReason != want.StopReason || prompt(&m) != prompt(want) || m.Usage.OutputTokens != want.Usage.OutputTokens {
			t.Errorf("line %s: %s\nwant %s", l.CustomID, l.Response.Body, want.RawJSON())
		}
		e := entries[index[l.CustomID]]
		if e.Status != 200 || int64(e.PromptTokens) != prompt(&m) || int64(e.CompletionTokens) != m.Usage.OutputTokens ||
			int64(e.CachedTokens) != m.Usage.CacheReadInputTokens || e.Cost <= 0 {
			t.Errorf("line %s's ledger entry %+v, usage %s", l.CustomID, e, l.Response.Body)
		}
	}
	if len(entries) != 2 {
		t.Errorf("%d ledger entries for 2 lines", len(entries))
	}
	// An image block: the batch fails validation at line 1, the message naming the block.
	b, _, _ = runBatch(t, c, "/v1/messages", nil, `{"custom_id":"img","method":"POST","url":"/v1/messages","body":{"model":"tiny","max_tokens":10,`+
		`"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]}]}}`)
	if b.Status != openai.BatchStatusFailed || len(b.Errors.Data) != 1 || b.Errors.Data[0].Line != 1 || !strings.Contains(b.Errors.Data[0].Message, "image") {
		t.Errorf("a batch with an image line: %+v", b)
	}

	// The spend cap: room for 10 lines' worst cases of 100.
	worst := money.Price{PromptPer1K: money.USD(0.001), CompletionPer1K: money.USD(0.002)}.Cost(int(prompt(want)), 40)
	var lines []string
	for i := range 100 {
		lines = append(lines, line(fmt.Sprintf("r%02d", i), 40, ""))
	}
	limit := worst * 10
	b, out, bad = runBatch(t, c, "/v1/messages", map[string]string{"max_cost_usd": fmt.Sprint(limit.Dollars())}, lines...)
	if b.Status != openai.BatchStatusCancelled || len(b.Errors.Data) != 1 || b.Errors.Data[0].Code != batch.CodeMaxCost {
		t.Fatalf("capped batch %+v", b)
	}
	if len(out)+len(bad) != 100 || len(out) < 10 || len(out) == 100 {
		t.Fatalf("capped batch: %d out + %d errors", len(out), len(bad))
	}
	var spent money.Money
	for _, e := range lineEntries(es, b.ID) {
		spent += e.Cost
	}
	if spent > limit || spent == 0 {
		t.Fatalf("spent %s of a %s cap", spent, limit)
	}
	t.Logf("%d of 100 Messages lines ran, spent %s of a %s cap", len(out), spent, limit)
}

// TestRunLineRefusalsComeFromTheCore: a batch line the core refuses for now is told
// the batch's runner as a refusal (it runs again later), read from the core's error,
// whatever status the line's wire format answers it with: the engine's queue full is
// a 503 for chat lines and Anthropic's 529 for Messages lines, both a load refusal
// for a second (Retry-After); a tenant's budget (429 insufficient_quota) waits for
// the next day. Neither is an output line. An error that is the line's own (a 400)
// is its output line, in its format's shape.
func TestRunLineRefusalsComeFromTheCore(t *testing.T) {
	eng := newFakeEngine()
	eng.Refuse = map[string]error{"big": engine.ErrQueueFull}
	ts := startBatchServer(t, eng)
	chat := `{"model":"big","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	msgs := `{"model":"big","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	run := func(tenant, endpoint, body string) batch.Response {
		return ts.srv.RunLine(context.Background(), batch.Request{Tenant: tenant, Endpoint: endpoint, RequestID: "batch_test-0", Body: []byte(body)})
	}
	before := time.Now()
	for _, c := range []struct{ endpoint, body string }{{"/v1/chat/completions", chat}, {"/v1/messages", msgs}} {
		r := run("acme", c.endpoint, c.body)
		if r.Refused != batch.RefusedLoad || r.Until.Before(before.Add(time.Second)) || r.Until.After(time.Now().Add(2*time.Second)) || r.Body != nil {
			t.Errorf("%s on an overloaded model: %+v (%s)", c.endpoint, r, r.Body)
		}
	}
	// thin's budget is less than big's worst case: the tenant's budget, until tomorrow.
	for _, endpoint := range []string{"/v1/chat/completions", "/v1/messages"} {
		r := run("thin", endpoint, strings.Replace(chat, `"max_tokens":5`, `"max_tokens":400`, 1))
		y, m, d := time.Now().UTC().Date()
		if r.Refused != batch.RefusedBudget || !r.Until.Equal(time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC)) {
			t.Errorf("%s over the budget: %+v (%s)", endpoint, r, r.Body)
		}
	}
	// The line's own error: its output, in its format's shape.
	r := run("acme", "/v1/messages", strings.Replace(msgs, `"max_tokens":5`, `"max_tokens":100000`, 1))
	var e struct {
		Type  string `json:"type"`
		Error struct {
			Type string `json:"type"`
		} `json:"error"`
	}
	if r.Refused != batch.Ran || r.StatusCode != 400 || json.Unmarshal(r.Body, &e) != nil || e.Type != "error" || e.Error.Type != "invalid_request_error" {
		t.Errorf("a Messages line over the model's limit: %+v (%s)", r, r.Body)
	}
}
