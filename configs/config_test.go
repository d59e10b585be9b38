package configs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/lmlite/lmlite/loadtest"
	"github.com/lmlite/lmlite/money"
	"github.com/lmlite/lmlite/tiers"
)

func TestDefaultPlanAndTenant(t *testing.T) {
	c, err := Parse([]byte("models: [{id: m, path: a.gguf}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("a config of models only: %v", err)
	}
	if len(c.Tenants) != 1 || c.Tenants[0].ID != DefaultTenant || c.DemoTenant != DefaultTenant || c.HasTiers() {
		t.Errorf("defaults: tenants %+v, demo tenant %q, tiers %v", c.Tenants, c.DemoTenant, c.TierNames())
	}
	// Plans without tenants stay an error: the file meant to declare them.
	if c, _ := Parse([]byte("models: [{id: m, path: a.gguf}]\nplans: {p: {}}\ndemo_tenant: x\n")); c.Validate() == nil {
		t.Error("plans without the demo tenant accepted")
	}
}

func TestPullModels(t *testing.T) {
	base := "plans: {p: {}}\ntenants: [{id: t, plan: p}]\nmodels:\n"
	for _, tc := range []struct {
		model string
		ok    bool
	}{
		{"  - {id: a, pull: hf://org/repo/m.gguf}", true},
		{"  - {id: a, pull: qwen3-0.6b-q8_0}", true}, // the built-in catalogue
		{"  - {id: a, pull: https://example.test/m.gguf}", true},
		{"  - {id: a, pull: hf://org/repo}", false},
		{"  - {id: a, pull: no-such-catalogue-name}", false},
		{"  - {id: a, pull: hf://org/repo/m.gguf, path: /m.gguf}", false},
		{"  - {id: a, pull: hf://org/repo/m.gguf, upstream: {base_url: 'http://x/v1'}}", false},
	} {
		c, err := Parse([]byte(base + tc.model))
		if err == nil {
			err = c.Validate()
		}
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.model, err)
		}
	}
	c, _ := Parse([]byte(base + "  - {id: a, pull: hf://org/repo/m.gguf}"))
	c.Models[0].PulledPath = "/cache/blobs/sha256-x.gguf"
	if got := c.Models[0].File(); got != "/cache/blobs/sha256-x.gguf" {
		t.Errorf("file of a pulled model: %q", got)
	}
}

func TestExampleIsValid(t *testing.T) {
	c, err := Parse(Example)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(c.Models) != 3 || c.Models[2].Upstream == nil || c.Models[2].Upstream.Timeout != 10*time.Minute || c.Models[1].Pull == "" {
		t.Errorf("models: %+v", c.Models)
	}
	if c.Models[0].BatchTimeoutMS != 5 {
		t.Errorf("batch timeout: %v ms", c.Models[0].BatchTimeoutMS)
	}
	set := c.Set()
	if got := set.Tiers[tiers.Deep]; len(got) != 1 || got[0].Model != "llama-8b" || got[0].Price.CompletionPer1K != money.USD(0.002) {
		t.Errorf("deep tier: %+v", got)
	}
	b, err := c.Book()
	if err != nil {
		t.Fatal(err)
	}
	p, _ := b.Resolve("hobbyist")
	if p.DailyBudget != money.USD(1) || !p.AllowsTier(tiers.Deep) || p.AllowsTier(tiers.Max) {
		t.Errorf("hobbyist: %+v", p)
	}
}

func TestDemoWithGeneratedModels(t *testing.T) {
	c, err := Parse(Demo)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "models") {
		t.Fatalf("demo without models: %v", err)
	}
	c.AddDemoModels([]Model{{ID: "demo-a", Path: "a.gguf", Embeddings: true}, {ID: "demo-b", Path: "b.gguf"}}, 0.001, 0.002)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if a, b := c.Models[0], c.Models[1]; !a.Embeddings || b.Embeddings {
		t.Errorf("a demo model's embeddings are not kept: %+v %+v", a, b)
	}
	if a, b := c.Models[0], c.Models[1]; a.PromptUSDPer1K != 0.001 || a.CompletionUSDPer1K != 0.002 || b.PromptUSDPer1K != 0.002 || b.CompletionUSDPer1K != 0.004 {
		t.Errorf("demo prices: %+v %+v", a, b)
	}
	set := c.Set()
	want := []string{"demo-a", "demo-b", "demo-b", "demo-b"}
	for tr, w := range want {
		if got := set.Tiers[tr]; len(got) != 1 || got[0].Model != w {
			t.Errorf("tier %v: %+v", tiers.Tier(tr), got)
		}
	}
}

func TestInvalid(t *testing.T) {
	base := `
models:
  - {id: m, path: m.gguf}
plans: {p: {}}
tenants: [{id: t, plan: p}]
`
	cases := []struct {
		yaml, field string
	}{
		{"listen: nope\n" + base, "listen"},
		{"bogus: 1\n" + base, "field bogus not found"},
		{"ledger: {sync: never}\n" + base, "ledger.sync"},
		{"memory_budget: lots\n" + base, "memory_budget"},
		{"plans: {p: {}}\n", "models"},
		{"models: [{id: m}]\nplans: {p: {}}\n", "exactly one of path"},
		{"models: [{id: m, path: a}, {id: m, path: b}]\nplans: {p: {}}\n", "models[1].id"},
		{"models: [{id: auto, path: a}]\nplans: {p: {}}\n", "models[0].id"},
		{"models: [{id: m, upstream: {base_url: 'ftp://x'}}]\nplans: {p: {}}\n", "models[0].upstream.base_url"},
		{"models: [{id: m, path: a, prompt_usd_per_1k: -1}]\nplans: {p: {}}\n", "prices"},
		{"models: [{id: m, path: a}]\ntiers: {fast: [{model: x}]}\nplans: {p: {}}\n", "tiers.fast[0].model"},
		{"models: [{id: m, path: a}]\ntenants: [{id: t, plan: p}]\n", "plans"},
		{"models: [{id: m, path: a}]\nplans: {p: {}}\ntenants: [{id: t, plan: q}]\n", "unknown plan"},
		{"models: [{id: m, path: a}]\nplans: {p: {allowed_tiers: [huge]}}\ntenants: [{id: t, plan: p}]\n", "allowed_tiers"},
		{"demo_tenant: nobody\n" + base, "demo_tenant"},
		{"models: [{id: m, path: a, idle_timeout: soon}]\nplans: {p: {}}\n", "line 1"},
		{"engine: {mode: threads}\n" + base, "engine.mode"},
		{"models: [{id: m, path: a, worker_group: 'a b'}]\nplans: {p: {}}\n", "models[0].worker_group"},
		{"models: [{id: m, path: a, batch_chunk_tokens: -2}]\nplans: {p: {}}\n", "models[0].batch_chunk_tokens"},
		{"models: [{id: m, path: a, attention_f32_min_prompt: -2}]\nplans: {p: {}}\n", "models[0].attention_f32_min_prompt"},
		{"models: [{id: m, path: a, grammar_mask_steps: -2}]\nplans: {p: {}}\n", "models[0].grammar_mask_steps"},
		{"models: [{id: m, path: a, speculative: {ngram: true, max_draft: 65}}]\nplans: {p: {}}\n", "models[0].speculative.max_draft"},
		{"models: [{id: m, path: a, speculative: {draft_cost: 1}}]\nplans: {p: {}}\n", "models[0].speculative.draft_cost"},
		{"models: [{id: m, path: a, speculative: {ngrams: true}}]\nplans: {p: {}}\n", "field ngrams not found"},
		{"models: [{id: m, path: a, speculative: {draft_model: m}}]\nplans: {p: {}}\n", "models[0].speculative.draft_model: \"m\" is the model itself"},
		{"models: [{id: m, path: a, speculative: {draft_model: d}}]\nplans: {p: {}}\n", "models[0].speculative.draft_model: \"d\" is not an embedded model"},
		{"models: [{id: m, path: a, speculative: {draft_model: u}}, {id: u, upstream: {base_url: 'http://x'}}]\nplans: {p: {}}\n", "\"u\" is not an embedded model"},
		{"engine: {mode: workers}\nmodels: [{id: m, path: a, speculative: {draft_model: d}}, {id: d, path: b}]\nplans: {p: {}}\n", "must be in the model's worker_group"},
		{"models: [{id: m, path: a, grammar_request_steps: -2}]\nplans: {p: {}}\n", "models[0].grammar_request_steps"},
		{"models: [{id: m, path: a}]\nplans: {p: {batch_max_concurrency: -2}}\ntenants: [{id: t, plan: p}]\n", "batch_max_concurrency"},
		{"adapters: [{id: m, path: x.gguf, base: m}]\n" + base, "adapters[0].id"},
		{"adapters: [{id: '', path: x.gguf, base: m}]\n" + base, "adapters[0].id"},
		{"adapters: [{id: a, path: x.gguf, base: m}, {id: a, path: y.gguf, base: m}]\n" + base, "adapters[1].id"},
		{"adapters: [{id: a, base: m}]\n" + base, "adapters[0].path"},
		{"adapters: [{id: a, path: x.gguf, base: n}]\n" + base, "adapters[0].base"},
		{"adapters: [{id: a, path: x.gguf, base: u}]\nmodels: [{id: u, upstream: {base_url: 'http://x'}}]\nplans: {p: {}}\n", "adapters[0].base"},
		{"adapters: [{id: a, path: x.gguf, base: m, scale: .nan}]\n" + base, "adapters[0].scale"},
		{"adapters: [{id: a, path: x.gguf, base: m, tenant: nobody}]\nmodels: [{id: m, path: a}]\nplans: {p: {}}\ntenants: [{id: t, plan: p}]\n", "adapters[0].tenant"},
		{"adapters: [{id: a, path: x.gguf, base: m}]\nmodels: [{id: m, path: a}]\nplans: {p: {allowed_adapters: [b]}}\ntenants: [{id: t, plan: p}]\n", "plans.p.allowed_adapters"},
		{"adapters: [{id: a, path: x.gguf, base: m}]\nmodels: [{id: m, path: a}]\nplans: {p: {}}\ntenants: [{id: t, plan: p, overrides: {allowed_adapters: [b]}}]\n", "tenants[0].overrides.allowed_adapters"},
	}
	for _, c := range cases {
		cfg, err := Parse([]byte(c.yaml))
		if err == nil {
			err = cfg.Validate()
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%q: err = %v, want one naming %q", c.yaml, err, c.field)
		}
	}
}

// TestEngineModeAndWorkerGroups: the engine mode defaults to inprocess; workers mode
// and worker groups parse, and a model without a group is left out of the map.
func TestEngineModeAndWorkerGroups(t *testing.T) {
	c, err := Parse([]byte("models: [{id: m, path: a}]\nplans: {p: {}}\n"))
	if err != nil || c.Validate() != nil || c.Engine.Mode != ModeInProcess {
		t.Fatalf("default mode: %+v %v", c.Engine, err)
	}
	c, err = Parse([]byte("engine: {mode: workers}\nmodels: [{id: m, path: a, worker_group: small}, {id: n, path: b, worker_group: small}, {id: o, path: c}]\nplans: {p: {}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if g := c.WorkerGroups(); c.Engine.Mode != ModeWorkers || len(g) != 2 || g["m"] != "small" || g["n"] != "small" {
		t.Errorf("mode %q groups %v", c.Engine.Mode, g)
	}
}

func TestLoadNamesFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(p, []byte("listen: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p)
	if err == nil || !strings.Contains(err.Error(), "bad.yaml") || !errors.Is(err, ErrInvalid) {
		t.Errorf("Load: %v", err)
	}
}

func TestParseBytes(t *testing.T) {
	for s, want := range map[string]int64{"": 0, "1000": 1000, "4GiB": 4 << 30, "512MiB": 512 << 20, "2G": 2 << 30, "1.5KB": 1500} {
		if got, err := ParseBytes(s); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"x", "-1", "12abc", "NaN"} {
		if _, err := ParseBytes(s); err == nil {
			t.Errorf("ParseBytes(%q) accepted", s)
		}
	}
}

// FuzzParseConfig: arbitrary bytes never panic Parse or Validate, and a parsed
// configuration survives a round trip: Parse, yaml.Marshal, Parse again gives a
// configuration that marshals to the same bytes (the defaults are a fixed point,
// and every field's encoding decodes to the same value; compared as YAML so that
// NaN equals NaN and an empty list a nil one) and that Validate judges the same.
func FuzzParseConfig(f *testing.F) {
	f.Add(Example)
	f.Add(Demo)
	f.Add([]byte("models: [{id: m, path: a}]\nplans: {p: {}}\n"))
	lt, err := os.ReadFile("loadtest.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(lt)
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			return
		}
		out, err := yaml.Marshal(c)
		if err != nil {
			t.Fatalf("Marshal of a parsed configuration: %v", err)
		}
		c2, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse of its own marshalled form: %v\n%s", err, out)
		}
		out2, err := yaml.Marshal(c2)
		if err != nil {
			t.Fatalf("second Marshal: %v", err)
		}
		if !bytes.Equal(out, out2) {
			t.Fatalf("round trip changed the configuration:\n%s\nthen\n%s", out, out2)
		}
		if err1, err2 := c.Validate(), c2.Validate(); (err1 == nil) != (err2 == nil) {
			t.Fatalf("Validate: %v before the round trip, %v after", err1, err2)
		}
	})
}

// TestLoadtestConfig: configs/loadtest.yaml, which scripts/loadtest.sh serves, is valid
// and declares every tenant of the shipped load-test scenarios, whose keys the script
// exports as LMLITE_KEY_<TENANT>; the budget scenario's tenant has a small budget and
// the noisy tenant limits of its own.
func TestLoadtestConfig(t *testing.T) {
	c, err := Load("loadtest.yaml")
	if err != nil {
		t.Fatal(err)
	}
	book, err := c.Book()
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("../loadtest/scenarios/*.yaml")
	if len(files) == 0 {
		t.Fatal("no scenarios found")
	}
	for _, f := range files {
		s, err := loadtest.LoadScenario(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, tn := range s.Tenants {
			if _, ok := book.Resolve(tn.Name); !ok {
				t.Errorf("%s: tenant %q is not in loadtest.yaml", f, tn.Name)
			}
			if want := "LMLITE_KEY_" + strings.ToUpper(strings.ReplaceAll(tn.Name, "-", "_")); tn.APIKeyEnv != want || tn.APIKey != "" {
				t.Errorf("%s: tenant %q: api_key_env %q, api_key %q; want %s and no api_key", f, tn.Name, tn.APIKeyEnv, tn.APIKey, want)
			}
		}
	}
	if p, _ := book.Resolve("small-budget"); p.DailyBudget <= 0 || p.DailyBudget > money.USD(0.01) {
		t.Errorf("small-budget: daily budget %v", p.DailyBudget)
	}
	if p, _ := book.Resolve("noisy"); p.RequestsPerSecond <= 0 || p.MaxConcurrency <= 0 {
		t.Errorf("noisy: %+v", p)
	}
}

// TestTierListsAnAdapter: a tier may list an adapter's id (priced as its base); an
// id that is neither a model nor an adapter is refused, naming the field.
func TestTierListsAnAdapter(t *testing.T) {
	const yaml = `
models:
  - {id: base, path: /m.gguf, prompt_usd_per_1k: 0.001, completion_usd_per_1k: 0.003}
adapters:
  - {id: ft-0, path: /a.gguf, base: base}
tiers:
  deep: [{model: TIER_ID, quality: 0.8}]
plans: {p: {}}
tenants: [{id: t, plan: p}]
`
	c, err := Parse([]byte(strings.ReplaceAll(yaml, "TIER_ID", "ft-0")))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := c.Set().Tiers[tiers.Deep]; len(got) != 1 || got[0].Model != "ft-0" || got[0].Price.CompletionPer1K != money.USD(0.003) {
		t.Errorf("deep tier: %+v", got)
	}
	c, err = Parse([]byte(strings.ReplaceAll(yaml, "TIER_ID", "ft-9")))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "tiers.deep[0].model") {
		t.Errorf("a tier naming an unknown id: %v", err)
	}
}
