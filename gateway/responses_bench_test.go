package gateway

import (
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
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
// and stored (in memory; in respstore's Bolt with its journal and in ledger mode),
// and Anthropic's /v1/messages (its key as a Bearer token, which it accepts), so
// that each codec's cost is read against chat's in the same run; fsync/ repeats chat
// and the Bolt rows with ledger: {sync: fsync}, one request at a time and 16 at once
// (fsync/responses: store: false beside a store in ledger mode, as lmlite serve
// runs it: the same ledger work as chat's).
func BenchmarkHandleEndpoints(b *testing.B) {
	const (
		chat     = `{"model":"tiny","messages":[{"role":"user","content":"Say hi"}],"max_tokens":1}`
		unstored = `{"model":"tiny","input":"Say hi","max_output_tokens":1,"store":false}`
		stored   = `{"model":"tiny","input":"Say hi","max_output_tokens":1}`
	)
	for _, c := range []struct {
		name, path, body string
		bolt             string // "": stored in memory; "journal": respstore's Bolt with its own journal; "ledger": in ledger mode (the ledger's side records)
		fsync            bool   // ledger: {sync: fsync} (the journal fdatasyncs too), else process
	}{
		{"chat", "/v1/chat/completions", chat, "", false},
		{"responses", "/v1/responses", unstored, "", false},
		{"responses-stored", "/v1/responses", stored, "", false},
		{"responses-stored-bolt", "/v1/responses", stored, "journal", false},
		{"responses-stored-ledger", "/v1/responses", stored, "ledger", false},
		{"messages", "/v1/messages", chat, "", false},
		{"fsync/chat", "/v1/chat/completions", chat, "", true},
		{"fsync/responses", "/v1/responses", unstored, "ledger", true},
		{"fsync/responses-stored-bolt", "/v1/responses", stored, "journal", true},
		{"fsync/responses-stored-ledger", "/v1/responses", stored, "ledger", true},
		{"fsync/conns=16/chat", "/v1/chat/completions", chat, "", true},
		{"fsync/conns=16/responses", "/v1/responses", unstored, "ledger", true},
		{"fsync/conns=16/responses-stored-bolt", "/v1/responses", stored, "journal", true},
		{"fsync/conns=16/responses-stored-ledger", "/v1/responses", stored, "ledger", true},
	} {
		conns := 1
		if strings.Contains(c.name, "conns=16/") {
			conns = 16
		}
		b.Run(c.name, func(b *testing.B) {
			cfg, _ := configs.Parse([]byte(testConfig))
			cfg.DataDir = b.TempDir()
			if err := cfg.Validate(); err != nil {
				b.Fatal(err)
			}
			topts := tenancy.Options{Sync: tenancy.SyncProcess}
			if c.fsync {
				topts.Sync = tenancy.SyncFsync
			}
			opts := Options{Logger: slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))}
			if c.bolt != "" { // as lmlite serve opens them: the store first, the ledger's side owner
				open := respstore.OpenBolt
				if c.bolt == "ledger" {
					open = respstore.OpenBoltLedger
				}
				rs, err := open(filepath.Join(cfg.DataDir, "responses.db"), respstore.Options{ProcessSync: !c.fsync})
				if err != nil {
					b.Fatal(err)
				}
				defer rs.Close()
				opts.Responses = rs
				topts.Side = rs
			}
			store, err := tenancy.Open(filepath.Join(cfg.DataDir, "lmlite.db"), topts)
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			key, _, _ := store.CreateKey("rich", time.Now()) // quotas and budget on
			srv, err := New(mustGatewayConfig(b, cfg), newFakeEngine(), tenancy.New(store), opts)
			if err != nil {
				b.Fatal(err)
			}
			addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
			// serve handles n requests one after the other, on one connection's context.
			serve := func(n func() bool) {
				var req fasthttp.Request
				req.Header.SetMethod("POST")
				req.SetRequestURI(c.path)
				req.Header.Set("Authorization", "Bearer "+key)
				req.SetBody([]byte(c.body))
				var ctx fasthttp.RequestCtx
				for n() {
					ctx.Init(&req, addr, nil)
					srv.handle(&ctx)
					if ctx.Response.StatusCode() != 200 {
						b.Errorf("%d %s", ctx.Response.StatusCode(), ctx.Response.Body())
						return
					}
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0, writes0 := cpuTime(), store.Commits()
			if conns == 1 {
				i := 0
				serve(func() bool { i++; return i <= b.N })
			} else { // conns handlers at once, as many connections: their ledger writes (and syncs) are shared
				b.SetParallelism(conns) // × GOMAXPROCS (-test.cpu 1: conns)
				b.RunParallel(func(pb *testing.PB) { serve(pb.Next) })
			}
			// The process's CPU time (every goroutine's: the store's writer and
			// applier too), the figure to read under load rather than ns/op.
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
			b.ReportMetric(float64(store.Commits()-writes0)/float64(b.N), "ledger-writes/op") // with fsync, a sync each
		})
	}
}
