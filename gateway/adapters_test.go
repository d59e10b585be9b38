package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/tenancy"
)

// adaptersYAML serves the generated tiny llama with nine rank-16 adapters: seven
// shared (ft-0…ft-6), one private to acme under an OpenAI-style fine-tune id, one
// private to beta; gamma's plan allows one adapter only.
const adaptersYAML = `
ledger: {sync: process}
models:
  - {id: tiny, path: $TINY, max_model_len: 256, max_concurrency: 16, prompt_usd_per_1k: 0.001, completion_usd_per_1k: 0.002}
adapters:
  - {id: ft-0, path: $LORA0, base: tiny}
  - {id: ft-1, path: $LORA1, base: tiny}
  - {id: ft-2, path: $LORA2, base: tiny}
  - {id: ft-3, path: $LORA3, base: tiny}
  - {id: ft-4, path: $LORA4, base: tiny}
  - {id: ft-5, path: $LORA5, base: tiny}
  - {id: ft-6, path: $LORA8, base: tiny}
  - {id: "ft:tiny:acme:support", path: $LORA6, base: tiny, tenant: acme}
  - {id: "ft:tiny:beta:private", path: $LORA7, base: tiny, tenant: beta}
plans:
  open: {}
  narrow: {allowed_adapters: [ft-0]}
tenants:
  - {id: acme, plan: open}
  - {id: beta, plan: open}
  - {id: gamma, plan: narrow}
`

// adapterModelIDs lists the ids of /v1/models for tenant, through the SDK.
func adapterModelIDs(t *testing.T, es *engineServer, tenant string) []string {
	t.Helper()
	c := es.sdk(tenant)
	page, err := c.Models.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	return ids
}

// rawCall sends body to path with tenant's key (Bearer, and x-api-key for
// Anthropic's API) and returns the status and the body.
func rawCall(t *testing.T, es *engineServer, tenant, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, es.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+es.keys[tenant])
	req.Header.Set("x-api-key", es.keys[tenant])
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAdaptersListedPerTenant: /v1/models lists the base, the shared adapters and
// the tenant's own private one (with its base as parent), never another tenant's
// private adapter; a plan's allowed_adapters narrows the list.
func TestAdaptersListedPerTenant(t *testing.T) {
	es := startEngine(t, adaptersYAML, engine.Config{})
	shared := []string{"tiny", "ft-0", "ft-1", "ft-2", "ft-3", "ft-4", "ft-5", "ft-6"}
	for _, c := range []struct {
		tenant string
		want   []string
	}{
		{"acme", append(slices.Clone(shared), "ft:tiny:acme:support")},
		{"beta", append(slices.Clone(shared), "ft:tiny:beta:private")},
		{"gamma", []string{"tiny", "ft-0"}},
	} {
		if got := adapterModelIDs(t, es, c.tenant); !slices.Equal(got, c.want) {
			t.Errorf("%s's /v1/models: %v, want %v", c.tenant, got, c.want)
		}
	}
	st, body := rawCall(t, es, "acme", "GET", "/v1/models/ft:tiny:acme:support", "")
	var m struct {
		ID, OwnedBy, Parent string `json:",omitempty"`
	}
	var raw map[string]any
	json.Unmarshal([]byte(body), &raw)
	m.ID, _ = raw["id"].(string)
	m.OwnedBy, _ = raw["owned_by"].(string)
	m.Parent, _ = raw["parent"].(string)
	if st != 200 || m.ID != "ft:tiny:acme:support" || m.OwnedBy != "acme" || m.Parent != "tiny" {
		t.Errorf("GET /v1/models/{acme's adapter} as acme: %d %s", st, body)
	}
}

// TestPrivateAdapterIsNotFound: another tenant's private adapter answers exactly
// as a model that was never configured (404 model_not_found, the same message but
// for the id) in every API that takes a model: chat, completions, responses,
// Anthropic's messages and count_tokens, embeddings and GET /v1/models/{id}; an
// adapter the plan does not allow is a 404 too; nothing reaches the engine.
func TestPrivateAdapterIsNotFound(t *testing.T) {
	es := startEngine(t, adaptersYAML, engine.Config{})
	calls := []struct{ method, path, body string }{
		{"POST", "/v1/chat/completions", `{"model":%q,"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`},
		{"POST", "/v1/completions", `{"model":%q,"prompt":"hi","max_tokens":2}`},
		{"POST", "/v1/responses", `{"model":%q,"input":"hi","max_output_tokens":2}`},
		{"POST", "/v1/messages", `{"model":%q,"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`},
		{"POST", "/v1/messages/count_tokens", `{"model":%q,"messages":[{"role":"user","content":"hi"}]}`},
		{"POST", "/v1/embeddings", `{"model":%q,"input":"hi"}`},
		{"GET", "/v1/models/%s", ``},
	}
	steps := es.block.Models()[0].Steps
	for _, c := range []struct{ tenant, id string }{{"beta", "ft:tiny:acme:support"}, {"acme", "ft:tiny:beta:private"}, {"gamma", "ft-1"}} {
		for _, call := range calls {
			do := func(id string) (int, string) {
				path, body := call.path, call.body
				if strings.Contains(path, "%s") {
					path = fmt.Sprintf(path, id)
				} else {
					body = fmt.Sprintf(body, id)
				}
				return rawCall(t, es, c.tenant, call.method, path, body)
			}
			st, body := do(c.id)
			nst, nbody := do("no-such-model")
			if st != 404 || !strings.Contains(body, "model_not_found") && !strings.Contains(body, "not_found_error") {
				t.Errorf("%s %s %s as %s: %d %s, want 404 model_not_found (Anthropic's not_found_error)", call.method, call.path, c.id, c.tenant, st, body)
			}
			if st != nst || strings.ReplaceAll(body, c.id, "no-such-model") != nbody {
				t.Errorf("%s %s as %s: %s's answer\n  %d %s\nis not a never-configured id's\n  %d %s", call.method, call.path, c.tenant, c.id, st, body, nst, nbody)
			}
		}
	}
	if es.block.Models()[0].Steps != steps {
		t.Error("a refused request reached the engine")
	}
}

// TestAdapterServedThroughSDK: a request naming an adapter runs on its base with
// the adapter (tokens unlike the bare base's), its answer names the adapter, the
// headers name both, and the ledger records the adapter beside the model.
func TestAdapterServedThroughSDK(t *testing.T) {
	es := startEngine(t, adaptersYAML, engine.Config{})
	ask := func(model string) (*openai.ChatCompletion, *http.Response) {
		var raw *http.Response
		c := es.sdk("acme")
		resp, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model:       model,
			Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me about the sea")},
			MaxTokens:   openai.Int(12),
			Temperature: openai.Float(0),
		}, option.WithResponseInto(&raw))
		if err != nil {
			t.Fatal(err)
		}
		return resp, raw
	}
	bare, _ := ask("tiny")
	ad, raw := ask("ft:tiny:acme:support")
	if ad.Model != "ft:tiny:acme:support" || raw.Header.Get("X-LMLite-Model") != "tiny" || raw.Header.Get("X-LMLite-Adapter") != "ft:tiny:acme:support" {
		t.Errorf("answer names %q, headers %q %q", ad.Model, raw.Header.Get("X-LMLite-Model"), raw.Header.Get("X-LMLite-Adapter"))
	}
	if ad.Choices[0].Message.Content == bare.Choices[0].Message.Content {
		t.Errorf("the adapter changed nothing: %q", ad.Choices[0].Message.Content)
	}
	var found bool
	var led []tenancy.Entry
	es.store.Ledger(func(e tenancy.Entry) error { led = append(led, e); return nil })
	for _, e := range led {
		if e.Adapter == "ft:tiny:acme:support" {
			found = e.Model == "tiny" && e.Tenant == "acme" && e.CompletionTokens == 12 && e.Cost > 0
		}
	}
	if !found {
		t.Errorf("no ledger entry for the adapter with its base as model: %+v", led)
	}
}

// TestAdaptersMixedBatchThroughSDK: 16 concurrent chat requests over 8 adapters
// (two each, different prompts and seeds) give each the same text as it gets
// alone, and they shared batched steps.
func TestAdaptersMixedBatchThroughSDK(t *testing.T) {
	es := startEngine(t, adaptersYAML, engine.Config{})
	ads := []string{"ft-0", "ft-1", "ft-2", "ft-3", "ft-4", "ft-5", "ft-6", "ft:tiny:acme:support"}
	ask := func(i int) (string, error) {
		c := es.sdk("acme")
		resp, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model:       ads[i%8],
			Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf("Story %d about a %s", i, []string{"ship", "dragon"}[i/8]))},
			MaxTokens:   openai.Int(16),
			Temperature: openai.Float(0.8),
			Seed:        openai.Int(int64(i)),
		})
		if err != nil {
			return "", err
		}
		return resp.Choices[0].Message.Content, nil
	}
	alone := make([]string, 16)
	for i := range alone {
		var err error
		if alone[i], err = ask(i); err != nil {
			t.Fatal(err)
		}
	}
	before := es.block.Models()[0]
	got := make([]string, 16)
	errs := make([]error, 16)
	var wg sync.WaitGroup
	for i := range got {
		wg.Add(1)
		go func() { defer wg.Done(); got[i], errs[i] = ask(i) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i] != alone[i] {
			t.Errorf("request %d on %s: %q in the batch, %q alone", i, ads[i%8], got[i], alone[i])
		}
	}
	after := es.block.Models()[0]
	if steps, seqs := after.Steps-before.Steps, after.StepSeqs-before.StepSeqs; float64(seqs)/float64(steps) < 2 {
		t.Errorf("little batching: %d sequences in %d steps", seqs, steps)
	}
}

// TestAdminAdapters: the admin key lists the adapters (base, owner, state, bytes)
// and loads and unloads one; a tenant's key may not; the adapter's state shows in
// the owner's /v1/models and beside its base on the operator's dashboard.
func TestAdminAdapters(t *testing.T) {
	es := startEngineWith(t, adaptersYAML, engine.Config{}, Options{AdminKey: "admin-secret"}, nil)
	admin := func(method, path, key string) (int, string) {
		req, _ := http.NewRequest(method, es.base+path, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	type row struct {
		ID, Base, Tenant, State string
		Bytes                   int64
	}
	list := func() map[string]row {
		st, body := admin("GET", "/admin/adapters", "admin-secret")
		var l struct{ Data []row }
		if err := json.Unmarshal([]byte(body), &l); st != 200 || err != nil {
			t.Fatalf("GET /admin/adapters: %d %s %v", st, body, err)
		}
		out := map[string]row{}
		for _, r := range l.Data {
			out[r.ID] = r
		}
		return out
	}
	const id = "ft:tiny:acme:support"
	if r := list()[id]; r.Base != "tiny" || r.Tenant != "acme" || r.State != engine.AdapterUnloaded || r.Bytes <= 0 {
		t.Fatalf("before any request: %+v", r)
	}
	if st, _ := admin("POST", "/admin/adapters/"+id+"/load", es.keys["acme"]); st != 401 {
		t.Errorf("a tenant's key loads an adapter: %d", st)
	}
	if st, body := admin("POST", "/admin/adapters/"+id+"/load", "admin-secret"); st != 200 || list()[id].State != engine.AdapterLoaded {
		t.Fatalf("load: %d %s, state %s", st, body, list()[id].State)
	}
	_, body := rawCall(t, es, "acme", "GET", "/v1/models/"+id, "")
	if !strings.Contains(body, `"state":"loaded"`) {
		t.Errorf("/v1/models/{id} after the load: %s", body)
	}
	c := browser(t)
	if resp, _ := send(t, c, "POST", es.base+"/dashboard/login", url.Values{"key": {"admin-secret"}}); resp.StatusCode != 303 {
		t.Fatalf("dashboard sign-in: %d", resp.StatusCode)
	}
	if _, page := send(t, c, "GET", es.base+"/dashboard", nil); !strings.Contains(page, "adapters: ft-0 (unloaded)") || !strings.Contains(page, id+" (loaded)") {
		t.Errorf("the operator's model view does not show the adapters' states")
	}
	if st, body := admin("POST", "/admin/adapters/"+id+"/unload", "admin-secret"); st != 200 || list()[id].State != engine.AdapterUnloaded {
		t.Fatalf("unload: %d %s, state %s", st, body, list()[id].State)
	}
	if st, _ := admin("POST", "/admin/adapters/nope/load", "admin-secret"); st != 404 {
		t.Errorf("an unknown adapter: %d", st)
	}
}

// adapterTiersYAML lists adapters in tiers: a shared one alone in balanced, acme's
// private one above a shared one in deep; gamma's plan allows ft-0 alone.
const adapterTiersYAML = `
ledger: {sync: process}
models:
  - {id: tiny, path: $TINY, max_model_len: 256, max_concurrency: 16, prompt_usd_per_1k: 0.001, completion_usd_per_1k: 0.002}
adapters:
  - {id: ft-0, path: $LORA0, base: tiny}
  - {id: ft-1, path: $LORA1, base: tiny}
  - {id: "ft:tiny:acme:support", path: $LORA6, base: tiny, tenant: acme}
tiers:
  fast: [{model: tiny, quality: 0.2}]
  balanced: [{model: ft-0, quality: 0.5}]
  deep: [{model: "ft:tiny:acme:support", quality: 0.9}, {model: ft-1, quality: 0.1}]
plans:
  open: {}
  narrow: {allowed_adapters: [ft-0]}
tenants:
  - {id: acme, plan: open}
  - {id: beta, plan: open}
  - {id: gamma, plan: narrow}
`

// TestAdapterInTierServesWithTheAdapter: a tier may list an adapter as it lists a
// model. Routed to that tier, the request runs on the base with the adapter (the
// same tokens as naming the adapter, unlike the bare base's); the answer, the
// headers and the ledger name the adapter and the tier. A tier's private adapter
// serves its owner alone: to another tenant it is not there (the tier's next
// candidate serves, or the tier is empty), and no answer names it; an adapter the
// plan's allowed_adapters leaves out is passed over.
func TestAdapterInTierServesWithTheAdapter(t *testing.T) {
	es := startEngine(t, adapterTiersYAML, engine.Config{})
	ask := func(tenant, model string) (*openai.ChatCompletion, *http.Response, error) {
		var raw *http.Response
		c := es.sdk(tenant)
		resp, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model:       model,
			Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me about the sea")},
			MaxTokens:   openai.Int(12),
			Temperature: openai.Float(0),
		}, option.WithResponseInto(&raw))
		return resp, raw, err
	}
	text := map[string]string{}
	for _, id := range []string{"tiny", "ft-0", "ft-1", "ft:tiny:acme:support"} {
		r, _, err := ask("acme", id)
		if err != nil {
			t.Fatalf("%s by name: %v", id, err)
		}
		text[id] = r.Choices[0].Message.Content
	}
	if text["ft-0"] == text["tiny"] || text["ft-1"] == text["tiny"] {
		t.Fatalf("the adapters change nothing: %q", text)
	}
	for _, c := range []struct{ tenant, model, tier, adapter string }{
		{"acme", "tier:balanced", "balanced", "ft-0"},
		{"acme", "tier:deep", "deep", "ft:tiny:acme:support"},
		{"beta", "tier:deep", "deep", "ft-1"}, // acme's private adapter is not there for beta
		{"gamma", "tier:balanced", "balanced", "ft-0"},
		{"acme", "tier:fast", "fast", ""},
	} {
		r, raw, err := ask(c.tenant, c.model)
		if err != nil {
			t.Errorf("%s as %s: %v", c.model, c.tenant, err)
			continue
		}
		want := cmp.Or(c.adapter, "tiny")
		if r.Model != want || raw.Header.Get("X-LMLite-Model") != "tiny" || raw.Header.Get("X-LMLite-Adapter") != c.adapter || raw.Header.Get("X-LMLite-Tier") != c.tier {
			t.Errorf("%s as %s: answer names %q, headers model %q adapter %q tier %q; want %q on tiny in %s", c.model, c.tenant,
				r.Model, raw.Header.Get("X-LMLite-Model"), raw.Header.Get("X-LMLite-Adapter"), raw.Header.Get("X-LMLite-Tier"), want, c.tier)
		}
		if got := r.Choices[0].Message.Content; got != text[want] {
			t.Errorf("%s as %s: %q, but %s by name gives %q", c.model, c.tenant, got, want, text[want])
		}
	}
	// gamma's plan leaves ft-1 out and acme's adapter is not there for it: deep has
	// nothing gamma may use, and the refusal does not name acme's adapter.
	st, body := rawCall(t, es, "gamma", "POST", "/v1/chat/completions", `{"model":"tier:deep","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`)
	if st < 400 || strings.Contains(body, "acme") || !strings.Contains(body, "ft-1") {
		t.Errorf("tier:deep as gamma: %d %s, want a refusal naming ft-1 (forbidden) and not acme's adapter", st, body)
	}
	var led []tenancy.Entry
	es.store.Ledger(func(e tenancy.Entry) error { led = append(led, e); return nil })
	tiered := map[string]string{}
	for _, e := range led {
		if e.Tier != "" && e.Adapter != "" {
			tiered[e.Tenant+" "+e.Adapter] = e.Model + " " + e.Tier
		}
	}
	for k, v := range map[string]string{"acme ft-0": "tiny balanced", "acme ft:tiny:acme:support": "tiny deep", "beta ft-1": "tiny deep", "gamma ft-0": "tiny balanced"} {
		if tiered[k] != v {
			t.Errorf("ledger for %s: %q, want %q (all: %v)", k, tiered[k], v, tiered)
		}
	}
}

// TestUsageAndDashboardsShowTheAdapter: the usage API groups by adapter beside the
// model (group_by=adapter; grouped by model alone, a model's adapters sum into
// it), the tenant's dashboard shows the adapter beside the model, the operator's
// lists each adapter with today's requests on it; another tenant sees neither a
// private adapter's name nor its usage. (A bare model's result has no adapter field.)
func TestUsageAndDashboardsShowTheAdapter(t *testing.T) {
	es := startEngineWith(t, adaptersYAML, engine.Config{}, Options{AdminKey: "admin-secret"}, nil)
	const private = "ft:tiny:acme:support"
	for _, c := range []struct{ tenant, model string }{{"acme", "tiny"}, {"acme", private}, {"acme", "ft-0"}, {"acme", "ft-0"}, {"beta", "ft-1"}} {
		if st, body := rawCall(t, es, c.tenant, "POST", "/v1/chat/completions", `{"model":"`+c.model+`","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`); st != 200 {
			t.Fatalf("%s as %s: %d %s", c.model, c.tenant, st, body)
		}
	}
	start := strconv.FormatInt(time.Now().Add(-time.Hour).Unix(), 10)
	type result struct {
		Model, Adapter   *string
		NumModelRequests int64 `json:"num_model_requests"`
		Amount           *struct{ Value float64 }
	}
	rows := func(tenant, path, groupBy string) (map[string]int64, string) {
		st, body := rawCall(t, es, tenant, "GET", path+"?start_time="+start+"&group_by="+groupBy, "")
		var p struct{ Data []struct{ Results []result } }
		if err := json.Unmarshal([]byte(body), &p); st != 200 || err != nil {
			t.Fatalf("%s as %s: %d %s", path, tenant, st, body)
		}
		out := map[string]int64{}
		for _, b := range p.Data {
			for _, r := range b.Results {
				k := ""
				if r.Model != nil {
					k = *r.Model
				}
				if r.Adapter != nil {
					k += "+" + *r.Adapter
				}
				if r.Amount != nil {
					out[k]++
					continue
				}
				out[k] += r.NumModelRequests
			}
		}
		return out, body
	}
	if got, _ := rows("acme", "/v1/organization/usage/completions", "model,adapter"); !maps.Equal(got, map[string]int64{"tiny": 1, "tiny+ft-0": 2, "tiny+" + private: 1}) {
		t.Errorf("acme's usage by model and adapter: %v", got)
	}
	if got, _ := rows("acme", "/v1/organization/usage/completions", "model"); !maps.Equal(got, map[string]int64{"tiny": 4}) {
		t.Errorf("acme's usage by model: %v (a model's adapters sum into it)", got)
	}
	if got, _ := rows("acme", "/v1/organization/costs", "adapter"); !maps.Equal(got, map[string]int64{"": 1, "+ft-0": 1, "+" + private: 1}) {
		t.Errorf("acme's costs by adapter: %v", got)
	}
	if got, body := rows("beta", "/v1/organization/usage/completions", "model,adapter"); !maps.Equal(got, map[string]int64{"tiny+ft-1": 1}) || strings.Contains(body, "acme") {
		t.Errorf("beta's usage by model and adapter: %v %s", got, body)
	}

	dashboard := func(key string) string {
		c := browser(t)
		if resp, _ := send(t, c, "POST", es.base+"/dashboard/login", url.Values{"key": {key}}); resp.StatusCode != 303 {
			t.Fatalf("dashboard sign-in: %d", resp.StatusCode)
		}
		_, page := send(t, c, "GET", es.base+"/dashboard", nil)
		return page
	}
	cell := func(page, label, text string) bool {
		return strings.Contains(page, `<td data-label="`+label+`" class="adapter">`+html.EscapeString(text)+`</td>`)
	}
	acme := dashboard(es.keys["acme"])
	for _, a := range []string{"none", "ft-0", private} {
		if !cell(acme, "Adapter", a) {
			t.Errorf("acme's dashboard has no row for adapter %q", a)
		}
	}
	if beta := dashboard(es.keys["beta"]); !cell(beta, "Adapter", "ft-1") || strings.Contains(beta, "acme:support") || cell(beta, "Adapter", "ft-0") {
		t.Errorf("beta's dashboard: the row for ft-1 missing, or acme's adapters shown")
	}
	op := dashboard("admin-secret")
	for id, n := range map[string]string{private: "1", "ft-0": "2", "ft-1": "1", "ft-2": "0"} {
		re := regexp.MustCompile(`<tr data-adapter="` + regexp.QuoteMeta(html.EscapeString(id)) + `">.*?class="requests">([0-9]+)<`)
		if m := re.FindStringSubmatch(op); m == nil || m[1] != n {
			t.Errorf("the operator's adapters: %s %v, want %s requests today", id, m, n)
		}
	}
}

// TestAdapterMetricsSeries: a request on an adapter is counted by adapter beside its
// base model (lmlite_adapter_requests_total, lmlite_adapter_tokens_total), and
// /metrics shows each adapter's state (loaded after the request, unloaded before
// any) and its requests in flight.
func TestAdapterMetricsSeries(t *testing.T) {
	es := startEngine(t, adaptersYAML, engine.Config{})
	st, body := rawCall(t, es, "acme", "POST", "/v1/completions", `{"model":"ft-1","prompt":"once upon a time","max_tokens":3,"temperature":0}`)
	if st != 200 {
		t.Fatalf("completion on ft-1: %d %s", st, body)
	}
	_, scrape := (&testServer{t: t, url: es.base}).get("/metrics", "")
	for _, want := range []string{
		`lmlite_adapter_requests_total{adapter="ft-1",model="tiny",status="200",tenant="acme"} 1`,
		`lmlite_adapter_tokens_total{adapter="ft-1",kind="completion",model="tiny"} 3`,
		`lmlite_adapter_tokens_total{adapter="ft-1",kind="prompt",model="tiny"}`,
		`lmlite_adapter_state{adapter="ft-1",model="tiny",state="loaded"} 1`,
		`lmlite_adapter_state{adapter="ft-2",model="tiny",state="unloaded"} 1`,
		`lmlite_adapter_active_requests{adapter="ft-1",model="tiny"} 0`,
		`lmlite_requests_total{model="tiny",status="200",tenant="acme",tier=""} 1`,
	} {
		if !strings.Contains(scrape, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(scrape, `adapter="ft-2",kind=`) || strings.Contains(scrape, `lmlite_adapter_requests_total{adapter="ft-2"`) {
		t.Errorf("/metrics counts requests on ft-2, which served none")
	}
}
