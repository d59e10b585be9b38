package gateway

import (
	"fmt"
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

// BenchmarkProxyServed is BenchmarkProxyHandler through the served path: the
// gateway's own listener and fasthttp server (Serve: deadlineConn, ConnState, the
// read deadlines, keep-alive connections) on loopback, with gwbench's plan (quotas,
// a budget, two tiers for "auto", ledger sync: process) and 1 or 16 clients on
// keep-alive connections, as `gwbench --conns 1,16` sends them. Its CPU time (the client and the
// instant upstream in the same process) is what issue 36's "no speed change" compares
// with the commit before it, in one process on one P: the served process's cost
// without the noise of three processes on a loaded machine.
func BenchmarkProxyServed(b *testing.B) {
	up := instantUpstream(b)
	cfg, err := configs.Parse([]byte(`
ledger: {sync: process}
max_in_flight: 4096
models:
  - {id: m, upstream: {base_url: "` + up + `/v1"}, max_model_len: 4096, prompt_usd_per_1k: 0.001, completion_usd_per_1k: 0.002}
tiers: {fast: [{model: m, quality: 1}], balanced: [{model: m, quality: 2}]}
plans:
  bench: {requests_per_second: 1000000, burst: 1000000, tokens_per_minute: 1000000000, max_concurrency: 4096, daily_budget_usd: 1000000, default_tier_mode: balanced}
tenants: [{id: bench, plan: bench}]
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
	key, _, _ := store.CreateKey("bench", time.Now())
	srv, err := New(mustGatewayConfig(b, cfg), nil, tenancy.New(store), Options{Logger: slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.http.Shutdown()
	body := []byte(`{"model":"auto","messages":[{"role":"user","content":"Say hello to the benchmark."}],"max_tokens":1}`)
	for _, conns := range []int{1, 16} {
		b.Run(fmt.Sprintf("conns=%d", conns), func(b *testing.B) {
			benchServed(b, ln.Addr().String(), key, body, conns)
		})
	}
}

// benchServed sends b.N requests from conns clients (with -test.cpu 1), each on its
// own keep-alive connection.
func benchServed(b *testing.B, addr, key string, body []byte, conns int) {
	hc := &fasthttp.HostClient{Addr: addr, MaxConns: conns}
	b.ReportAllocs()
	b.SetParallelism(conns)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var req fasthttp.Request
		var resp fasthttp.Response
		req.Header.SetMethod("POST")
		req.SetRequestURI("http://" + addr + "/v1/chat/completions")
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.SetContentType("application/json")
		req.SetBody(body)
		for pb.Next() {
			if err := hc.Do(&req, &resp); err != nil {
				b.Error(err)
				return
			}
			if resp.StatusCode() != 200 {
				b.Errorf("%d %s", resp.StatusCode(), resp.Body())
				return
			}
		}
	})
}
