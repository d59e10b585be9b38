package gateway

import (
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sort"
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

// BenchmarkProxyOverhead sends sequential chat completions (one connection) to the
// instant upstream directly and through the gateway with auth, quotas, a budget
// reservation, tier selection ("auto") and the ledger on, and reports the latency
// the gateway adds at the median and p99. docs/PERFORMANCE.md has the real runs.
func BenchmarkProxyOverhead(b *testing.B) {
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
	srv, err := New(cfg, nil, tenancy.New(store), Options{Logger: slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		b.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(ln)
	defer srv.http.Shutdown()
	body := []byte(`{"model":"auto","messages":[{"role":"user","content":"hello there"}],"max_tokens":1}`)
	c := &fasthttp.Client{}
	run := func(url string, n int) []time.Duration {
		lat := make([]time.Duration, 0, n)
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		for i := 0; i < n; i++ {
			req.Reset()
			req.SetRequestURI(url)
			req.Header.SetMethod("POST")
			req.Header.Set("Authorization", "Bearer "+key)
			req.SetBody(body)
			st := time.Now()
			if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
				b.Fatalf("%v %d %s", err, resp.StatusCode(), resp.Body())
			}
			lat = append(lat, time.Since(st))
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		return lat
	}
	run(up+"/v1/chat/completions", 200) // warm up both paths
	run("http://"+ln.Addr().String()+"/v1/chat/completions", 200)
	b.ResetTimer()
	direct := run(up+"/v1/chat/completions", b.N)
	via := run("http://"+ln.Addr().String()+"/v1/chat/completions", b.N)
	b.StopTimer()
	q := func(l []time.Duration, p float64) float64 { return float64(l[int(p*float64(len(l)-1))].Microseconds()) }
	b.ReportMetric(q(via, .5)-q(direct, .5), "added-p50-µs")
	b.ReportMetric(q(via, .99)-q(direct, .99), "added-p99-µs")
}
