// Package configs holds lmlite's configuration file format (one YAML file: listen
// address, data directory, models, tiers, plans, tenants and prices), its validation,
// and the documented example configurations (example.yaml, demo.yaml).
//
// Parse decodes strictly (an unknown key is an error, so a typo never passes
// silently) and fills in defaults; Validate checks the whole file once at start-up
// and returns one clear error naming the field. YAML is parsed with gopkg.in/yaml.v3,
// the well-kept standard for Go, which reports line numbers and unknown fields.
//
// The file's format stops here: configs imports neither the engine nor the gateway,
// and cmd/lmlite converts a validated Config into the engine's ModelConfigs and the
// gateway's Config (cmd/lmlite/config.go).
package configs

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/lmlite/lmlite/money"
	"github.com/lmlite/lmlite/policies"
	"github.com/lmlite/lmlite/pull"
	"github.com/lmlite/lmlite/tiers"
)

// Demo is the embedded default configuration that `lmlite serve` uses without --config
// (`make run`): no models (demo models are generated into the data directory), one
// demo tenant.
//
//go:embed demo.yaml
var Demo []byte

// Example is the documented example configuration.
//
//go:embed example.yaml
var Example []byte

// Config is the whole configuration file. The zero value of each field takes the
// default written beside it.
type Config struct {
	Listen          string        `yaml:"listen"`           // "127.0.0.1:8080"
	DataDir         string        `yaml:"data_dir"`         // "data"; the ledger, keys and demo models live here
	MaxBodyBytes    int           `yaml:"max_body_bytes"`   // 1 MiB; larger request bodies answer 413
	MemoryBudget    string        `yaml:"memory_budget"`    // bytes for the embedded models ("4GiB"); "": no limit
	MaxInFlight     int           `yaml:"max_in_flight"`    // requests in flight before 503; 1024
	MaxKeepAlive    time.Duration `yaml:"max_keep_alive"`   // the longest a request's lmlite.keep_alive keeps a model loaded; 0: its idle_timeout
	MinKeepAlive    time.Duration `yaml:"min_keep_alive"`   // the shortest keep_alive a plan with allow_short_keep_alive may ask; 30s
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"` // how long SIGTERM waits for in-flight requests; 30s
	WriteTimeout    time.Duration `yaml:"write_timeout"`    // how long a write to a client may make no progress (it stopped reading) before its connection closes and its stream is cancelled and settled; 30s
	AdminKeyEnv     string        `yaml:"admin_key_env"`    // env var holding the admin key; "LMLITE_ADMIN_KEY"
	MetricsKeyEnv   string        `yaml:"metrics_key_env"`  // env var holding the bearer token GET /metrics requires (unset or empty: `lmlite serve` refuses to start); "": open
	DemoTenant      string        `yaml:"demo_tenant"`      // tenant whose key is made on first run and printed; "": none (see Plans)
	Ledger          Ledger        `yaml:"ledger"`
	Engine          Engine        `yaml:"engine"`
	Redis           *Redis        `yaml:"redis"` // nil: every store in-process (configs/redis.go)

	Models []Model `yaml:"models"`
	// Adapters are LoRA adapters over embedded models (llama.cpp's GGUF adapter
	// format). A client names one by its id as a request's "model"; the engine
	// applies it per request (engine.Request.Adapters) and loads it on demand within
	// its base's adapter_memory budget.
	Adapters []Adapter `yaml:"adapters"`
	Tiers    Tiers     `yaml:"tiers"` // none: clients name models by id ("auto" and "tier:…" are refused)
	// A file with neither plans nor tenants gets the plan "default" (no limits) and the
	// tenant "default" on it, which is also the demo tenant (its key is made on the first
	// run and printed) unless demo_tenant says otherwise.
	Plans   map[string]policies.Plan `yaml:"plans"`
	Tenants []policies.Tenant        `yaml:"tenants"`
}

// DefaultTenant is the tenant (and plan) of a configuration that declares none.
const DefaultTenant = "default"

// Ledger configures the usage ledger.
type Ledger struct {
	// Sync is "fsync" (default: every group of settled requests is fsynced before they
	// are acknowledged; survives power loss) or "process" (written to the OS before
	// acknowledging, fsynced in the background; survives the process being killed).
	// Stored responses (/v1/responses with store: true, in bbolt) follow it: each
	// one is a side record of its request's ledger write (one write, and with
	// "fsync" one fsync, for both). The ledger's files then hold side records that
	// binaries before respstore's ledger mode cannot read: shut down cleanly before
	// running an older binary on the same data directory.
	Sync string `yaml:"sync"`
}

// Engine configures the embedded engine.
type Engine struct {
	// Mode is "inprocess" (default: the models run in the server's process) or
	// "workers" (each model, or each worker_group, runs in a child `lmlite worker`
	// process, supervised and restarted; see engine/worker).
	Mode string `yaml:"mode"`
}

// Engine modes.
const (
	ModeInProcess = "inprocess"
	ModeWorkers   = "workers"
)

// DefaultBatchChunk is a model's batch_chunk_tokens when the file sets none: on
// the tiny load-test model it took the interactive TTFT p99 beside a batch job from
// ×1.38–1.86 of its value alone (median 1.56) to ×1.17–1.37 (median 1.23), at no
// cost in the job's lines (docs/PERFORMANCE.md, issue 14).
const DefaultBatchChunk = 16

// Speculative is a model's speculative: block, which cmd/lmlite hands to the
// engine as its engine/spec Config (the field comments there say what each does).
type Speculative struct {
	NGram            bool    `yaml:"ngram"`             // draft by prompt lookup over the sequence's prompt and output
	MaxDraft         int     `yaml:"max_draft"`         // most tokens drafted per step; 0: 8
	DraftCost        float64 `yaml:"draft_cost"`        // a drafted position's share of a decode step's cost; 0: measured online
	IgnorePrediction bool    `yaml:"ignore_prediction"` // do not draft from requests' predictions
	Pool             bool    `yaml:"pool"`              // draft from the tenant's recent outputs
	DraftModel       string  `yaml:"draft_model"`       // another embedded model whose greedy tokens draft; "": none
}

// KVCacheTypes are the names kv_cache_type_k and kv_cache_type_v take besides ""
// (f16): llama.cpp's, as engine/kernels reads them (cmd/lmlite's
// TestKVCacheTypesAreTheKernels checks that the two lists agree).
var KVCacheTypes = []string{"f16", "q8_0", "q4_0"}

// Model is one model: embedded (path to a GGUF file) or upstream (another
// OpenAI-compatible server).
type Model struct {
	ID       string    `yaml:"id"`       // the name clients use in "model"
	Path     string    `yaml:"path"`     // GGUF file for the embedded engine
	Pull     string    `yaml:"pull"`     // or a reference `lmlite pull` takes (hf://ORG/REPO/FILE.gguf, https://…, a catalogue name), resolved at start from the cache in data_dir/pull
	Upstream *Upstream `yaml:"upstream"` // or an upstream server

	// PulledPath is the cached file of Pull, set by the server at start (not in the file).
	PulledPath string `yaml:"-"`

	MaxModelLen    int           `yaml:"max_model_len"`    // prompt + output tokens; 0: the model's own (embedded) or unchecked (upstream)
	MaxConcurrency int           `yaml:"max_concurrency"`  // sequences in one batch; 0: 8
	BatchTimeoutMS int           `yaml:"batch_timeout_ms"` // run a batch that is not full after this long; 0: single-request mode
	Replicas       int           `yaml:"replicas"`         // 0: 1
	IdleTimeout    time.Duration `yaml:"idle_timeout"`     // unload after this long idle; 0: 5m; negative: never
	Priority       int           `yaml:"priority"`         // memory-lease priority
	Device         string        `yaml:"device"`           // whose memory it leases: "host" (default) or "gpu:N" (a GPU NVML finds); execution stays on the CPU
	MaxQueue       int           `yaml:"max_queue"`        // requests queued or running before it counts as overloaded (an embedded model's engine refuses more: engine.ModelConfig.MaxQueue); 0: 16 × max_concurrency

	// BatchChunk is how many prompt tokens batch lines prefill in one step, all
	// together, while interactive traffic is there (an interactive request came in
	// the last 10 s): a shorter step for an interactive request arriving during it to
	// wait out. Without interactive traffic batch prefill runs at the step budget.
	// 0: DefaultBatchChunk; -1: no cap but the step's.
	BatchChunk int `yaml:"batch_chunk_tokens"`

	// AttnF32MinPrompt: requests whose prompt has at least this many tokens run
	// float32 attention (faster prefill and decoding; docs/PERFORMANCE.md). 0 (the
	// default): 64, llama.cpp's own threshold, where the float32 kernels have their
	// assembly (AVX-512, head size 64), none elsewhere; -1: none, every request takes
	// llama.cpp's binary16 one-query numerics.
	AttnF32MinPrompt int `yaml:"attention_f32_min_prompt"`

	// Speculative decoding (engine/spec), off by default: with ngram on, a decoding
	// sequence drafts up to max_draft tokens (default 8) from its own prompt and
	// output (prompt lookup) and the batch step verifies them; draft_cost is a
	// drafted position's share of a decode step's cost, against which the draft
	// length is chosen (default: measured online from the replica's decode steps); draft_model names another embedded model with the
	// same vocabulary whose greedy tokens draft too (in workers mode, in this
	// model's worker_group). The output is bit-identical to plain decoding.
	Speculative Speculative `yaml:"speculative"`

	// The grammar budget of a structured-output request (response_format's schema, a
	// tool call's grammar), in steps of token-mask work (about 35 ns each): one
	// token's mask, and the whole request. A request past either ends with 400
	// grammar_budget_exceeded. 0: engine.DefaultGrammarMaskSteps (2^20),
	// engine.DefaultGrammarRequestSteps (2^25); -1: no limit.
	GrammarMaskSteps    int64 `yaml:"grammar_mask_steps"`
	GrammarRequestSteps int64 `yaml:"grammar_request_steps"`

	KVCache            string `yaml:"kv_cache"`             // hot KV pool per replica ("512MiB"); "": room for max_concurrency sequences of max_model_len
	KVWarm             string `yaml:"kv_warm"`              // warm tier per replica for blocks evicted from hot ("2GiB"); "": none
	KVWarmFile         string `yaml:"kv_warm_file"`         // keep the warm tier in this file instead of host memory; it survives unloads and restarts
	AdapterMemory      string `yaml:"adapter_memory"`       // LoRA adapters (adapters:) loaded at once over it ("256MiB"), least recently used unloaded first; "": all of its adapters
	KVCacheTypeK       string `yaml:"kv_cache_type_k"`      // how the KV cache stores K: f16 (""), q8_0 or q4_0 (llama.cpp's -ctk); the budgets count the stored bytes
	KVCacheTypeV       string `yaml:"kv_cache_type_v"`      // how it stores V (llama.cpp's -ctv)
	DisablePrefixCache bool   `yaml:"disable_prefix_cache"` // never reuse a cached prompt prefix
	Embeddings         bool   `yaml:"embeddings"`           // serve /v1/embeddings from it (on anyway when the GGUF declares a pooling type)
	WorkerGroup        string `yaml:"worker_group"`         // engine mode workers: models of one group share a worker process; "": the model's own

	OwnedBy string `yaml:"owned_by"` // the owned_by of /v1/models; "": "lmlite"

	PromptUSDPer1K     float64 `yaml:"prompt_usd_per_1k"`     // price of 1000 prompt tokens
	CompletionUSDPer1K float64 `yaml:"completion_usd_per_1k"` // price of 1000 completion tokens
}

// Upstream is an OpenAI-compatible server that serves a model.
type Upstream struct {
	BaseURL   string        `yaml:"base_url"`    // e.g. "http://127.0.0.1:8081/v1"
	Model     string        `yaml:"model"`       // the model's name there; "": the same id
	APIKeyEnv string        `yaml:"api_key_env"` // env var holding its API key; "": none
	Timeout   time.Duration `yaml:"timeout"`     // per request; 10m
}

// Tiers maps each tier to its models.
type Tiers struct {
	Fast     []TierModel `yaml:"fast"`
	Balanced []TierModel `yaml:"balanced"`
	Deep     []TierModel `yaml:"deep"`
	Max      []TierModel `yaml:"max"`
}

// TierModel is one model of a tier.
type TierModel struct {
	Model   string  `yaml:"model"`   // a model's id, or an adapter's (it runs on its base with the adapter)
	Quality float64 `yaml:"quality"` // higher is better; the router prefers the best that fits
}

// ErrInvalid is wrapped by every configuration error.
var ErrInvalid = errors.New("configs: invalid configuration")

// Load reads, parses and validates the file at path.
func Load(path string) (*Config, error) {
	c, err := ParseFile(path)
	if err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseFile reads and parses the file at path without validating it.
func ParseFile(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("configs: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Parse decodes a configuration strictly and fills in defaults. It does not validate.
func Parse(data []byte) (*Config, error) {
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		// The text is only shortened (yaml's "yaml: " prefix would follow ours); the
		// kind is ErrInvalid; no caller needs yaml's own error, whose *TypeError holds
		// only messages.
		return nil, fmt.Errorf("%w: %s", ErrInvalid, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	c.defaults()
	c.redisDefaults(os.Getenv)
	return &c, nil
}

func (c *Config) defaults() {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:8080"
	}
	if c.DataDir == "" {
		c.DataDir = "data"
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 1 << 20
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 1024
	}
	if c.MinKeepAlive == 0 {
		c.MinKeepAlive = 30 * time.Second
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 30 * time.Second
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 30 * time.Second
	}
	if c.AdminKeyEnv == "" {
		c.AdminKeyEnv = "LMLITE_ADMIN_KEY"
	}
	if c.Ledger.Sync == "" {
		c.Ledger.Sync = "fsync"
	}
	if c.Engine.Mode == "" {
		c.Engine.Mode = ModeInProcess
	}
	if len(c.Plans) == 0 && len(c.Tenants) == 0 {
		c.Plans = map[string]policies.Plan{DefaultTenant: {}}
		c.Tenants = []policies.Tenant{{ID: DefaultTenant, Plan: DefaultTenant}}
		if c.DemoTenant == "" {
			c.DemoTenant = DefaultTenant
		}
	}
	for i := range c.Models {
		m := &c.Models[i]
		if m.MaxConcurrency == 0 {
			m.MaxConcurrency = 8
		}
		if m.Replicas == 0 {
			m.Replicas = 1
		}
		if m.MaxQueue == 0 {
			m.MaxQueue = 16 * m.MaxConcurrency
		}
		if m.BatchChunk == 0 {
			m.BatchChunk = DefaultBatchChunk
		}
		if u := m.Upstream; u != nil {
			if u.Model == "" {
				u.Model = m.ID
			}
			if u.Timeout == 0 {
				u.Timeout = 10 * time.Minute
			}
		}
	}
}

// Validate checks the whole configuration and returns the first problem, naming its
// field. It needs at least one model.
func (c *Config) Validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalid, field, fmt.Sprintf(format, args...))
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return bad("listen", "%q is not host:port", c.Listen)
	}
	if c.MaxKeepAlive < 0 {
		return bad("max_keep_alive", "%v is negative", c.MaxKeepAlive)
	}
	if c.MinKeepAlive < 0 {
		return bad("min_keep_alive", "%v is negative", c.MinKeepAlive)
	}
	if c.MaxBodyBytes < 1024 {
		return bad("max_body_bytes", "%d is below 1024", c.MaxBodyBytes)
	}
	if _, err := ParseBytes(c.MemoryBudget); err != nil {
		return bad("memory_budget", "%v", err)
	}
	if c.MaxInFlight < 1 {
		return bad("max_in_flight", "must be ≥ 1")
	}
	if c.ShutdownTimeout < 0 {
		return bad("shutdown_timeout", "must be ≥ 0")
	}
	if c.WriteTimeout < 0 {
		return bad("write_timeout", "must be ≥ 0")
	}
	if c.Ledger.Sync != "fsync" && c.Ledger.Sync != "process" {
		return bad("ledger.sync", "%q is not fsync or process", c.Ledger.Sync)
	}
	if c.Engine.Mode != ModeInProcess && c.Engine.Mode != ModeWorkers {
		return bad("engine.mode", "%q is not inprocess or workers", c.Engine.Mode)
	}
	if c.Redis != nil {
		if err := c.Redis.validate(); err != nil {
			return err
		}
	}
	if len(c.Models) == 0 {
		return bad("models", "no models configured")
	}
	ids := map[string]bool{}
	for i, m := range c.Models {
		f := fmt.Sprintf("models[%d]", i)
		switch {
		case m.ID == "" || strings.ContainsAny(m.ID, " \t\n") || m.ID == "auto" || strings.HasPrefix(m.ID, "tier:"):
			return bad(f+".id", "%q must be non-empty, without spaces, and not \"auto\" or \"tier:…\"", m.ID)
		case ids[m.ID]:
			return bad(f+".id", "model %q declared twice", m.ID)
		case btoi(m.Path != "")+btoi(m.Pull != "")+btoi(m.Upstream != nil) != 1:
			return bad(f, "model %q needs exactly one of path or pull (embedded) or upstream", m.ID)
		case m.MaxModelLen < 0:
			return bad(f+".max_model_len", "must be ≥ 0")
		case m.MaxConcurrency < 1:
			return bad(f+".max_concurrency", "must be ≥ 1")
		case m.BatchTimeoutMS < 0:
			return bad(f+".batch_timeout_ms", "must be ≥ 0")
		case m.Replicas < 1:
			return bad(f+".replicas", "must be ≥ 1")
		case m.MaxQueue < 1:
			return bad(f+".max_queue", "must be ≥ 1")
		case m.AttnF32MinPrompt < -1:
			return bad(f+".attention_f32_min_prompt", "must be ≥ 1, 0 (the default) or -1 (off)")
		case m.Speculative.MaxDraft < 0 || m.Speculative.MaxDraft > 64:
			return bad(f+".speculative.max_draft", "must be between 1 and 64, or 0 (the default, 8)")
		case m.Speculative.DraftCost < 0 || m.Speculative.DraftCost >= 1:
			return bad(f+".speculative.draft_cost", "must be in [0, 1) (0: measured online)")
		case m.BatchChunk < -1:
			return bad(f+".batch_chunk_tokens", "must be ≥ 1, or -1 for no cap")
		case m.GrammarMaskSteps < -1:
			return bad(f+".grammar_mask_steps", "must be ≥ 1, 0 (the default) or -1 (no limit)")
		case m.GrammarRequestSteps < -1:
			return bad(f+".grammar_request_steps", "must be ≥ 1, 0 (the default) or -1 (no limit)")
		case !(m.PromptUSDPer1K >= 0) || !(m.CompletionUSDPer1K >= 0):
			return bad(f, "prices must be ≥ 0")
		}
		if m.WorkerGroup != "" && (m.Upstream != nil || strings.ContainsAny(m.WorkerGroup, " \t\n/")) {
			return bad(f+".worker_group", "%q must be without spaces or slashes, on an embedded model", m.WorkerGroup)
		}
		if m.Pull != "" {
			if _, err := pull.Resolve(m.Pull, "", nil); err != nil {
				return bad(f+".pull", "%v", err)
			}
		}
		if _, err := ParseBytes(m.KVCache); err != nil {
			return bad(f+".kv_cache", "%v", err)
		}
		if _, err := ParseBytes(m.AdapterMemory); err != nil {
			return bad(f+".adapter_memory", "%v", err)
		}
		if _, err := ParseBytes(m.KVWarm); err != nil {
			return bad(f+".kv_warm", "%v", err)
		}
		if t := m.KVCacheTypeK; t != "" && !slices.Contains(KVCacheTypes, t) {
			return bad(f+".kv_cache_type_k", "%q is not a KV cache type (want one of %v)", t, KVCacheTypes)
		}
		if t := m.KVCacheTypeV; t != "" && !slices.Contains(KVCacheTypes, t) {
			return bad(f+".kv_cache_type_v", "%q is not a KV cache type (want one of %v)", t, KVCacheTypes)
		}
		if (m.KVCacheTypeK != "" || m.KVCacheTypeV != "") && m.Upstream != nil {
			return bad(f, "kv_cache_type_k and kv_cache_type_v are for embedded models")
		}
		if n, ok := strings.CutPrefix(m.Device, "gpu:"); m.Device != "" && m.Device != "host" && (!ok || n == "" || strings.Trim(n, "0123456789") != "") {
			return bad(f+".device", "%q is neither host nor gpu:N", m.Device)
		}
		if u := m.Upstream; u != nil {
			pu, err := url.Parse(u.BaseURL)
			if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
				return bad(f+".upstream.base_url", "%q is not an http(s) URL", u.BaseURL)
			}
			if u.Timeout < 0 {
				return bad(f+".upstream.timeout", "must be > 0")
			}
		}
		ids[m.ID] = true
	}
	if err := c.validateAdapters(ids, bad); err != nil {
		return err
	}
	if err := c.validateDraftModels(bad); err != nil {
		return err
	}
	inTier := map[string]bool{}
	for ti, list := range c.Tiers.list() {
		for j, tm := range list {
			f := fmt.Sprintf("tiers.%s[%d]", tiers.Tier(ti), j)
			if !ids[tm.Model] && !slices.ContainsFunc(c.Adapters, func(a Adapter) bool { return a.ID == tm.Model }) {
				return bad(f+".model", "unknown model or adapter %q", tm.Model)
			}
			if inTier[tm.Model+"\x00"+tiers.Tier(ti).String()] {
				return bad(f+".model", "model %q listed twice in the tier", tm.Model)
			}
			inTier[tm.Model+"\x00"+tiers.Tier(ti).String()] = true
			if !(tm.Quality >= 0) {
				return bad(f+".quality", "must be ≥ 0")
			}
		}
	}
	if len(c.Plans) == 0 {
		return bad("plans", "no plans configured")
	}
	if _, err := policies.NewBook(c.Plans, c.Tenants, func(id string) bool { return ids[id] }); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if c.DemoTenant != "" {
		found := false
		for _, t := range c.Tenants {
			found = found || t.ID == c.DemoTenant
		}
		if !found {
			return bad("demo_tenant", "unknown tenant %q", c.DemoTenant)
		}
	}
	return nil
}

// HasTiers says whether any tier has a model, i.e. whether "auto" and "tier:…" mean
// anything.
func (c *Config) HasTiers() bool {
	for _, l := range c.Tiers.list() {
		if len(l) > 0 {
			return true
		}
	}
	return false
}

// TierNames lists the tiers that have models ("fast", …).
func (c *Config) TierNames() []string {
	var out []string
	for ti, l := range c.Tiers.list() {
		if len(l) > 0 {
			out = append(out, tiers.Tier(ti).String())
		}
	}
	return out
}

func (t *Tiers) list() [tiers.NumTiers][]TierModel {
	return [tiers.NumTiers][]TierModel{t.Fast, t.Balanced, t.Deep, t.Max}
}

// Set builds the TierSet with the models' prices; a tier may list an adapter,
// priced as its base.
func (c *Config) Set() *tiers.Set {
	price := map[string]money.Price{}
	for _, m := range c.Models {
		price[m.ID] = m.Price()
	}
	for _, a := range c.Adapters {
		price[a.ID] = price[a.Base]
	}
	var s tiers.Set
	for ti, list := range c.Tiers.list() {
		for _, tm := range list {
			s.Tiers[ti] = append(s.Tiers[ti], tiers.Candidate{Model: tm.Model, Quality: tm.Quality, Price: price[tm.Model]})
		}
	}
	return &s
}

// Book resolves the tenants' policies.
func (c *Config) Book() (*policies.Book, error) {
	ids := map[string]bool{}
	for _, m := range c.Models {
		ids[m.ID] = true
	}
	return policies.NewBook(c.Plans, c.Tenants, func(id string) bool { return ids[id] })
}

// Price returns the model's prices.
func (m *Model) Price() money.Price {
	return money.Price{PromptPer1K: money.USD(m.PromptUSDPer1K), CompletionPer1K: money.USD(m.CompletionUSDPer1K)}
}

// Embedded says whether the model runs in the embedded engine (path or pull).
func (m *Model) Embedded() bool { return m.Upstream == nil }

// File is the model's GGUF file: its path, or the pulled file once the server has
// resolved Pull.
func (m *Model) File() string {
	if m.Path != "" {
		return m.Path
	}
	return m.PulledPath
}

// Adapter is one LoRA adapter of the configuration.
type Adapter struct {
	ID    string  `yaml:"id"`    // its name, unique among models and adapters
	Path  string  `yaml:"path"`  // the adapter's GGUF file (llama.cpp's format: convert_lora_to_gguf.py, lmlite gen-model --lora)
	Base  string  `yaml:"base"`  // the id of the embedded model it adapts
	Scale float32 `yaml:"scale"` // the user scale (times the adapter's alpha/rank); 0: 1
	// Tenant, when set, makes the adapter private to that tenant: to every other
	// tenant it does not exist (404 in every API, absent from /v1/models).
	Tenant string `yaml:"tenant"`
}

// validateAdapters checks the adapters against the models' ids (models holds
// them); bad formats the error.
// validateDraftModels checks each speculative.draft_model: another embedded model of
// the config (the engine checks their vocabularies when it starts), on an embedded
// model, and in workers mode in the model's worker_group (a worker's engine runs
// both).
func (c *Config) validateDraftModels(bad func(field, format string, args ...any) error) error {
	for i, m := range c.Models {
		d := m.Speculative.DraftModel
		if d == "" {
			continue
		}
		f := fmt.Sprintf("models[%d].speculative.draft_model", i)
		k := slices.IndexFunc(c.Models, func(o Model) bool { return o.ID == d })
		switch {
		case !m.Embedded():
			return bad(f, "only an embedded model has a draft model")
		case d == m.ID:
			return bad(f, "%q is the model itself", d)
		case k < 0 || !c.Models[k].Embedded():
			return bad(f, "%q is not an embedded model of this config", d)
		case c.Engine.Mode == ModeWorkers && (m.WorkerGroup == "" || c.Models[k].WorkerGroup != m.WorkerGroup):
			return bad(f, "in workers mode, %q must be in the model's worker_group (set one on both)", d)
		}
	}
	return nil
}

func (c *Config) validateAdapters(models map[string]bool, bad func(field, format string, args ...any) error) error {
	embedded := map[string]bool{}
	for _, m := range c.Models {
		if m.Embedded() {
			embedded[m.ID] = true
		}
	}
	seen := map[string]bool{}
	for i, a := range c.Adapters {
		f := fmt.Sprintf("adapters[%d]", i)
		switch {
		case a.ID == "" || strings.ContainsAny(a.ID, " \t\n") || a.ID == "auto" || strings.HasPrefix(a.ID, "tier:"):
			return bad(f+".id", "%q must be non-empty, without spaces, and not \"auto\" or \"tier:…\"", a.ID)
		case models[a.ID]:
			return bad(f+".id", "%q is a model's id", a.ID)
		case seen[a.ID]:
			return bad(f+".id", "adapter %q declared twice", a.ID)
		case a.Path == "":
			return bad(f+".path", "adapter %q has no path", a.ID)
		case !embedded[a.Base]:
			return bad(f+".base", "%q is not an embedded model", a.Base)
		case math.IsNaN(float64(a.Scale)) || math.IsInf(float64(a.Scale), 0):
			return bad(f+".scale", "must be a number")
		case a.Tenant != "" && !slices.ContainsFunc(c.Tenants, func(t policies.Tenant) bool { return t.ID == a.Tenant }):
			return bad(f+".tenant", "unknown tenant %q", a.Tenant)
		}
		seen[a.ID] = true
	}
	for name, p := range c.Plans {
		for _, id := range p.AllowedAdapters {
			if !seen[id] {
				return bad("plans."+name+".allowed_adapters", "unknown adapter %q", id)
			}
		}
	}
	for i, t := range c.Tenants {
		if o := t.Overrides.AllowedAdapters; o != nil {
			for _, id := range *o {
				if !seen[id] {
					return bad(fmt.Sprintf("tenants[%d].overrides.allowed_adapters", i), "unknown adapter %q", id)
				}
			}
		}
	}
	return nil
}

// WorkerGroups maps each embedded model with a worker_group to its group (the
// engine's workers mode; a model without one is a group of its own).
func (c *Config) WorkerGroups() map[string]string {
	g := map[string]string{}
	for _, m := range c.Models {
		if m.WorkerGroup != "" && m.Upstream == nil {
			g[m.ID] = m.WorkerGroup
		}
	}
	return g
}
func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// AddDemoModels adds generated embedded models to a configuration without models and,
// when it has no tiers, spreads them over the tiers from Fast up (the last model also
// serving the tiers above). The i-th gets the demo prices given times i+1.
func (c *Config) AddDemoModels(models []Model, prompt1K, completion1K float64) {
	noTiers := len(c.Tiers.Fast)+len(c.Tiers.Balanced)+len(c.Tiers.Deep)+len(c.Tiers.Max) == 0
	for i, m := range models {
		m.PromptUSDPer1K, m.CompletionUSDPer1K = prompt1K*float64(i+1), completion1K*float64(i+1)
		c.Models = append(c.Models, m)
	}
	c.defaults()
	if noTiers && len(models) > 0 {
		all := [tiers.NumTiers]*[]TierModel{&c.Tiers.Fast, &c.Tiers.Balanced, &c.Tiers.Deep, &c.Tiers.Max}
		for t := range all {
			i := min(t, len(models)-1)
			*all[t] = append(*all[t], TierModel{Model: models[i].ID, Quality: float64(i+1) / float64(len(models))})
		}
	}
}

// ParseBytes parses a byte size such as "512MiB", "4GiB", "2G" or "1000000"; "" is 0.
func ParseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	units := []struct {
		suffix string
		mul    int64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1},
	}
	mul := int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mul = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mul
			break
		}
	}
	n, err := strconv.ParseFloat(s, 64)
	if err != nil || !(n >= 0) || n*float64(mul) > 1<<62 {
		return 0, fmt.Errorf("configs: bad byte size %q", s)
	}
	return int64(n * float64(mul)), nil
}
