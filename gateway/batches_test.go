package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/shared"

	"github.com/lmlite/lmlite/batch"
	"github.com/lmlite/lmlite/configs"
	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/money"
	"github.com/lmlite/lmlite/tenancy"
)

const batchConfig = `
ledger: {sync: process}
models:
  - {id: tiny, path: tiny.gguf, max_model_len: 512, prompt_usd_per_1k: 0.001, completion_usd_per_1k: 0.002}
  - {id: big, path: big.gguf, max_model_len: 512, prompt_usd_per_1k: 0.01, completion_usd_per_1k: 0.03}
tiers:
  fast: [{model: tiny, quality: 0.2}]
  balanced: [{model: tiny, quality: 0.2}]
  deep: [{model: big, quality: 0.8}]
  max: [{model: big, quality: 0.8}]
plans:
  open: {}
  small: {allowed_models: [tiny], allowed_tiers: [fast, balanced]}
  half: {batch_discount: 0.5}
  solo: {max_concurrency: 1, requests_per_second: 5, burst: 1, tokens_per_minute: 600}
tenants:
  - {id: acme, plan: open}
  - {id: other, plan: open}
  - {id: small, plan: small}
  - {id: half, plan: half}
  - {id: solo, plan: solo}
  - {id: thin, plan: open, overrides: {daily_budget_usd: 0.0003}}
  - {id: fq, plan: open, overrides: {files_max_bytes: 3000, files_max_count: 3}}
  - {id: up, plan: open, overrides: {file_uploads_per_minute: 2}}
  - {id: bc, plan: open, overrides: {batch_creates_per_minute: 2}}
  - {id: un, plan: open, overrides: {batch_max_unfinished: 1, daily_budget_usd: 0.00000001}}
`

// startBatchServer is startServer with the Batch API on (its store in the data dir).
func startBatchServer(t *testing.T, eng *fakeEngine, opts ...func(*Options)) *testServer {
	t.Helper()
	cfg, err := configs.Parse([]byte(batchConfig))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = t.TempDir()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	store, err := tenancy.Open(filepath.Join(cfg.DataDir, "lmlite.db"), tenancy.Options{Sync: tenancy.SyncProcess})
	if err != nil {
		t.Fatal(err)
	}
	bs, err := batch.OpenStore(filepath.Join(cfg.DataDir, "batch"))
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Batches: bs, BatchConcurrency: 8}
	for _, f := range opts {
		f(&o)
	}
	srv, err := New(mustGatewayConfig(t, cfg), eng, tenancy.New(store), o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{t: t, srv: srv, eng: eng, store: store, url: "http://" + ln.Addr().String(),
		keys: map[string]string{}, done: make(chan error, 1)}
	go func() { ts.done <- srv.Serve(ln) }()
	for _, tn := range cfg.Tenants {
		k, _, err := store.CreateKey(tn.ID, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		ts.keys[tn.ID] = k
	}
	t.Cleanup(func() { ts.stop(); bs.Close() })
	return ts
}

func chatLine(id, model string, maxTokens int, extra string) string {
	return fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":%q,"max_tokens":%d,"messages":[{"role":"user","content":"hi %s"}]%s}}`,
		id, model, maxTokens, id, extra)
}

func upload(t *testing.T, c openai.Client, lines ...string) *openai.FileObject {
	t.Helper()
	f, err := c.Files.New(context.Background(), openai.FileNewParams{
		File: openai.File(strings.NewReader(strings.Join(lines, "\n")+"\n"), "in.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func newBatch(t *testing.T, c openai.Client, fileID string, meta map[string]string) *openai.Batch {
	t.Helper()
	b, err := c.Batches.New(context.Background(), openai.BatchNewParams{InputFileID: fileID,
		Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: openai.BatchNewParamsCompletionWindow24h,
		Metadata: shared.Metadata(meta)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func waitBatch(t *testing.T, c openai.Client, id string) *openai.Batch {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b, err := c.Batches.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		switch b.Status {
		case openai.BatchStatusCompleted, openai.BatchStatusFailed, openai.BatchStatusCancelled, openai.BatchStatusExpired:
			return b
		}
	}
	t.Fatalf("batch %s did not end", id)
	return nil
}

type outLine struct {
	ID       string `json:"id"`
	CustomID string `json:"custom_id"`
	Response *struct {
		StatusCode int             `json:"status_code"`
		RequestID  string          `json:"request_id"`
		Body       json.RawMessage `json:"body"`
	} `json:"response"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func content(t *testing.T, c openai.Client, id string) []outLine {
	t.Helper()
	if id == "" {
		return nil
	}
	resp, err := c.Files.Content(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []outLine
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var l outLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%v: %s", err, sc.Bytes())
		}
		out = append(out, l)
	}
	return out
}

func TestSDKBatchHappyPath(t *testing.T) {
	ts := startBatchServer(t, newFakeEngine())
	c := ts.client("acme")
	f := upload(t, c, chatLine("a", "tiny", 3, ""), chatLine("b", "tiny", 5, ""), chatLine("c", "auto", 2, ""))
	if f.Purpose != "batch" || f.Bytes == 0 || f.Object != "file" {
		t.Fatalf("file %+v", f)
	}
	if got, err := c.Files.Get(context.Background(), f.ID); err != nil || got.ID != f.ID {
		t.Fatalf("get file: %+v %v", got, err)
	}
	b := newBatch(t, c, f.ID, map[string]string{"note": "x"})
	if b.Status != openai.BatchStatusValidating && b.Status != openai.BatchStatusInProgress {
		t.Fatalf("new batch status %s", b.Status)
	}
	b = waitBatch(t, c, b.ID)
	if b.Status != openai.BatchStatusCompleted || b.RequestCounts.Total != 3 || b.RequestCounts.Completed != 3 ||
		b.RequestCounts.Failed != 0 || b.OutputFileID == "" || b.ErrorFileID != "" || b.CompletedAt == 0 ||
		b.InProgressAt == 0 || b.FinalizingAt == 0 || b.Metadata["note"] != "x" {
		t.Fatalf("batch %+v", b)
	}
	out := content(t, c, b.OutputFileID)
	want := map[string]string{"a": "w0 w1 w2 ", "b": "w0 w1 w2 w3 w4 ", "c": "w0 w1 "}
	if len(out) != 3 {
		t.Fatalf("%d output lines", len(out))
	}
	for _, l := range out {
		var cc openai.ChatCompletion
		if l.Response == nil || l.Response.StatusCode != 200 || l.Error != nil || json.Unmarshal(l.Response.Body, &cc) != nil {
			t.Fatalf("line %+v", l)
		}
		if cc.Choices[0].Message.Content != want[l.CustomID] || !strings.HasPrefix(l.Response.RequestID, b.ID) {
			t.Fatalf("line %s: %q (request id %s)", l.CustomID, cc.Choices[0].Message.Content, l.Response.RequestID)
		}
	}
	if p := ts.eng.lastRequest().Priority; p != engine.Batch {
		t.Fatalf("engine priority %v, want batch", p)
	}
	// The ledger holds the three lines, charged to acme under the batch's request ids.
	n := 0
	for _, e := range ts.ledger() {
		if strings.HasPrefix(e.RequestID, b.ID) && e.Tenant == "acme" && e.Status == 200 && e.Cost > 0 {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("%d ledger entries for the batch", n)
	}
	files, err := c.Files.List(context.Background(), openai.FileListParams{})
	if err != nil || len(files.Data) != 2 {
		t.Fatalf("files %v %v", files, err)
	}
	_, metrics := ts.get("/metrics", "")
	if !strings.Contains(metrics, `lmlite_batch_jobs{status="completed"} 1`) {
		t.Errorf("metrics lack the completed job")
	}
	if d, err := c.Files.Delete(context.Background(), f.ID); err != nil || !d.Deleted {
		t.Fatalf("delete %+v %v", d, err)
	}
	if _, err := c.Files.Get(context.Background(), f.ID); !isStatus(err, 404) {
		t.Fatalf("deleted file: %v", err)
	}
}

func isStatus(err error, code int) bool {
	var ae *openai.Error
	return errors.As(err, &ae) && ae.StatusCode == code
}

func TestSDKBatchValidationNamesLines(t *testing.T) {
	ts := startBatchServer(t, newFakeEngine())
	c := ts.client("small")
	f := upload(t, c,
		chatLine("a", "tiny", 3, ""),
		`{"custom_id": "b", broken`,
		chatLine("a", "tiny", 3, ""),
		chatLine("d", "big", 3, ""),
		`{"custom_id":"e","method":"POST","url":"/v1/completions","body":{"model":"tiny","prompt":"x"}}`,
		chatLine("f", "tiny", 3, `,"stream":true`),
	)
	b := waitBatch(t, c, newBatch(t, c, f.ID, nil).ID)
	if b.Status != openai.BatchStatusFailed || b.FailedAt == 0 || b.OutputFileID != "" {
		t.Fatalf("batch %+v", b)
	}
	var got []string
	for _, e := range b.Errors.Data {
		got = append(got, fmt.Sprintf("%d:%s", e.Line, e.Code))
	}
	want := "2:invalid_json_line 3:duplicate_custom_id 4:invalid_request 5:mismatched_endpoint 6:invalid_request"
	if strings.Join(got, " ") != want {
		t.Fatalf("errors %v\nwant   %s", got, want)
	}
	if ts.eng.started.Load() != 0 {
		t.Fatal("a failed batch ran lines")
	}
}

func TestSDKBatchCancel(t *testing.T) {
	eng := newFakeEngine()
	eng.Delay = 5 * time.Millisecond
	ts := startBatchServer(t, eng)
	c := ts.client("acme")
	var lines []string
	for i := range 60 {
		lines = append(lines, chatLine(fmt.Sprint(i), "tiny", 4, ""))
	}
	b := newBatch(t, c, upload(t, c, lines...).ID, nil)
	for eng.started.Load() < 8 {
		time.Sleep(time.Millisecond)
	}
	cb, err := c.Batches.Cancel(context.Background(), b.ID)
	if err != nil || (cb.Status != openai.BatchStatusCancelling && cb.Status != openai.BatchStatusCancelled) {
		t.Fatalf("cancel: %+v %v", cb, err)
	}
	b = waitBatch(t, c, b.ID)
	out, bad := content(t, c, b.OutputFileID), content(t, c, b.ErrorFileID)
	if b.Status != openai.BatchStatusCancelled || b.CancelledAt == 0 || b.CancellingAt == 0 || len(out)+len(bad) != 60 || len(bad) == 0 {
		t.Fatalf("batch %s: %d out, %d errors", b.Status, len(out), len(bad))
	}
	for _, l := range bad {
		if l.Error == nil || l.Error.Code != batch.CodeCancelled {
			t.Fatalf("error line %+v", l)
		}
	}
}

func TestSDKBatchListPages(t *testing.T) {
	ts := startBatchServer(t, newFakeEngine())
	c := ts.client("acme")
	f := upload(t, c, chatLine("a", "tiny", 1, ""))
	var ids []string
	for range 5 {
		ids = append(ids, newBatch(t, c, f.ID, nil).ID)
	}
	newBatch(t, ts.client("other"), upload(t, ts.client("other"), chatLine("a", "tiny", 1, "")).ID, nil)
	page, err := c.Batches.List(context.Background(), openai.BatchListParams{Limit: openai.Int(2)})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 10 {
		for _, b := range page.Data {
			got = append(got, b.ID)
		}
		if !page.HasMore {
			break
		}
		if len(page.Data) != 2 {
			t.Fatalf("page of %d with more", len(page.Data))
		}
		if page, err = c.Batches.List(context.Background(), openai.BatchListParams{Limit: openai.Int(2), After: openai.String(got[len(got)-1])}); err != nil {
			t.Fatal(err)
		}
	}
	// Newest first, every one of acme's once, none of other's.
	want := []string{ids[4], ids[3], ids[2], ids[1], ids[0]}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("listed %v\nwant   %v", got, want)
	}
}

func TestSDKBatchTenantIsolation(t *testing.T) {
	ts := startBatchServer(t, newFakeEngine())
	acme, other := ts.client("acme"), ts.client("other")
	f := upload(t, acme, chatLine("a", "tiny", 1, ""))
	b := waitBatch(t, acme, newBatch(t, acme, f.ID, nil).ID)
	ctx := context.Background()
	_, err1 := other.Files.Get(ctx, f.ID)
	_, err2 := other.Files.Content(ctx, b.OutputFileID)
	_, err3 := other.Batches.Get(ctx, b.ID)
	_, err4 := other.Batches.Cancel(ctx, b.ID)
	_, err5 := other.Files.Delete(ctx, f.ID)
	_, err6 := other.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID,
		Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
	for i, err := range []error{err1, err2, err3, err4, err5, err6} {
		if !isStatus(err, 404) {
			t.Errorf("call %d by another tenant: %v, want 404", i+1, err)
		}
	}
	if l, err := other.Files.List(ctx, openai.FileListParams{}); err != nil || len(l.Data) != 0 {
		t.Errorf("other lists %v %v", l, err)
	}
	if _, err := acme.Files.Get(ctx, f.ID); err != nil {
		t.Errorf("the owner: %v", err)
	}
}

// The cap: 200 lines whose worst cases total about 4× the cap, half of them stopping
// early (costing less than their worst case), 8 at once. Spend ≤ cap, every line in
// exactly one file, the rest max_cost_reached; the ledger agrees with the job.
func TestSDKBatchCapHoldsSpend(t *testing.T) {
	ts := startBatchServer(t, newFakeEngine())
	c := ts.client("acme")
	var lines []string
	for i := range 200 {
		extra := ""
		if i%2 == 0 {
			extra = `,"stop":["w2"]`
		}
		lines = append(lines, chatLine(fmt.Sprintf("r%03d", i), "tiny", 40, extra))
	}
	// A line's worst case: its prompt tokens and 40 completion tokens at tiny's prices.
	prompt := len("<|im_start|>user\nhi r000<|im_end|>\n<|im_start|>assistant\n") + 1
	worst := money.Price{PromptPer1K: money.USD(0.001), CompletionPer1K: money.USD(0.002)}.Cost(prompt, 40)
	cap := worst * 200 / 4
	b := newBatch(t, c, upload(t, c, lines...).ID, map[string]string{"max_cost_usd": fmt.Sprint(cap.Dollars())})
	b = waitBatch(t, c, b.ID)
	if b.Status != openai.BatchStatusCancelled || len(b.Errors.Data) != 1 || b.Errors.Data[0].Code != batch.CodeMaxCost {
		t.Fatalf("batch %+v", b)
	}
	out, bad := content(t, c, b.OutputFileID), content(t, c, b.ErrorFileID)
	seen := map[string]bool{}
	for _, l := range append(out, bad...) {
		if seen[l.CustomID] {
			t.Fatalf("custom_id %s twice", l.CustomID)
		}
		seen[l.CustomID] = true
	}
	if len(out)+len(bad) != 200 || len(out) <= 50 {
		t.Fatalf("%d out + %d errors", len(out), len(bad))
	}
	for _, l := range bad {
		if l.Error == nil || l.Error.Code != batch.CodeMaxCost {
			t.Fatalf("error line %+v", l)
		}
	}
	var spent money.Money
	for _, e := range ts.ledger() {
		if strings.HasPrefix(e.RequestID, b.ID) {
			spent += e.Cost
		}
	}
	job, err := ts.srv.batches.m.Store().Job("acme", b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if spent > cap || job.Spent != spent {
		t.Fatalf("ledger spent %s, job spent %s, cap %s", spent, job.Spent, cap)
	}
	t.Logf("%d lines ran, spent %s of a %s cap", len(out), spent, cap)
}

func TestBatchDiscountHalvesCost(t *testing.T) {
	ts := startBatchServer(t, newFakeEngine())
	for _, tenant := range []string{"acme", "half"} {
		c := ts.client(tenant)
		b := waitBatch(t, c, newBatch(t, c, upload(t, c, chatLine("a", "tiny", 10, "")).ID, nil).ID)
		if b.Status != openai.BatchStatusCompleted {
			t.Fatalf("%s: %s", tenant, b.Status)
		}
	}
	cost := map[string]money.Money{}
	for _, e := range ts.ledger() {
		cost[e.Tenant] += e.Cost
	}
	if cost["acme"] == 0 || cost["half"] != money.Money(float64(cost["acme"])*0.5) {
		t.Fatalf("costs %v", cost)
	}
}

// The tenant's daily budget runs out mid-batch: the batch stays in_progress with a
// paused reason, runs nothing more that day, and finishes after midnight (UTC) within
// its window.
func TestSDKBatchPausesOnTenantBudget(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 5, 1, 23, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	ts := startBatchServer(t, newFakeEngine(), func(o *Options) { o.Now = clock })
	c := ts.client("thin")
	var lines []string
	for i := range 10 {
		lines = append(lines, chatLine(fmt.Sprint(i), "tiny", 1, ""))
	}
	// A line costs $0.000057 (55 prompt tokens at $0.001/1K, 1 output token at
	// $0.002/1K): the budget of $0.0003 holds five of them a day.
	b := newBatch(t, c, upload(t, c, lines...).ID, nil)
	var paused *openai.Batch
	for deadline := time.Now().Add(10 * time.Second); paused == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the batch never paused after the five lines the day's budget holds")
		}
		got, err := c.Batches.Get(context.Background(), b.ID)
		if err != nil {
			t.Fatal(err)
		}
		if reason := got.JSON.ExtraFields["lmlite"].Raw(); strings.Contains(reason, "paused_reason") && got.RequestCounts.Completed == 5 {
			paused = got // (a line that ran may commit just after the pause is recorded)
		}
	}
	if paused.Status != openai.BatchStatusInProgress {
		t.Fatalf("paused batch %s, %d completed", paused.Status, paused.RequestCounts.Completed)
	}
	time.Sleep(100 * time.Millisecond)
	if got, _ := c.Batches.Get(context.Background(), b.ID); got.RequestCounts.Completed != paused.RequestCounts.Completed {
		t.Fatalf("a paused batch ran lines: %d, then %d", paused.RequestCounts.Completed, got.RequestCounts.Completed)
	}
	mu.Lock()
	now = now.Add(2 * time.Hour) // the next UTC day: a fresh daily budget
	mu.Unlock()
	done := waitBatch(t, c, b.ID)
	if done.Status != openai.BatchStatusCompleted || done.RequestCounts.Completed != 10 {
		t.Fatalf("batch %s, %d completed", done.Status, done.RequestCounts.Completed)
	}
	if strings.Contains(done.JSON.ExtraFields["lmlite"].Raw(), "paused_reason") {
		t.Fatal("a finished batch still says it is paused")
	}
	t.Logf("paused after %d lines", paused.RequestCounts.Completed)
}

// A line no model the plan allows can serve (over every model's length limit) fails
// validation with its line number rather than reserving nothing against the cap.
func TestSDKBatchLineNoModelFitsFailsValidation(t *testing.T) {
	ts := startBatchServer(t, newFakeEngine())
	c := ts.client("acme")
	f := upload(t, c, chatLine("ok", "auto", 3, ""), chatLine("long", "auto", 100000, ""))
	b := waitBatch(t, c, newBatch(t, c, f.ID, map[string]string{"max_cost_usd": "1"}).ID)
	if b.Status != openai.BatchStatusFailed || len(b.Errors.Data) != 1 || b.Errors.Data[0].Line != 2 {
		t.Fatalf("batch %s, errors %+v", b.Status, b.Errors.Data)
	}
}

// Batch lines have their own lane: they take none of the tenant's interactive
// concurrency slots, requests/s tokens or tokens/min. A tenant allowed one request at
// a time, 5 a second and 600 tokens a minute runs a 16-line job 8 lines at once (about
// 1,000 tokens), and its interactive requests, sent while the lines run, are all
// admitted; the budget still applies to both (the ledger has every line).
func TestBatchLinesDoNotTakeInteractiveQuota(t *testing.T) {
	eng := newFakeEngine()
	eng.Delay = 5 * time.Millisecond
	ts := startBatchServer(t, eng)
	c := ts.client("solo")
	var lines []string
	for i := range 16 {
		lines = append(lines, chatLine(fmt.Sprintf("r%02d", i), "tiny", 40, ""))
	}
	b := newBatch(t, c, upload(t, c, lines...).ID, nil)
	for deadline := time.Now().Add(10 * time.Second); eng.started.Load() < 4; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the batch's lines did not start")
		}
	}
	for i := range 3 {
		if ts.srv.ten.InFlight("solo") != 0 {
			t.Fatalf("batch lines hold %d interactive slots", ts.srv.ten.InFlight("solo"))
		}
		resp, body := ts.post("/v1/chat/completions", ts.keys["solo"], `{"model":"tiny","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`)
		if resp.StatusCode != 200 {
			t.Fatalf("interactive request %d beside the batch: %d %s", i, resp.StatusCode, body)
		}
		time.Sleep(250 * time.Millisecond) // within 5/s
	}
	b = waitBatch(t, c, b.ID)
	if b.Status != openai.BatchStatusCompleted || b.RequestCounts.Completed != 16 {
		t.Fatalf("batch %s %+v", b.Status, b.RequestCounts)
	}
	n := 0
	for _, e := range ts.ledger() {
		if strings.HasPrefix(e.RequestID, b.ID) && e.Status == 200 {
			n++
		}
	}
	if n != 16 {
		t.Fatalf("the ledger has %d of the 16 lines", n)
	}
}
