package gateway

import (
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/configs"
	"github.com/lmlite/lmlite/tenancy"
)

// instantUpstream is a benchmark fixture: an OpenAI-compatible endpoint that answers
// every chat completion at once with a fixed body.
func instantUpstream(b *testing.B) string {
	body := []byte(`{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBody(body)
	}}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

// BenchmarkProxyHandler runs the gateway's handler for a chat completion routed to an
// upstream ("model": "auto": auth, quotas, tier selection, budget reservation, the
// ledger in process-sync mode) against the instant upstream on loopback: its CPU and
// allocations per request. The proxy's overhead end to end, with the load generator,
// the gateway and the upstream in separate processes, is `make bench-gateway`
// (gateway/internal/gwbench; docs/PERFORMANCE.md).
func BenchmarkProxyHandler(b *testing.B) {
	up := instantUpstream(b)
	cfg, err := configs.Parse([]byte(`
ledger: {sync: process}
models:
  - {id: m, upstream: {base_url: "` + up + `/v1"}, prompt_usd_per_1k: 0.001, completion_usd_per_1k: 0.001}
tiers: {fast: [{model: m}], balanced: [{model: m}]}
plans: {p: {requests_per_second: 1000000, tokens_per_minute: 1000000000, max_concurrency: 1000, daily_budget_usd: 1000000}}
tenants: [{id: t, plan: p}]
`))
	if err != nil {
		b.Fatal(err)
	}
	cfg.DataDir = b.TempDir()
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	store, err := tenancy.Open(filepath.Join(cfg.DataDir, "lmlite.db"), tenancy.Options{Sync: tenancy.SyncProcess})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	key, _, _ := store.CreateKey("t", time.Now())
	srv, err := New(mustGatewayConfig(b, cfg), nil, tenancy.New(store), Options{Logger: slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		b.Fatal(err)
	}
	var req fasthttp.Request
	req.Header.SetMethod("POST")
	req.SetRequestURI("/v1/chat/completions")
	req.Header.Set("Authorization", "Bearer "+key)
	req.SetBody([]byte(`{"model":"auto","messages":[{"role":"user","content":"Say hello to the benchmark."}],"max_tokens":1}`))
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
	var ctx fasthttp.RequestCtx
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ctx.Init(&req, addr, nil)
		srv.handle(&ctx)
		if ctx.Response.StatusCode() != 200 {
			b.Fatalf("%d %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
}
