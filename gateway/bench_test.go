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

// BenchmarkHandleChat measures the gateway's own work for a 1-token chat completion
// (auth, parse, quotas, budget reservation, ledger in process-sync mode, response)
// with the fake engine, calling the handler directly.
// The stream case streams 8 tokens (the events the output renders per token).
func BenchmarkHandleChat(b *testing.B) {
	for _, bc := range []struct {
		name           string
		routed, stream bool
	}{{"model", false, false}, {"auto", true, false}, {"stream", false, true}} {
		name, routed := bc.name, bc.routed
		b.Run(name, func(b *testing.B) {
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
			srv, err := New(mustGatewayConfig(b, cfg), newFakeEngine(), tenancy.New(store), Options{Logger: slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))})
			if err != nil {
				b.Fatal(err)
			}
			model := `"tiny"`
			if routed {
				model = `"auto"`
			}
			body := []byte(`{"model":` + model + `,"messages":[{"role":"user","content":"Say hi"}],"max_tokens":1}`)
			if bc.stream {
				body = []byte(`{"model":` + model + `,"messages":[{"role":"user","content":"Say hi"}],"max_tokens":8,"stream":true}`)
			}
			var req fasthttp.Request
			req.Header.SetMethod("POST")
			req.SetRequestURI("/v1/chat/completions")
			req.Header.Set("Authorization", "Bearer "+key)
			req.SetBody(body)
			addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
			var ctx fasthttp.RequestCtx
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				ctx.Init(&req, addr, nil)
				srv.handle(&ctx)
				if bc.stream && len(ctx.Response.Body()) == 0 { // Body runs the stream writer to its end
					b.Fatal("no stream")
				}
				if ctx.Response.StatusCode() != 200 {
					b.Fatalf("%d %s", ctx.Response.StatusCode(), ctx.Response.Body())
				}
			}
		})
	}
}
