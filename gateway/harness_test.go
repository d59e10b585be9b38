package gateway

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"

	"github.com/lmlite/lmlite/configs"
	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/internal/testenv"
	"github.com/lmlite/lmlite/respstore"
	"github.com/lmlite/lmlite/tenancy"
)

// testServer is a gateway on a loopback port with its own store.
type testServer struct {
	t     *testing.T
	srv   *Server
	eng   *fakeEngine
	store *tenancy.Store
	url   string // http://127.0.0.1:PORT
	keys  map[string]string
	done  chan error
}

const testConfig = `
max_body_bytes: 4096
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
  slow: {requests_per_second: 1, burst: 1}
  one: {max_concurrency: 1}
  broke: {daily_budget_usd: 0.000001}
  deep: {default_tier_mode: deep}
  twotier: {allowed_tiers: [fast, balanced]}
tenants:
  - {id: acme, plan: open}
  - {id: small, plan: small}
  - {id: slow, plan: slow}
  - {id: one, plan: one}
  - {id: broke, plan: broke}
  - {id: deep, plan: deep}
  - {id: race, plan: open, overrides: {daily_budget_usd: 0.05}}
  - {id: thin, plan: open, overrides: {daily_budget_usd: 0.0005}}
  - {id: twotier, plan: twotier}
  - {id: enough, plan: open, overrides: {daily_budget_usd: 0.0036}}
  - {id: rich, plan: open, overrides: {daily_budget_usd: 1000000, requests_per_second: 1000000, tokens_per_minute: 1000000000, max_concurrency: 1000}}
`

// startServer starts a gateway with the fake engine and the given config (models of
// kind upstream may be added by the caller through extra YAML).
func startServer(t *testing.T, yaml string, eng *fakeEngine) *testServer {
	t.Helper()
	return startServerWith(t, yaml, eng, Options{}, nil)
}

// startServerWith is startServer with options (a clock, rollups, a logger; the admin
// key is the harness's, and a nil logger discards) and, when wrap is not nil, the engine it returns for
// the fake one (to add optional abilities such as ModelLoader).
// storeOptions are the test servers' tenancy.Options: sync process, and a Bolt in
// ledger mode given as Options.Responses is the ledger's side owner, as lmlite
// serve's.
func storeOptions(opts Options) tenancy.Options {
	o := tenancy.Options{Sync: tenancy.SyncProcess}
	if rb, ok := opts.Responses.(*respstore.Bolt); ok && rb.Carries() {
		o.Side = rb
	}
	return o
}

func startServerWith(t *testing.T, yaml string, eng *fakeEngine, opts Options, wrap func(*fakeEngine) Engine) *testServer {
	t.Helper()
	return startServerIn(t, t.TempDir(), yaml, eng, opts, wrap)
}

// startServerIn is startServerWith on the data directory dir (a restart: the store
// of an earlier server there, with new keys).
func startServerIn(t *testing.T, dir, yaml string, eng *fakeEngine, opts Options, wrap func(*fakeEngine) Engine) *testServer {
	t.Helper()
	cfg := parseConfig(t, yaml, dir)
	store, err := tenancy.Open(filepath.Join(cfg.DataDir, "lmlite.db"), storeOptions(opts))
	if err != nil {
		t.Fatal(err)
	}
	var e Engine
	if eng != nil {
		e = eng
		if eng.features != nil {
			e = eng.features
		}
		if wrap != nil {
			e = wrap(eng)
		}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	opts.AdminKey = "admin-secret"
	srv, err := New(mustGatewayConfig(t, cfg), e, tenancy.New(store), opts)
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
	t.Cleanup(ts.stop)
	return ts
}

func (ts *testServer) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ts.srv.Shutdown(ctx)
	// Every admitted request settled: no concurrency slot leaked.
	for id := range ts.keys {
		if n := ts.srv.ten.InFlight(id); n != 0 {
			ts.t.Errorf("tenant %s has %d requests in flight after shutdown", id, n)
		}
	}
	ts.store.Close()
}

// client is the official OpenAI Go SDK pointed at the server, with retries off so that
// errors are seen as they are.
func (ts *testServer) client(tenant string, opts ...option.RequestOption) openai.Client {
	o := append([]option.RequestOption{
		option.WithBaseURL(ts.url + "/v1/"), option.WithAPIKey(ts.keys[tenant]), option.WithMaxRetries(0),
	}, opts...)
	return openai.NewClient(o...)
}

// ledger returns the ledger entries.
func (ts *testServer) ledger() []tenancy.Entry {
	var out []tenancy.Entry
	ts.store.Ledger(func(e tenancy.Entry) error { out = append(out, e); return nil })
	return out
}

// post sends a raw request and returns the response and its body.
func (ts *testServer) post(path, key, body string, hdr ...string) (*http.Response, string) {
	ts.t.Helper()
	req, _ := http.NewRequest("POST", ts.url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func (ts *testServer) get(path, key string) (*http.Response, string) {
	ts.t.Helper()
	req, _ := http.NewRequest("GET", ts.url+path, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// mustGatewayConfig is the gateway's Config of a validated configuration file.
func mustGatewayConfig(t testing.TB, cfg *configs.Config) Config {
	t.Helper()
	gc, err := configOf(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return gc
}

// engineServer is a gateway in front of the real embedded engine: a Block serving
// the config's models, loaded before it starts, a store with a key for each tenant,
// and the official SDK's client for the first tenant.
type engineServer struct {
	srv    *Server
	block  *engine.Block
	store  *tenancy.Store
	base   string // http://127.0.0.1:PORT
	url    string // base + "/v1"
	keys   map[string]string
	key    string        // the first tenant's
	client openai.Client // the first tenant's
}

// startEngine starts a gateway with the real engine for the config yaml, in which
// $TINY is the path of a generated tiny llama (random weights, seed 3, Q8_0) and
// $STORIES the shared stories260K. ec gives the Block's clock and logger (its models
// are the config's).
func startEngine(t *testing.T, yaml string, ec engine.Config) *engineServer {
	t.Helper()
	return startEngineWith(t, yaml, ec, Options{}, nil)
}

// startEngineWith is startEngine with the gateway's options (a clock) serving, when
// wrap is not nil, the Engine it makes of the Block (to count what the gateway asks
// of it).
func startEngineWith(t testing.TB, yaml string, ec engine.Config, opts Options, wrap func(*engine.Block) Engine) *engineServer {
	t.Helper()
	dir := t.TempDir()
	if strings.Contains(yaml, "$TINY") {
		path := filepath.Join(dir, "tiny.gguf")
		if err := os.WriteFile(path, tinyModel(t), 0o644); err != nil {
			t.Fatal(err)
		}
		yaml = strings.ReplaceAll(yaml, "$TINY", path)
	}
	// $LORA0…$LORA9: rank-16 adapters over $TINY (seeds 100…109).
	for i := range 10 {
		v := "$LORA" + strconv.Itoa(i)
		if !strings.Contains(yaml, v) {
			continue
		}
		path := filepath.Join(dir, "lora"+strconv.Itoa(i)+".gguf")
		if err := genmodel.GenerateLoRA(genmodel.LoRAOptions{Base: filepath.Join(dir, "tiny.gguf"), Rank: 16, Alpha: 16, Seed: uint64(100 + i)}, path); err != nil {
			t.Fatal(err)
		}
		yaml = strings.ReplaceAll(yaml, v, path)
	}
	if strings.Contains(yaml, "$STORIES") {
		yaml = strings.ReplaceAll(yaml, "$STORIES", testenv.SharedFile(t, "models/stories260K.gguf"))
	}
	cfg := parseConfig(t, yaml, dir)
	ec.Models = nil
	for i := range cfg.Models {
		mc := engineConfigOf(&cfg.Models[i])
		mc.Adapters = adaptersOf(cfg, mc.ID)
		ec.Models = append(ec.Models, mc)
	}
	block, err := engine.New(ec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { block.Close() })
	for _, m := range ec.Models {
		if err := block.Load(context.Background(), m.ID); err != nil {
			t.Fatal(err)
		}
	}
	store, err := tenancy.Open(filepath.Join(dir, "lmlite.db"), storeOptions(opts))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	es := &engineServer{block: block, store: store, keys: map[string]string{}}
	for _, tn := range cfg.Tenants {
		if es.keys[tn.ID], _, err = store.CreateKey(tn.ID, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	var eng Engine = block
	if wrap != nil {
		eng = wrap(block)
	}
	srv, err := New(mustGatewayConfig(t, cfg), eng, tenancy.New(store), opts)
	if err != nil {
		t.Fatal(err)
	}
	es.srv = srv
	es.base = serveLoopback(t, srv)
	es.url = es.base + "/v1"
	if len(cfg.Tenants) > 0 {
		es.key = es.keys[cfg.Tenants[0].ID]
		es.client = es.sdk(cfg.Tenants[0].ID)
	}
	return es
}

// tinyGGUF is $TINY's file, generated once for the package's tests (each writes its
// own copy): the same bytes every time (seed 3); a generation under the race
// detector took 0.6-1.5 s at load 30, which every engine test with $TINY paid.
var tinyGGUF struct {
	once sync.Once
	b    []byte
	err  error
}

// tinyModel is $TINY's bytes: a generated tiny llama (random weights, seed 3, Q8_0).
func tinyModel(t testing.TB) []byte {
	t.Helper()
	tinyGGUF.once.Do(func() {
		dir, err := os.MkdirTemp("", "lmlite-gateway-tiny-")
		if err != nil {
			tinyGGUF.err = err
			return
		}
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, "tiny.gguf")
		if tinyGGUF.err = genmodel.Generate(genmodel.Options{Arch: "llama", Preset: "tiny", Type: "q8_0", Seed: 3}, path); tinyGGUF.err == nil {
			tinyGGUF.b, tinyGGUF.err = os.ReadFile(path)
		}
	})
	if tinyGGUF.err != nil {
		t.Fatal(tinyGGUF.err)
	}
	return tinyGGUF.b
}

// sdk is the official SDK's client for tenant, retries off.
func (es *engineServer) sdk(tenant string) openai.Client {
	return openai.NewClient(option.WithBaseURL(es.url), option.WithAPIKey(es.keys[tenant]), option.WithMaxRetries(0))
}

// parseConfig parses and validates a configuration with its data directory dir.
func parseConfig(t testing.TB, yaml, dir string) *configs.Config {
	t.Helper()
	cfg, err := configs.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = dir
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// serveLoopback serves srv on a free loopback port until the test ends and returns
// its base URL (http://127.0.0.1:PORT).
func serveLoopback(t testing.TB, srv *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	return "http://" + ln.Addr().String()
}
