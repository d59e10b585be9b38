package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/responses"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/internal/redistest"
	"github.com/lmlite/lmlite/respstore"
	"github.com/lmlite/lmlite/tenancy"
)

// respQuotaConfig: two tenants on a plan that keeps 2 stored responses each.
const respQuotaConfig = `
ledger: {sync: process}
models:
  - {id: tiny, path: $TINY, max_model_len: 512, prompt_usd_per_1k: 0.001, completion_usd_per_1k: 0.002}
tiers:
  fast: [{model: tiny, quality: 0.5}]
plans:
  two: {responses_max_count: 2}
tenants:
  - {id: capped, plan: two}
  - {id: acme, plan: two}
`

// respStores are the durable stores `lmlite serve` keeps responses in: bbolt, and
// Redis (on a redis-server of the test's own).
var respStores = []struct {
	name string
	open func(t *testing.T) respstore.Store
}{
	{"bolt", func(t *testing.T) respstore.Store {
		rb, err := respstore.OpenBolt(filepath.Join(t.TempDir(), "responses.db"), respstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rb.Close() })
		return rb
	}},
	{"bolt-ledger", func(t *testing.T) respstore.Store { // as lmlite serve keeps them: carried by the ledger's writes
		rb, err := respstore.OpenBoltLedger(filepath.Join(t.TempDir(), "responses.db"), respstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rb.Close() })
		return rb
	}},
	{"redis", func(t *testing.T) respstore.Store {
		rs := redistest.Start(t, redistest.Options{})
		rc, err := rediscli.New(rediscli.Options{URL: rs.URL(0), Name: "respquota"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rc.Close() })
		return respstore.NewRedis(rc, "rq:", respstore.Options{})
	}},
}

// storedSays is the store member of a Response object's JSON.
func storedSays(t *testing.T, raw string) bool {
	t.Helper()
	var r struct{ Store *bool }
	if err := json.Unmarshal([]byte(raw), &r); err != nil || r.Store == nil {
		t.Fatalf("no store in %s (%v)", raw, err)
	}
	return *r.Store
}

// ledger is the store's ledger, oldest first.
func (es *engineServer) ledger() []tenancy.Entry {
	var out []tenancy.Entry
	es.store.Ledger(func(e tenancy.Entry) error { out = append(out, e); return nil })
	return out
}

// TestResponsesAtStoredLimitRefusedBeforeWork: a tenant whose stored responses are at
// its plan's responses_max_count gets, for a request with store: true (streamed or
// not), a 400 response_quota_exceeded naming the limit, in the Responses error shape,
// before any engine work (nothing rendered or tokenized) and charged nothing; its
// store: false requests are served, another tenant on the same plan is unaffected,
// and deleting a response, or one expiring, makes room again. (Before admitStore,
// the third response was generated and stored past the limit.)
func TestResponsesAtStoredLimitRefusedBeforeWork(t *testing.T) {
	for _, backend := range respStores {
		t.Run(backend.name, func(t *testing.T) {
			st := backend.open(t)
			var skew atomic.Int64 // the gateway's clock, ahead of the wall's
			var ce *countingEngine
			es := startEngineWith(t, respQuotaConfig, engine.Config{},
				Options{Responses: st, Now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }},
				func(b *engine.Block) Engine { ce = &countingEngine{Block: b}; return ce })
			ctx := context.Background()
			capped := es.sdk("capped")
			p := responses.ResponseNewParams{Model: "tiny", Input: textInput("Once upon a time"), MaxOutputTokens: openai.Int(2)}
			var kept []string
			for range 2 {
				r, err := capped.Responses.New(ctx, p)
				if err != nil || !storedSays(t, r.RawJSON()) {
					t.Fatalf("within the limit: %v", err)
				}
				kept = append(kept, r.ID)
			}

			// At the limit: store: true (the default) is refused, streamed or not.
			calls, entries := ce.calls.Load(), len(es.ledger())
			_, err := capped.Responses.New(ctx, p)
			var ae *openai.Error
			if !errors.As(err, &ae) || ae.StatusCode != 400 || ae.Code != "response_quota_exceeded" || ae.Param != "store" ||
				ae.Type != "invalid_request_error" || !strings.Contains(ae.Message, "responses_max_count (2 stored responses)") {
				t.Fatalf("at the limit: %v, want a 400 response_quota_exceeded naming responses_max_count", err)
			}
			resp, body := postKey(t, es.url+"/responses", es.keys["capped"], `{"model":"tiny","input":"hi","stream":true,"store":true}`)
			if _, code, param := errorOf(t, body); resp.StatusCode != 400 || code != "response_quota_exceeded" || param != "store" ||
				!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
				t.Fatalf("streamed at the limit: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
			}
			if n := ce.calls.Load() - calls; n != 0 {
				t.Fatalf("the engine rendered or tokenized %d prompts for refused requests", n)
			}
			led := es.ledger()
			if len(led) != entries+2 {
				t.Fatalf("%d ledger entries for the 2 refused requests", len(led)-entries)
			}
			for _, e := range led[entries:] {
				if e.Tenant != "capped" || e.Status != 400 || e.Cost != 0 || e.PromptTokens != 0 || e.CompletionTokens != 0 {
					t.Errorf("a refused request's ledger entry: %+v, want status 400 and nothing charged", e)
				}
			}
			if u, _ := st.Usage(ctx, "capped"); u.Count != 2 {
				t.Fatalf("capped's usage %+v", u)
			}

			// store: false is served (and not stored); another tenant stores.
			p.Store = openai.Bool(false)
			if r, err := capped.Responses.New(ctx, p); err != nil || storedSays(t, r.RawJSON()) {
				t.Fatalf("store false at the limit: %v", err)
			}
			p.Store = openai.Bool(true)
			acme := es.sdk("acme")
			r, err := acme.Responses.New(ctx, p)
			if err != nil || !storedSays(t, r.RawJSON()) {
				t.Fatalf("another tenant: %v", err)
			}
			if _, err := acme.Responses.Get(ctx, r.ID, responses.ResponseGetParams{}); err != nil {
				t.Fatalf("another tenant's stored response: %v", err)
			}

			// Room again: a response deleted, then the others expired (30 days on;
			// the store has not swept them, so the admission sweeps the tenant's).
			if err := capped.Responses.Delete(ctx, kept[0]); err != nil {
				t.Fatal(err)
			}
			if r, err := capped.Responses.New(ctx, p); err != nil || !storedSays(t, r.RawJSON()) {
				t.Fatalf("after a delete: %v", err)
			}
			if _, err := capped.Responses.New(ctx, p); !errors.As(err, &ae) || ae.StatusCode != 400 {
				t.Fatalf("at the limit again: %v", err)
			}
			skew.Store(int64(31 * 24 * time.Hour))
			if r, err := capped.Responses.New(ctx, p); err != nil || !storedSays(t, r.RawJSON()) {
				t.Fatalf("after the stored responses expired: %v", err)
			}
			if u, _ := st.Usage(ctx, "capped"); u.Count != 1 {
				t.Errorf("usage after the expired were swept and one stored: %+v", u)
			}
		})
	}
}

// TestResponsesConcurrentAtLimitNeverPassIt: requests with store: true sent together
// by a tenant one response short of its limit are admitted (there is room when each
// arrives; one admitted after the first was stored is a 400) and answered, but
// exactly one is stored: the others' Puts are refused by the store, and their
// answers say "store": false (a GET of theirs is a 404), streamed or not. (Before the Put was PutWithin the plan's limits, all were
// stored.)
func TestResponsesConcurrentAtLimitNeverPassIt(t *testing.T) {
	for _, backend := range respStores {
		t.Run(backend.name, func(t *testing.T) {
			st := backend.open(t)
			eng := newFakeEngine()
			eng.Delay = 20 * time.Millisecond // each answer takes ~100 ms: every request is admitted before the first is stored
			ts := startServerWith(t, testConfig+"  - {id: three, plan: open, overrides: {responses_max_count: 3}}\n", eng, Options{Responses: st}, nil)
			ctx := context.Background()
			c := ts.client("three")
			for range 2 {
				if _, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "tiny", Input: textInput("x"), MaxOutputTokens: openai.Int(1)}); err != nil {
					t.Fatal(err)
				}
			}
			const n = 8
			type answer struct {
				id    string
				store bool
			}
			var mu sync.Mutex
			var answers []answer
			refused := 0
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					body := `{"model":"tiny","input":"hi","max_output_tokens":5}`
					if i%2 == 1 {
						body = `{"model":"tiny","input":"hi","max_output_tokens":5,"stream":true}`
					}
					resp, out := ts.post("/v1/responses", ts.keys["three"], body)
					if resp.StatusCode == 400 && strings.Contains(out, "response_quota_exceeded") {
						mu.Lock()
						refused++ // admitted after the last room was taken (a machine too slow for the Delay)
						mu.Unlock()
						return
					}
					if resp.StatusCode != 200 {
						t.Errorf("%d %s", resp.StatusCode, out)
						return
					}
					var r struct {
						ID    string `json:"id"`
						Store bool   `json:"store"`
					}
					if i%2 == 1 { // the response that response.incomplete carries (max_output_tokens reached)
						k := strings.Index(out, "event: response.incomplete")
						if k < 0 {
							t.Errorf("no response.incomplete: %s", out)
							return
						}
						data := out[k:]
						data = data[strings.Index(data, "data: ")+len("data: "):]
						data = data[:strings.Index(data, "\n")]
						var ev struct{ Response json.RawMessage }
						if err := json.Unmarshal([]byte(data), &ev); err != nil {
							t.Error(err)
							return
						}
						out = string(ev.Response)
					}
					if err := json.Unmarshal([]byte(out), &r); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					answers = append(answers, answer{r.ID, r.Store})
					mu.Unlock()
				}()
			}
			wg.Wait()
			stored := 0
			for _, a := range answers {
				_, err := c.Responses.Get(ctx, a.id, responses.ResponseGetParams{})
				if (err == nil) != a.store {
					t.Errorf("%s answered store %v, its GET: %v", a.id, a.store, err)
				}
				if a.store {
					stored++
				}
			}
			if u, _ := st.Usage(ctx, "three"); u.Count != 3 || stored != 1 || len(answers)+refused != n {
				t.Fatalf("usage %+v, %d of %d answers stored (%d refused); want 3 responses, 1 of %d stored", u, stored, len(answers), refused, n)
			}
			t.Logf("%d answered (1 stored, %d not: store false), %d refused at admission", len(answers), len(answers)-1, refused)
		})
	}
}

// TestMemResponsesLimits: the in-memory store (no durable one configured) keeps the
// plan's limits as respstore does: Full at the count or the bytes, a Put past one
// refused (a replacement that does not grow is not), and a delete or a response
// dropped past its max frees its bytes.
func TestMemResponsesLimits(t *testing.T) {
	ctx := context.Background()
	m := newMemResponses(3)
	resp := func(id, text string) *storedResponse {
		return &storedResponse{ID: id, Tenant: "a", Body: []byte(`{"id":"` + id + `"}`),
			Input: []respItem{{Type: "message", ID: "m_" + id, Role: "user", Text: text}}}
	}
	one := sizeOf(resp("r1", "x"))
	lim := respstore.Limits{MaxCount: 2, MaxBytes: 3 * one}
	for _, id := range []string{"r1", "r2"} {
		if err := m.Put(ctx, resp(id, "x"), lim); err != nil {
			t.Fatal(err)
		}
	}
	var le *respstore.LimitError
	if full, _ := m.Full(ctx, "a", lim); full == nil || full.Limit != "responses_max_count" {
		t.Fatalf("two of two: Full %v", full)
	}
	if err := m.Put(ctx, resp("r3", "x"), lim); !errors.As(err, &le) || le.Limit != "responses_max_count" {
		t.Fatalf("a third: %v", err)
	}
	if err := m.Put(ctx, resp("r2", "y"), lim); err != nil { // replaced, same size
		t.Fatalf("a replacement: %v", err)
	}
	if err := m.Put(ctx, resp("r2", strings.Repeat("y", int(2*one))), lim); !errors.As(err, &le) || le.Limit != "responses_max_bytes" {
		t.Fatalf("a replacement past the bytes: %v", err)
	}
	if full, _ := m.Full(ctx, "b", lim); full != nil {
		t.Fatalf("another tenant: Full %v", full)
	}
	if err := m.Delete(ctx, "a", "r1"); err != nil {
		t.Fatal(err)
	}
	if u := m.usage("a"); u.Count != 1 || u.Bytes != one {
		t.Fatalf("after a delete: %+v, want 1 of %d bytes", u, one)
	}
	for _, id := range []string{"r4", "r5", "r6", "r7"} { // no limits: the oldest dropped past max (3)
		if err := m.Put(ctx, resp(id, "x"), respstore.Limits{}); err != nil {
			t.Fatal(err)
		}
	}
	if u := m.usage("a"); u.Count != 3 || u.Bytes != 3*one {
		t.Fatalf("past max: %+v, want 3 of %d bytes", u, 3*one)
	}
}
