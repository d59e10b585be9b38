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
	"github.com/lmlite/lmlite/respstore"
	"github.com/lmlite/lmlite/tenancy"
)

// BenchmarkHandleEndpoints measures the gateway's own work for one 1-token answer
// through each wire format over the same core (auth, decode, quotas, budget
// reservation, ledger in process-sync mode, the answer rendered) with the fake
// engine, calling the handler directly: chat/completions, /v1/responses not stored
// and stored (in memory), and Anthropic's /v1/messages (its key as a Bearer token,
// which it accepts), so that each codec's cost is read against chat's in the same run.
func BenchmarkHandleEndpoints(b *testing.B) {
	for _, c := range []struct {
		name, path, body string
		bolt             bool // stored in respstore's Bolt (process sync, as lmlite serve with ledger: {sync: process}), not in memory
	}{
		{"chat", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"Say hi"}],"max_tokens":1}`, false},
		{"responses", "/v1/responses", `{"model":"tiny","input":"Say hi","max_output_tokens":1,"store":false}`, false},
		{"responses-stored", "/v1/responses", `{"model":"tiny","input":"Say hi","max_output_tokens":1}`, false},
		{"responses-stored-bolt", "/v1/responses", `{"model":"tiny","input":"Say hi","max_output_tokens":1}`, true},
		{"messages", "/v1/messages", `{"model":"tiny","messages":[{"role":"user","content":"Say hi"}],"max_tokens":1}`, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			cfg, _ := configs.Parse([]byte(testConfig))
			cfg.DataDir = b.TempDir()
			if err := cfg.Validate(); err != nil {
				b.Fatal(err)
			}
			store, err := tenancy.Open(filepath.Join(cfg.DataDir, "lmlite.db"), tenancy.Options{Sync: tenancy.SyncProcess})
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			key, _, _ := store.CreateKey("rich", time.Now()) // quotas and budget on
			opts := Options{Logger: slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))}
			if c.bolt {
				rs, err := respstore.OpenBolt(filepath.Join(cfg.DataDir, "responses.db"), respstore.Options{ProcessSync: true})
				if err != nil {
					b.Fatal(err)
				}
				defer rs.Close()
				opts.Responses = rs
			}
			srv, err := New(mustGatewayConfig(b, cfg), newFakeEngine(), tenancy.New(store), opts)
			if err != nil {
				b.Fatal(err)
			}
			var req fasthttp.Request
			req.Header.SetMethod("POST")
			req.SetRequestURI(c.path)
			req.Header.Set("Authorization", "Bearer "+key)
			req.SetBody([]byte(c.body))
			addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
			var ctx fasthttp.RequestCtx
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			for i := 0; i < b.N; i++ {
				ctx.Init(&req, addr, nil)
				srv.handle(&ctx)
				if ctx.Response.StatusCode() != 200 {
					b.Fatalf("%d %s", ctx.Response.StatusCode(), ctx.Response.Body())
				}
			}
			// The process's CPU time (every goroutine's: the store's writer and
			// applier too), the figure to read under load rather than ns/op.
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}
