package main

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/lmlite/lmlite/configs"
	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/kernels"
	"github.com/lmlite/lmlite/engine/spec"
	"github.com/lmlite/lmlite/money"
)

func mustParse(t *testing.T, yaml string) *configs.Config {
	t.Helper()
	c, err := configs.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestEngineModelConfig: each field of an embedded model reaches the engine's
// ModelConfig (a pulled model's file, the batch timeout in ms, byte sizes, a
// batch_chunk_tokens of -1 as 0, speculative decoding, the device), and adapters go
// to their base model, the scale as written (0: the engine's default of 1).
func TestEngineModelConfig(t *testing.T) {
	c := mustParse(t, `
models:
  - {id: m, path: a.gguf, max_model_len: 512, max_concurrency: 3, batch_timeout_ms: 7, replicas: 2, idle_timeout: 90s, priority: 4,
     device: "gpu:1", max_queue: 9, batch_chunk_tokens: -1, kv_cache: 2MiB, kv_warm: 1KiB, adapter_memory: 3MiB, embeddings: true,
     kv_cache_type_k: q8_0, kv_cache_type_v: q4_0,
     speculative: {ngram: true, max_draft: 4, draft_cost: 0.1, ignore_prediction: true, pool: true, draft_model: n}, grammar_mask_steps: 11, grammar_request_steps: 12}
  - {id: n, pull: hf://org/repo/n.gguf, batch_chunk_tokens: 64}
  - {id: u, upstream: {base_url: 'http://x/v1'}}
adapters: [{id: x, path: x.gguf, base: m, scale: 0.5}, {id: y, path: y.gguf, base: n}, {id: z, path: z.gguf, base: m}]
plans: {p: {}}
`)
	c.Models[1].PulledPath = "/cache/blobs/sha256-n.gguf"
	got := engineModels(c)
	if len(got) != 2 || got[0].ID != "m" || got[1].ID != "n" {
		t.Fatalf("embedded models: %+v", got)
	}
	m, n := got[0], got[1]
	if m.Path != "a.gguf" || m.MaxModelLen != 512 || m.MaxModelConcurrency != 3 || m.BatchExecuteTimeout != 7*time.Millisecond ||
		m.Replicas != 2 || m.IdleTimeout != 90*time.Second || m.Priority != 4 || m.Device != "gpu:1" || m.MaxQueue != 9 ||
		m.BatchChunkTokens != 0 || m.KVCacheBytes != 2<<20 || m.KVWarmBytes != 1<<10 || m.AdapterMemory != 3<<20 || !m.Embeddings ||
		m.KVCacheTypeK != "q8_0" || m.KVCacheTypeV != "q4_0" ||
		m.GrammarMaskSteps != 11 || m.GrammarRequestSteps != 12 {
		t.Errorf("m: %+v", m)
	}
	if s := m.Speculative; s != (spec.Config{NGram: true, MaxDraft: 4, DraftCost: 0.1, IgnorePrediction: true, Pool: true, DraftModel: "n"}) {
		t.Errorf("m's speculative: %+v", s)
	}
	if n.Path != "/cache/blobs/sha256-n.gguf" || n.BatchChunkTokens != 64 || n.Speculative.On() || !n.Speculative.Measure || n.Embeddings || n.KVCacheTypeK != "" || n.KVCacheTypeV != "" {
		t.Errorf("n: %+v", n)
	}
	if a := m.Adapters; len(a) != 2 || a[0].ID != "x" || a[0].Path != "x.gguf" || a[0].Scale != 0.5 || a[1].ID != "z" || a[1].Scale != 0 {
		t.Errorf("adapters of m: %+v", a)
	}
	if a := n.Adapters; len(a) != 1 || a[0].ID != "y" {
		t.Errorf("adapters of n: %+v", a)
	}
}

// TestKVCacheTypesAreTheKernels: the KV cache types the file accepts (configs,
// which knows no engine package) are the ones engine/kernels reads, so a type
// added to the kernels is added to the file too.
func TestKVCacheTypesAreTheKernels(t *testing.T) {
	if !slices.Equal(configs.KVCacheTypes, kernels.KVTypeNames) {
		t.Errorf("configs.KVCacheTypes = %v, kernels.KVTypeNames = %v", configs.KVCacheTypes, kernels.KVTypeNames)
	}
}

// TestGatewayConfig: the file's limits, models (slots, prices, upstreams with their
// key from the environment), adapters, tiers and tenants' plans reach the gateway's
// Config.
func TestGatewayConfig(t *testing.T) {
	t.Setenv("TEST_UPSTREAM_KEY", "sk-up")
	c := mustParse(t, `
max_body_bytes: 2048
max_in_flight: 7
write_timeout: 3s
max_keep_alive: 1h
min_keep_alive: 10s
models:
  - {id: m, path: a.gguf, max_model_len: 256, max_concurrency: 4, replicas: 2, max_queue: 5, prompt_usd_per_1k: 0.5, completion_usd_per_1k: 1, idle_timeout: 2m}
  - {id: u, upstream: {base_url: 'http://x/v1', api_key_env: TEST_UPSTREAM_KEY, timeout: 9s}, owned_by: them}
  - {id: v, upstream: {base_url: 'http://y/v1', model: other}}
adapters: [{id: x, path: x.gguf, base: m, tenant: acme}, {id: y, path: y.gguf, base: m}]
tiers:
  fast: [{model: m, quality: 0.5}]
plans: {p: {}}
tenants: [{id: acme, plan: p}]
`)
	gc, err := gatewayConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	if gc.MaxBodyBytes != 2048 || gc.MaxInFlight != 7 || gc.WriteTimeout != 3*time.Second || gc.MaxKeepAlive != time.Hour || gc.MinKeepAlive != 10*time.Second {
		t.Errorf("limits: %+v", gc)
	}
	if len(gc.Models) != 3 {
		t.Fatalf("models: %+v", gc.Models)
	}
	m, u, v := gc.Models[0], gc.Models[1], gc.Models[2]
	if m.ID != "m" || m.MaxModelLen != 256 || m.Slots != 8 || m.MaxQueue != 5 || m.Upstream != nil || m.IdleTimeout != 2*time.Minute ||
		m.Price.PromptPer1K != money.USD(0.5) || m.Price.CompletionPer1K != money.USD(1) {
		t.Errorf("m: %+v", m)
	}
	if u.Upstream == nil || u.Upstream.BaseURL != "http://x/v1" || u.Upstream.Model != "u" || u.Upstream.APIKey != "sk-up" || u.Upstream.Timeout != 9*time.Second || u.OwnedBy != "them" {
		t.Errorf("u: %+v %+v", u, u.Upstream)
	}
	if v.Upstream == nil || v.Upstream.Model != "other" || v.Upstream.APIKey != "" {
		t.Errorf("v: %+v %+v", v, v.Upstream)
	}
	if got := gc.Tiers.Tiers[0]; len(got) != 1 || got[0].Model != "m" {
		t.Errorf("fast tier: %+v", got)
	}
	if a := gc.Adapters; len(a) != 2 || a[0].ID != "x" || a[0].Base != "m" || a[0].Tenant != "acme" || a[1].ID != "y" || a[1].Tenant != "" {
		t.Errorf("adapters: %+v", a)
	}
	if gc.Book == nil {
		t.Fatal("no policy book")
	}
	if _, ok := gc.Book.Resolve("acme"); !ok {
		t.Error("acme's plan not resolved")
	}
}

// TestDemoModelsOf: a generated demo model keeps its engine settings in the file's
// terms, so that engineModels gives them back.
func TestDemoModelsOf(t *testing.T) {
	c, err := configs.Parse(configs.Demo)
	if err != nil {
		t.Fatal(err)
	}
	gen := []engine.ModelConfig{
		{ID: demoStoriesID, Path: "stories.gguf", MaxModelLen: 512, MaxModelConcurrency: 2, BatchExecuteTimeout: time.Millisecond,
			Replicas: 1, IdleTimeout: time.Hour, Priority: 1, Embeddings: true},
		{ID: demoLongContextID, Path: "qwen3.gguf", MaxModelLen: 2048, MaxModelConcurrency: 4, BatchExecuteTimeout: 3 * time.Millisecond,
			Replicas: 2, IdleTimeout: time.Minute, Priority: 2},
	}
	c.AddDemoModels(demoModelsOf(gen), 0.001, 0.002)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	back := engineModels(c)
	if len(back) != len(gen) {
		t.Fatalf("%d models back, %d generated", len(back), len(gen))
	}
	// What demoModelsOf carries; the rest (queue, chunk) is the file's defaults.
	kept := func(mc engine.ModelConfig) engine.ModelConfig {
		return engine.ModelConfig{ID: mc.ID, Path: mc.Path, MaxModelLen: mc.MaxModelLen, MaxModelConcurrency: mc.MaxModelConcurrency,
			BatchExecuteTimeout: mc.BatchExecuteTimeout, Replicas: mc.Replicas, IdleTimeout: mc.IdleTimeout, Priority: mc.Priority,
			Embeddings: mc.Embeddings}
	}
	for i := range gen {
		if !reflect.DeepEqual(kept(back[i]), gen[i]) {
			t.Errorf("model %d: %+v, generated %+v", i, back[i], gen[i])
		}
	}
}
