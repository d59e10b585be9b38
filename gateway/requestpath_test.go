package gateway

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/money"
	"github.com/lmlite/lmlite/tenancy"
	"github.com/lmlite/lmlite/tiers"
)

func modelIDs(t *testing.T, body string) []string {
	t.Helper()
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	return ids
}

// TestPlanBindsNamedModels: a plan's allowed tiers bind a model called by name too (a
// model is allowed when the plan allows it and a tier it serves in, or it serves in no
// tier and allowed_models names it), and /v1/models lists only what the key may use.
// A model the key may not use answers like one that does not exist (404
// model_not_found, OpenAI's answer), so a key cannot probe other plans' models.
func TestPlanBindsNamedModels(t *testing.T) {
	yaml := strings.Replace(testConfig, "models:\n", "models:\n  - {id: local, path: local.gguf, max_model_len: 512}\n", 1)
	yaml = strings.Replace(yaml, "  twotier: {allowed_tiers: [fast, balanced]}\n",
		"  twotier: {allowed_tiers: [fast, balanced]}\n  named: {allowed_tiers: [fast], allowed_models: [tiny, local]}\n", 1)
	yaml = strings.Replace(yaml, "  - {id: twotier, plan: twotier}\n", "  - {id: twotier, plan: twotier}\n  - {id: named, plan: named}\n", 1)
	ts := startServer(t, yaml, newFakeEngineWith("local", "tiny", "big"))
	chat := func(model string) string {
		return `{"model": "` + model + `", "messages": [{"role":"user","content":"x"}], "max_tokens": 2}`
	}
	cases := []struct {
		tenant string
		list   string // the models /v1/models lists
	}{
		{"acme", "local tiny big"}, // no limits: every model
		{"twotier", "tiny"},        // big serves only in deep and max; local in no tier
		{"small", "tiny"},          // allowed_models [tiny]
		{"named", "tiny local"},    // tiny serves in fast; local is in no tier and named
	}
	all := []string{"local", "tiny", "big"}
	for _, c := range cases {
		t.Run(c.tenant, func(t *testing.T) {
			key := ts.keys[c.tenant]
			resp, body := ts.get("/v1/models", key)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			got := strings.Join(modelIDs(t, body), " ")
			want := strings.Fields(c.list)
			if got != strings.Join(orderLike(all, want), " ") {
				t.Errorf("/v1/models lists %q, want %q", got, c.list)
			}
			for _, m := range all {
				allowed := strings.Contains(" "+c.list+" ", " "+m+" ")
				resp, body := ts.get("/v1/models/"+m, key)
				if allowed != (resp.StatusCode == 200) {
					t.Errorf("GET /v1/models/%s: %d %s", m, resp.StatusCode, body)
				}
				resp, body = ts.post("/v1/chat/completions", key, chat(m))
				switch {
				case allowed && resp.StatusCode != 200:
					t.Errorf("chat with %s: %d %s", m, resp.StatusCode, body)
				case !allowed:
					e := parseErr(t, body)
					if resp.StatusCode != 404 || e.Error.Code == nil || *e.Error.Code != "model_not_found" {
						t.Errorf("chat with %s (not allowed): %d %s", m, resp.StatusCode, body)
					}
				}
			}
		})
	}
	// The fixed tier is still a 403: tiers are public names.
	resp, body := ts.post("/v1/chat/completions", ts.keys["twotier"], chat("tier:deep"))
	if resp.StatusCode != 403 || !strings.Contains(body, "tier_not_allowed") {
		t.Errorf("tier:deep for twotier: %d %s", resp.StatusCode, body)
	}
}

// orderLike returns the members of want in the order of all.
func orderLike(all, want []string) []string {
	var out []string
	for _, a := range all {
		for _, w := range want {
			if a == w {
				out = append(out, a)
			}
		}
	}
	return out
}

// TestRefusedTierReleasesItsReservation: when the engine refuses the tier the router
// chose (its queue is full) and routing steps down, the refused tier's reservation is
// released first. The tenant's budget ($0.0036) covers big's worst case ($0.00353) or
// tiny's ($0.000253) but not both: it must be served by tiny, not refused for money.
func TestRefusedTierReleasesItsReservation(t *testing.T) {
	for _, refusal := range []error{engine.ErrQueueFull, engine.ErrNoMemory, engine.ErrClosed} {
		t.Run(refusal.Error(), func(t *testing.T) {
			eng := newFakeEngine()
			eng.Refuse = map[string]error{"big": refusal}
			ts := startServer(t, testConfig, eng)
			resp, body := ts.post("/v1/chat/completions", ts.keys["enough"],
				`{"model": "auto", "lmlite": {"tier_mode": "max"}, "messages": [{"role":"user","content":"x"}], "max_tokens": 100}`)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			if m := resp.Header.Get("X-LMLite-Model"); m != "tiny" {
				t.Errorf("served by %q, want tiny", m)
			}
			led := ts.ledger()
			if len(led) != 1 || led[0].Model != "tiny" || led[0].Status != 200 {
				t.Errorf("ledger %+v", led)
			}
		})
	}
	// Every tier refuses: a 503 whose trace says failed, never budget (the money was
	// released at each step), and nothing is charged.
	eng := newFakeEngine()
	eng.Refuse = map[string]error{"big": engine.ErrQueueFull, "tiny": engine.ErrQueueFull}
	ts := startServer(t, testConfig, eng)
	resp, body := ts.post("/v1/chat/completions", ts.keys["enough"],
		`{"model": "auto", "lmlite": {"tier_mode": "max"}, "messages": [{"role":"user","content":"x"}], "max_tokens": 100}`)
	if resp.StatusCode != 503 || !strings.Contains(body, ":failed") || strings.Contains(body, ":budget") {
		t.Errorf("all tiers refused: %d %s", resp.StatusCode, body)
	}
	day, _, _ := ts.store.Spent("enough", time.Now())
	if day != 0 {
		t.Errorf("spent %v after refusals", day)
	}
}

// TestMaxTokensOverEveryLimit: max_tokens over every candidate's limit is a 400
// naming the limit, however the request was routed, also for a tenant with a budget
// (whose worst case at 1e9 tokens is over it).
func TestMaxTokensOverEveryLimit(t *testing.T) {
	ts := startServer(t, testConfig, newFakeEngine())
	for _, tenant := range []string{"acme", "race"} {
		for _, model := range []string{"tiny", "auto", "tier:fast", "tier:max"} {
			for _, field := range []string{"max_tokens", "max_completion_tokens"} {
				resp, body := ts.post("/v1/chat/completions", ts.keys[tenant],
					`{"model": "`+model+`", "messages": [{"role":"user","content":"x"}], "`+field+`": 1000000000}`)
				e := parseErr(t, body)
				if resp.StatusCode != 400 || e.Error.Param == nil || *e.Error.Param != field || !strings.Contains(e.Error.Message, "512") {
					t.Errorf("%s %s %s: %d %s", tenant, model, field, resp.StatusCode, body)
				}
			}
		}
	}
}

// TestUnknownModelListsTheKeysModels: an unknown model is a 404 model_not_found whose
// message lists the models the key may use (and no others).
func TestUnknownModelListsTheKeysModels(t *testing.T) {
	ts := startServer(t, testConfig, newFakeEngine())
	resp, body := ts.post("/v1/chat/completions", ts.keys["small"], `{"model": "gpt-9", "messages": [{"role":"user","content":"x"}]}`)
	e := parseErr(t, body)
	if resp.StatusCode != 404 || e.Error.Code == nil || *e.Error.Code != "model_not_found" || e.Error.Param == nil || *e.Error.Param != "model" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if !strings.Contains(e.Error.Message, "tiny") || strings.Contains(e.Error.Message, "big") {
		t.Errorf("message %q: want tiny (and auto) listed, not big", e.Error.Message)
	}
}

// TestBodyOverTheLimitIs413: a body over max_body_bytes answers 413 in OpenAI's
// error shape.
func TestBodyOverTheLimitIs413(t *testing.T) {
	ts := startServer(t, testConfig, newFakeEngine())
	resp, body := ts.post("/v1/chat/completions", ts.keys["acme"],
		`{"model": "tiny", "messages": [{"role":"user","content":"`+strings.Repeat("a", 5000)+`"}]}`)
	e := parseErr(t, body)
	if resp.StatusCode != 413 || e.Error.Param == nil || *e.Error.Param != "body" || !strings.Contains(e.Error.Message, "4096") {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
}

// TestConfigZeroValueWorks: the gateway's own Config needs no config file: its zero
// value serves (no models, no tenants), and a TierSet naming an unknown model is
// refused at New.
func TestConfigZeroValueWorks(t *testing.T) {
	srv, err := New(Config{}, nil, tenancy.New(nil), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if srv.cfg.MaxBodyBytes != 1<<20 || srv.cfg.MaxInFlight != 1024 {
		t.Errorf("defaults %+v", srv.cfg)
	}
	var bad Config
	bad.Tiers.Tiers[tiers.Fast] = []tiers.Candidate{{Model: "ghost"}}
	if _, err := New(bad, nil, tenancy.New(nil), Options{}); err == nil {
		t.Error("a tier naming an unknown model was accepted")
	}
}

// TestRefusedEntryTakesTheNextWithoutDecidingAgain: the request is decided once (one
// fallback chain: max/big, then balanced/tiny); the engine refuses big, so the shell
// releases big's reservation and runs tiny, the chain's second entry, without a
// second decision. The money left proves the release: the tenant's budget less
// tiny's charge alone.
func TestRefusedEntryTakesTheNextWithoutDecidingAgain(t *testing.T) {
	eng := newFakeEngine()
	eng.Refuse = map[string]error{"big": engine.ErrQueueFull}
	ts := startServer(t, testConfig, eng)
	before := ts.srv.decisions.Load()
	resp, body := ts.post("/v1/chat/completions", ts.keys["enough"],
		`{"model": "auto", "lmlite": {"tier_mode": "max"}, "messages": [{"role":"user","content":"x"}], "max_tokens": 100}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if n := ts.srv.decisions.Load() - before; n != 1 {
		t.Errorf("%d routing decisions for one request, want 1", n)
	}
	if m, tier := resp.Header.Get("X-LMLite-Model"), resp.Header.Get("X-LMLite-Tier"); m != "tiny" || tier != "balanced" {
		t.Errorf("served by %s/%s, want balanced/tiny (the chain's second entry)", tier, m)
	}
	led := ts.ledger()
	if len(led) != 1 || led[0].Model != "tiny" || led[0].Cost <= 0 {
		t.Fatalf("ledger %+v", led)
	}
	pol, _ := ts.srv.book.Resolve("enough")
	left := ts.srv.ten.Remaining(ts.srv.quota(pol), time.Now())
	if want := money.USD(0.0036) - led[0].Cost; left != want {
		t.Errorf("money left %v, want %v (the budget less tiny's charge: big's reservation released)", left, want)
	}
}
