package gateway

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/tenancy"
)

// countingEngine is the real Block with the gateway's tokenizing counted: every call
// that renders or tokenizes a prompt, the tokens they returned, and the limits the
// capped calls were given. The Block's other abilities (Features, ModelLoader, ...)
// come through the embedding.
type countingEngine struct {
	*engine.Block
	calls  atomic.Int64 // tokenizing calls, capped or not
	full   atomic.Int64 // of them, uncapped
	tokens atomic.Int64 // tokens returned
	over   atomic.Int64 // capped calls that stopped: ErrPromptOverLimit

	mu     sync.Mutex
	limits []int // of the capped calls
}

func (c *countingEngine) count(toks []int32, err error, capped bool, limit int) ([]int32, error) {
	c.calls.Add(1)
	c.tokens.Add(int64(len(toks)))
	if errors.Is(err, engine.ErrPromptOverLimit) {
		c.over.Add(1)
	}
	if capped {
		c.mu.Lock()
		c.limits = append(c.limits, limit)
		c.mu.Unlock()
	} else {
		c.full.Add(1)
	}
	return toks, err
}

func (c *countingEngine) Tokenize(m, text string) ([]int32, error) {
	toks, err := c.Block.Tokenize(m, text)
	return c.count(toks, err, false, 0)
}

func (c *countingEngine) ChatTokens(m string, msgs []engine.Message) ([]int32, error) {
	toks, err := c.Block.ChatTokens(m, msgs)
	return c.count(toks, err, false, 0)
}

func (c *countingEngine) ChatTokensTools(m string, msgs []engine.Message, tools []engine.Tool) ([]int32, error) {
	toks, err := c.Block.ChatTokensTools(m, msgs, tools)
	return c.count(toks, err, false, 0)
}

func (c *countingEngine) TokenizeCapped(m, text string, limit int) ([]int32, error) {
	toks, err := c.Block.TokenizeCapped(m, text, limit)
	return c.count(toks, err, true, limit)
}

func (c *countingEngine) ChatTokensCapped(m string, msgs []engine.Message, tools []engine.Tool, limit int) ([]int32, error) {
	toks, err := c.Block.ChatTokensCapped(m, msgs, tools, limit)
	return c.count(toks, err, true, limit)
}

// admissionConfig: a tenant limited to 2 requests/s (burst 2) and 2 in flight, one
// whose budget cannot pay one output token, and an open one; bodies up to 4 MiB,
// so a megabyte prompt reaches the handler.
const admissionConfig = `
max_body_bytes: 4194304
ledger: {sync: process}
models:
  - {id: tiny, path: $TINY, max_model_len: 512, prompt_usd_per_1k: 0.001, completion_usd_per_1k: 0.002}
tiers:
  fast: [{model: tiny, quality: 0.5}]
plans:
  open: {}
  tight: {requests_per_second: 2, burst: 2, max_concurrency: 2}
tenants:
  - {id: acme, plan: open}
  - {id: tight, plan: tight}
  - {id: broke, plan: open, overrides: {daily_budget_usd: 0.000001}}
`

func startCounting(t testing.TB) (*engineServer, *countingEngine) {
	t.Helper()
	var ce *countingEngine
	es := startEngineWith(t, admissionConfig, engine.Config{}, Options{}, func(b *engine.Block) Engine {
		ce = &countingEngine{Block: b}
		return ce
	})
	return es, ce
}

// megabyteBodies are a chat and a completion whose prompt is a megabyte of words.
func megabyteBodies(model string) map[string]string {
	text := strings.Repeat("the cat sat on the mat ", 1<<20/23)
	chat, _ := json.Marshal(map[string]any{"model": model, "max_tokens": 4,
		"messages": []map[string]string{{"role": "user", "content": text}}})
	comp, _ := json.Marshal(map[string]any{"model": model, "max_tokens": 4, "prompt": text})
	return map[string]string{"/v1/chat/completions": string(chat), "/v1/completions": string(comp)}
}

// errorOf reads an OpenAI error body.
func errorOf(t *testing.T, body string) (typ, code, param string) {
	t.Helper()
	var e struct {
		Error struct {
			Type  string  `json:"type"`
			Code  *string `json:"code"`
			Param *string `json:"param"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("not an OpenAI error: %q", body)
	}
	if e.Error.Code != nil {
		code = *e.Error.Code
	}
	if e.Error.Param != nil {
		param = *e.Error.Param
	}
	return e.Error.Type, code, param
}

// TestRateLimitedPromptIsNotTokenized: a tenant over its requests/s or its
// concurrency gets its 429 before its prompt is rendered or tokenized; a megabyte
// prompt costs the tokenizer nothing. (Before admission came first, each of these
// requests was tokenized to route it, then refused.)
func TestRateLimitedPromptIsNotTokenized(t *testing.T) {
	es, ce := startCounting(t)
	pol, _ := es.srv.book.Resolve("tight")
	bodies := megabyteBodies("tiny")
	bodies["/v1/chat/completions?small"] = `{"model":"tiny","max_tokens":1,"messages":[{"role":"user","content":"a prompt within the limit"}]}`

	// Concurrency: the tenant's two slots are held (two admitted requests).
	now := time.Now()
	for range 2 {
		tk, err := es.srv.ten.Admit(es.srv.quota(pol), now, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer tk.Settle(tenancy.Entry{Time: now, Status: 200})
	}
	for path, body := range bodies {
		resp, out := postKey(t, es.base+path, es.keys["tight"], body)
		if _, code, _ := errorOf(t, out); resp.StatusCode != 429 || code != "rate_limit_exceeded" || !strings.Contains(out, "concurrency") {
			t.Fatalf("%s with both slots held: %d %s", path, resp.StatusCode, out)
		}
	}
	if n := ce.calls.Load(); n != 0 {
		t.Fatalf("the tokenizer ran %d times for requests refused by concurrency", n)
	}

	// Requests/s: the burst of 2 is spent by the two held admissions; more are refused.
	for path, body := range bodies {
		resp, out := postKey(t, es.base+path, es.keys["tight"], body)
		if resp.StatusCode != 429 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, out)
		}
	}
	if n := ce.calls.Load(); n != 0 {
		t.Fatalf("the tokenizer ran %d times for rate-limited requests", n)
	}
}

// TestBrokeTenantIsNotTokenized: a tenant whose budget cannot pay one output token
// gets 429 insufficient_quota without its prompt being rendered or tokenized.
func TestBrokeTenantIsNotTokenized(t *testing.T) {
	es, ce := startCounting(t)
	for path, body := range megabyteBodies("tiny") {
		for _, b := range []string{body, strings.Replace(body, `"model":"tiny"`, `"model":"auto"`, 1)} {
			resp, out := postKey(t, es.base+path, es.keys["broke"], b)
			if typ, code, _ := errorOf(t, out); resp.StatusCode != 429 || typ != "insufficient_quota" || code != "insufficient_quota" {
				t.Fatalf("%s: %d %s", path, resp.StatusCode, out)
			}
		}
	}
	if n := ce.calls.Load(); n != 0 {
		t.Fatalf("the tokenizer ran %d times for a tenant with no money", n)
	}
	// A small request is refused the same way, and nothing was charged or held.
	resp, out := postKey(t, es.base+"/v1/chat/completions", es.keys["broke"], `{"model":"tiny","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 429 || ce.calls.Load() != 0 {
		t.Fatalf("small request: %d %s, %d tokenizations", resp.StatusCode, out, ce.calls.Load())
	}
	if n := es.srv.ten.InFlight("broke"); n != 0 {
		t.Fatalf("%d requests still in flight", n)
	}
}

// TestOversizedPromptStopsTokenizing: a megabyte prompt against a 512-token model is
// a 400 context_length_exceeded naming the prompt, from a capped tokenization that
// gave up (no uncapped one ran, none returned tokens; the tokenizer's own tests show
// that giving up costs about the limit's work), and a prompt within the limit is
// served as before.
func TestOversizedPromptStopsTokenizing(t *testing.T) {
	es, ce := startCounting(t)
	for path, body := range megabyteBodies("tiny") {
		resp, out := postKey(t, es.base+path, es.keys["acme"], body)
		typ, code, param := errorOf(t, out)
		want := "messages"
		if path == "/v1/completions" {
			want = "prompt"
		}
		if resp.StatusCode != 400 || typ != "invalid_request_error" || code != "context_length_exceeded" || param != want {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, out)
		}
	}
	if full, over, toks := ce.full.Load(), ce.over.Load(), ce.tokens.Load(); full != 0 || over != 2 || toks != 0 {
		t.Fatalf("%d uncapped tokenizations, %d capped ones that gave up (want 2), %d tokens returned", full, over, toks)
	}
	ce.mu.Lock()
	limits := append([]int(nil), ce.limits...)
	ce.mu.Unlock()
	for _, l := range limits {
		if l != 511 {
			t.Fatalf("capped at %v; want the model's 512 less one output token", limits)
		}
	}
	resp, out := postKey(t, es.base+"/v1/chat/completions", es.keys["acme"], `{"model":"tiny","max_tokens":2,"messages":[{"role":"user","content":"hello there"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("a small prompt: %d %s", resp.StatusCode, out)
	}
}

// postKey posts a JSON body to url with the API key and returns the answer.
func postKey(t testing.TB, url, key, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// BenchmarkRefusedMegabytePrompt: what a refused chat request with a megabyte prompt
// costs the server (and its loopback client): over its tenant's concurrency, from a
// tenant with no money, and over the model's context. Before admission came first
// and the tokenizer was capped, each cost a full render and tokenization.
func BenchmarkRefusedMegabytePrompt(b *testing.B) {
	es, _ := startCounting(b)
	pol, _ := es.srv.book.Resolve("tight")
	now := time.Now()
	for range 2 { // the tight tenant's two slots, held
		tk, err := es.srv.ten.Admit(es.srv.quota(pol), now, 0)
		if err != nil {
			b.Fatal(err)
		}
		defer tk.Settle(tenancy.Entry{Time: now, Status: 200})
	}
	body := megabyteBodies("tiny")["/v1/chat/completions"]
	for _, c := range []struct{ name, tenant string }{{"concurrency", "tight"}, {"no_money", "broke"}, {"over_context", "acme"}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if resp, out := postKey(b, es.base+"/v1/chat/completions", es.keys[c.tenant], body); resp.StatusCode < 400 {
					b.Fatalf("%d %s", resp.StatusCode, out)
				}
			}
		})
	}
}

// TestRefusedRequestBodyIsNotDecoded: a tenant over its concurrency or its
// requests/s gets its 429 before its body is decoded (Server.decoded counts the
// bodies handed to the JSON decoder), for a megabyte chat, completion and
// embeddings body alike; and a request refused after its admission (bad JSON, a 400)
// frees its slot at once but keeps its requests/s token spent, as every refusal after
// admission does. (Before, the body was decoded first: a refused megabyte body cost a
// full parse, and a 400 took no token.)
func TestRefusedRequestBodyIsNotDecoded(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()).UTC() }
	es := startEngineWith(t, admissionConfig, engine.Config{}, Options{Now: now}, nil)
	bodies := megabyteBodies("tiny")
	in, _ := json.Marshal(map[string]any{"model": "tiny", "input": strings.Repeat("the cat sat on the mat ", 1<<20/23)})
	bodies["/v1/embeddings"] = string(in)
	pol, _ := es.srv.book.Resolve("tight")

	// Concurrency: the tenant's two slots held (which spends its burst of 2 too).
	var held []*tenancy.Ticket
	for range 2 {
		tk, err := es.srv.ten.Admit(es.srv.quota(pol), now(), 0)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, tk)
	}
	for path, body := range bodies {
		resp, out := postKey(t, es.base+path, es.keys["tight"], body)
		if resp.StatusCode != 429 || !strings.Contains(out, "concurrency") {
			t.Fatalf("%s with both slots held: %d %s", path, resp.StatusCode, out)
		}
	}
	if n := es.srv.decoded.Load(); n != 0 {
		t.Fatalf("%d bodies decoded for requests refused by concurrency", n)
	}
	for _, tk := range held {
		tk.Settle(tenancy.Entry{Time: now(), Status: 200})
	}

	// A second later the burst of 2 is back; two bad bodies spend it, each a 400
	// that frees its slot.
	clock.Add(int64(time.Second))
	for _, bad := range []string{`{"model":"tiny",`, `{"model":"tiny","messages":[],"bogus":1}`} {
		resp, out := postKey(t, es.base+"/v1/chat/completions", es.keys["tight"], bad)
		if resp.StatusCode != 400 {
			t.Fatalf("bad body %s: %d %s", bad, resp.StatusCode, out)
		}
		if n := es.srv.ten.InFlight("tight"); n != 0 {
			t.Fatalf("a 400 after admission left %d requests in flight", n)
		}
	}
	if n := es.srv.decoded.Load(); n != 2 {
		t.Fatalf("%d bodies decoded; want the two bad ones", n)
	}
	// Requests/s: the 400s took the burst; a megabyte body now is refused undecoded.
	for path, body := range bodies {
		resp, out := postKey(t, es.base+path, es.keys["tight"], body)
		if resp.StatusCode != 429 || !strings.Contains(out, "requests") {
			t.Fatalf("%s over requests/s: %d %s", path, resp.StatusCode, out)
		}
	}
	if n := es.srv.decoded.Load(); n != 2 {
		t.Fatalf("%d bodies decoded; the requests refused by requests/s were decoded too", n)
	}
}
