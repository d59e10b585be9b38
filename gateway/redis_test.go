package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"
	"github.com/redis/go-redis/v9"

	"github.com/lmlite/lmlite/batch"
	"github.com/lmlite/lmlite/configs"
	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/internal/redistest"
	"github.com/lmlite/lmlite/money"
	"github.com/lmlite/lmlite/tenancy"
	"github.com/lmlite/lmlite/usage"
)

// sharedGateway is one of several gateways sharing a Redis, as `lmlite serve` wires it
// with a redis: block: its own Redis client, keys and quota state, and its own ledger.
// The tests run three of them in one test process (each with its own clients), not
// three processes.
type sharedGateway struct {
	srv   *Server
	store *tenancy.Store
	sh    *tenancy.RedisShared
	ten   tenancy.Shared // sh through leases, or sh (LMLITE_TEST_LEASES=0)
	eng   *fakeEngine
	url   string
}

// withTestLeases is sh served through leases (tenancy.LeaseShared, as `lmlite serve`
// does by default), or with LMLITE_TEST_LEASES=0 sh itself (redis: {leases: false}):
// the Redis suites run either way.
func withTestLeases(t *testing.T, sh *tenancy.RedisShared, store *tenancy.Store) tenancy.Shared {
	if os.Getenv("LMLITE_TEST_LEASES") == "0" {
		return sh
	}
	ls := tenancy.NewLeaseShared(sh, tenancy.LeaseOptions{Store: store})
	t.Cleanup(ls.Close)
	return ls
}

func startSharedGateways(t *testing.T, rs *redistest.Server, n int, extraTenants ...string) ([]*sharedGateway, map[string]string) {
	t.Helper()
	return startSharedGatewaysWith(t, rs, n, nil, extraTenants...)
}

// startSharedGatewaysWith is startSharedGateways with more options for gateway i
// (opts may be nil).
func startSharedGatewaysWith(t *testing.T, rs *redistest.Server, n int, opts func(i int, rc *redis.Client, o *Options), extraTenants ...string) ([]*sharedGateway, map[string]string) {
	t.Helper()
	yaml := testConfig
	for _, tn := range extraTenants {
		yaml += "  - " + tn + "\n"
	}
	cfg, err := configs.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = t.TempDir()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var gws []*sharedGateway
	var keys map[string]string
	for i := range n {
		node := fmt.Sprintf("gw-%d", i)
		rc, err := rediscli.New(rediscli.Options{URL: rs.URL(0), Name: node})
		if err != nil {
			t.Fatal(err)
		}
		store, err := tenancy.Open(filepath.Join(t.TempDir(), "lmlite.db"), tenancy.Options{Sync: tenancy.SyncProcess})
		if err != nil {
			t.Fatal(err)
		}
		rk, err := tenancy.NewRedisKeys(rc, "gwtest:", true)
		if err != nil {
			t.Fatal(err)
		}
		store.ShareKeys(rk)
		sh := tenancy.NewRedisShared(rc, tenancy.RedisOptions{KeyPrefix: "gwtest:", Node: node, TTL: 3 * time.Second})
		ten := tenancy.New(store)
		shared := withTestLeases(t, sh, store)
		ten.UseShared(shared)
		ru := usage.NewRedis(rc, store, usage.RedisOptions{KeyPrefix: "gwtest:"})
		o := Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), AdminKey: "admin-secret", Usage: ru}
		if opts != nil {
			opts(i, rc, &o)
		}
		eng := newFakeEngine()
		srv, err := New(mustGatewayConfig(t, cfg), eng, ten, o)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ln) }()
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			srv.Shutdown(ctx)
			<-done
			ru.Close()
			sh.Close()
			rk.Close()
			rc.Close()
			store.Close()
		})
		gws = append(gws, &sharedGateway{srv: srv, store: store, sh: sh, ten: shared, eng: eng, url: "http://" + ln.Addr().String()})
		if keys == nil { // keys made on the first gateway serve on all
			keys = map[string]string{}
			for _, tn := range cfg.Tenants {
				if keys[tn.ID], _, err = store.CreateKey(tn.ID, time.Now()); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return gws, keys
}

func (g *sharedGateway) post(t *testing.T, key, body string) (int, string) {
	ts := &testServer{t: t, url: g.url}
	resp, b := ts.post("/v1/chat/completions", key, body)
	return resp.StatusCode, b
}

func ledgerTotal(s *tenancy.Store) (sum money.Money, ran int) {
	s.Ledger(func(e tenancy.Entry) error {
		sum += e.Cost
		if e.Status == 200 {
			ran++
		}
		return nil
	})
	return
}

// TestRedisBudgetAcrossThreeGateways: 300 concurrent requests over three gateways
// against one tenant whose daily budget covers about 50: every request runs or gets
// insufficient_quota, the spend never passes the ceiling and reaches it to within one
// worst case (per-request path) or one worst case per gateway (leases), and the
// ledgers equal Redis's spend (with leases, once they have reported).
func TestRedisBudgetAcrossThreeGateways(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	gws, keys := startSharedGateways(t, rs, 3)
	// big: $0.001 a request, worst case = actual (the fake engine produces all 15
	// tokens), so the tenant's $0.05 a day covers 50.
	body := `{"model": "big", "messages": [{"role":"user","content":"spend"}], "max_tokens": 15}`
	worst := money.USD(0.001)
	ceiling := money.USD(0.05)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, quota, other := 0, 0, []string{}
	for i := range 300 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, b := gws[i%3].post(t, keys["race"], body)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case code == 200:
				ok++
			case code == 429 && strings.Contains(b, `"code":"insufficient_quota"`):
				quota++
			default:
				other = append(other, fmt.Sprintf("%d %s", code, b))
			}
		}()
	}
	wg.Wait()
	if len(other) > 0 {
		t.Fatalf("%d requests neither ran nor got insufficient_quota: %v", len(other), other[0])
	}
	least := ceiling - worst
	for _, g := range gws {
		if ls, ok := g.ten.(*tenancy.LeaseShared); ok {
			ls.Close() // reports what it settled from its leases (with the next refresh otherwise)
			// A lease's free part under one worst case is spendable by no request: the
			// lease bound is one worst case per process (docs/REDIS.md).
			least = ceiling - money.Money(len(gws))*worst
		}
	}
	day, _, err := gws[0].sh.Spent("race", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var sum money.Money
	ran := 0
	for _, g := range gws {
		s, r := ledgerTotal(g.store)
		sum, ran = sum+s, ran+r
	}
	t.Logf("ran %d, refused %d; Redis spent %v, ledgers %v, of %v", ok, quota, day, sum, ceiling)
	if ok+quota != 300 || ran != ok {
		t.Errorf("ok %d + insufficient_quota %d != 300 (ledgers ran %d)", ok, quota, ran)
	}
	if day > ceiling || day < least {
		t.Errorf("spent %v: want ≤ %v and ≥ %v (money stranded)", day, ceiling, least)
	}
	if sum != day {
		t.Errorf("the three ledgers sum to %v, Redis holds %v", sum, day)
	}
	// lmlite ledger verify's reconciliation agrees, window by window.
	spend, err := tenancy.LedgerSpend(gws[0].store, gws[1].store, gws[2].store)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rediscli.New(rediscli.Options{URL: rs.URL(0)})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	rec, err := tenancy.ReconcileRedis(context.Background(), rc, "gwtest:", spend)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec) != 2 { // race's day and month
		t.Errorf("reconciled %d windows, want 2: %+v", len(rec), rec)
	}
	for _, r := range rec {
		if !r.Match() || !r.InRedis {
			t.Errorf("%v: ledgers %v, redis %v", r.SpendWindow, r.Ledgers, r.Redis)
		}
	}
}

func TestRedisKilledMidLoadAcrossThreeGateways(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{Persist: true}) // the spend survives the restart
	gws, keys := startSharedGateways(t, rs, 3)
	body := `{"model": "tiny", "messages": [{"role":"user","content":"x"}], "max_tokens": 5}`
	var mu sync.Mutex
	var downAt, upAt time.Time
	ok, unavailable, okAfterUp := 0, 0, time.Time{}
	var other []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 9 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				code, b := gws[i%3].post(t, keys["rich"], body)
				now := time.Now()
				mu.Lock()
				switch {
				case code == 200:
					ok++
					if !upAt.IsZero() && okAfterUp.IsZero() {
						okAfterUp = now
					}
				case code == 503 && strings.Contains(b, "quota_state_unavailable"):
					unavailable++
				default:
					other = append(other, fmt.Sprintf("%d %s", code, b))
				}
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	mu.Lock()
	downAt = time.Now()
	mu.Unlock()
	rs.Kill()
	time.Sleep(800 * time.Millisecond)
	mu.Lock()
	okBeforeUp := ok
	mu.Unlock()
	rs.Restart()
	mu.Lock()
	upAt = time.Now()
	mu.Unlock()
	time.Sleep(2500 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("ok %d (%d before restart), 503 %d; down %v; first 200 %v after restart",
		ok, okBeforeUp, unavailable, upAt.Sub(downAt), okAfterUp.Sub(upAt))
	if len(other) > 0 {
		t.Fatalf("%d requests neither ran nor got 503: %v", len(other), other[0])
	}
	_, leased := gws[0].ten.(*tenancy.LeaseShared)
	if unavailable == 0 && !leased { // leases serve an outage within their term from what they hold
		t.Error("no request got 503 while Redis was down")
	}
	if okAfterUp.IsZero() || okAfterUp.Sub(upAt) > 2*time.Second {
		t.Errorf("service not back within 2s of Redis returning (first 200 after %v)", okAfterUp.Sub(upAt))
	}
	// Settlements that failed while Redis was down are retried until it takes them.
	deadline := time.Now().Add(3 * time.Second)
	for _, g := range gws {
		for g.sh.Pending() > 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if ls, ok := g.ten.(*tenancy.LeaseShared); ok {
			ls.Close() // reports what it settled from its leases
		}
	}
	day, _, err := gws[0].sh.Spent("rich", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var sum money.Money
	ran := 0
	for _, g := range gws {
		s, r := ledgerTotal(g.store)
		sum, ran = sum+s, ran+r
	}
	if ran != ok || sum != day {
		t.Errorf("ledgers: %d ran for %v; Redis spent %v; %d answered 200 (a double or lost charge)", ran, sum, day, ok)
	}
}

func TestRedisRateAcrossThreeGateways(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	gws, keys := startSharedGateways(t, rs, 3, "{id: twenty, plan: open, overrides: {requests_per_second: 20, burst: 10}}")
	body := `{"model": "tiny", "messages": [{"role":"user","content":"x"}], "max_tokens": 1}`
	window := 4 * time.Second
	var mu sync.Mutex
	ok, limited := 0, 0
	var other []string
	var wg sync.WaitGroup
	start := time.Now()
	for i := range 6 { // two clients per gateway, each far faster than 20/s together
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < window {
				code, b := gws[i%3].post(t, keys["twenty"], body)
				mu.Lock()
				switch {
				case code == 200:
					ok++
				case code == 429 && strings.Contains(b, "rate_limit_exceeded"):
					limited++
				default:
					other = append(other, fmt.Sprintf("%d %s", code, b))
				}
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	if len(other) > 0 {
		t.Fatalf("%d unexpected answers: %v", len(other), other[0])
	}
	rate := float64(ok-10) / window.Seconds()
	t.Logf("%d ran, %d rate-limited in %v: %.2f/s beyond the burst of 10", ok, limited, window, rate)
	if rate < 20*0.95 || rate > 20*1.05 || limited == 0 {
		t.Errorf("%.2f requests/s across three gateways, want 20 ±5%%", rate)
	}
}

// A batch on one of two gateways sharing a Redis: its lines go on the Redis Stream,
// both gateways run some (each ledgers what it ran), the cap holds over both, and the
// job's spend is the sum of the two ledgers' entries of its lines.
func TestRedisBatchLinesRunOnEveryGateway(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	gws, keys := startSharedGatewaysWith(t, rs, 2, func(i int, rc *redis.Client, o *Options) {
		bs, err := batch.OpenStore(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { bs.Close() })
		o.Batches, o.BatchConcurrency = bs, 8
		o.BatchQueue = batch.NewRedisQueue(rc, batch.RedisQueueOptions{KeyPrefix: "gwtest:", Node: fmt.Sprint("gw-", i)})
	})
	c := openai.NewClient(option.WithBaseURL(gws[0].url+"/v1/"), option.WithAPIKey(keys["acme"]), option.WithMaxRetries(0))
	var lines []string
	for i := range 120 {
		lines = append(lines, chatLine(fmt.Sprintf("r%03d", i), "tiny", 40, `,"stop":["w2"]`))
	}
	prompt := len("<|im_start|>user\nhi r000<|im_end|>\n<|im_start|>assistant\n") + 1
	worst := money.Price{PromptPer1K: money.USD(0.001), CompletionPer1K: money.USD(0.002)}.Cost(prompt, 40)
	cap := worst * 120 / 4
	b := newBatch(t, c, upload(t, c, lines...).ID, map[string]string{"max_cost_usd": fmt.Sprint(cap.Dollars())})
	b = waitBatch(t, c, b.ID)
	out, bad := content(t, c, b.OutputFileID), content(t, c, b.ErrorFileID)
	seen := map[string]bool{}
	for _, l := range append(out, bad...) {
		if seen[l.CustomID] {
			t.Fatalf("custom_id %s twice", l.CustomID)
		}
		seen[l.CustomID] = true
	}
	if b.Status != openai.BatchStatusCancelled || len(b.Errors.Data) != 1 || b.Errors.Data[0].Code != batch.CodeMaxCost {
		t.Fatalf("batch %s, errors %+v: want cancelled by the cap", b.Status, b.Errors.Data)
	}
	if len(seen) != 120 || len(out) < 30 {
		t.Fatalf("batch %s: %d out + %d errors", b.Status, len(out), len(bad))
	}
	var spent money.Money
	ran := []int{0, 0}
	for i, g := range gws {
		g.store.Ledger(func(e tenancy.Entry) error {
			if strings.HasPrefix(e.RequestID, b.ID) {
				spent += e.Cost
				ran[i]++
			}
			return nil
		})
	}
	job, err := gws[0].srv.batches.m.Store().Job("acme", b.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("batch %s: lines ran per gateway %v, spent %s of a %s cap", b.Status, ran, spent, cap)
	if spent > cap || job.Spent != spent || ran[0]+ran[1] != len(out) {
		t.Fatalf("ledgers spent %s over %v lines, job spent %s, cap %s, %d out", spent, ran, job.Spent, cap, len(out))
	}
	if ran[0] == 0 || ran[1] == 0 {
		t.Fatalf("lines ran per gateway %v: want both", ran)
	}
}

// TestRedisLimitsShowSharedSpend: /v1/lmlite/limits on any gateway shows the tenant's
// spend across all of them (Redis's), not the gateway's own ledger's.
func TestRedisLimitsShowSharedSpend(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	gws, keys := startSharedGateways(t, rs, 2)
	body := `{"model": "big", "messages": [{"role":"user","content":"spend"}], "max_tokens": 15}`
	for range 3 {
		if code, b := gws[0].post(t, keys["race"], body); code != 200 {
			t.Fatalf("%d %s", code, b)
		}
	}
	day, _, err := gws[0].sh.Spent("race", time.Now())
	if err != nil || day <= 0 {
		t.Fatalf("Redis's spend %v %v", day, err)
	}
	ts := &testServer{t: t, url: gws[1].url}
	resp, b := ts.get("/v1/lmlite/limits", keys["race"])
	var l struct {
		Budgets map[string]struct {
			Spent     float64  `json:"spent_usd"`
			Remaining *float64 `json:"remaining_usd"`
		}
	}
	if err := json.Unmarshal([]byte(b), &l); resp.StatusCode != 200 || err != nil {
		t.Fatalf("%d %s %v", resp.StatusCode, b, err)
	}
	d := l.Budgets["day"]
	if d.Spent != day.Dollars() || d.Remaining == nil || *d.Remaining != (money.USD(0.05)-day).Dollars() {
		t.Fatalf("gateway 1's limits say %s; Redis's spend is %v", b, day)
	}
	if sum, _ := ledgerTotal(gws[1].store); sum != 0 {
		t.Fatalf("gateway 1's own ledger holds %v", sum)
	}
}

// Requests settled on three gateways sharing a Redis show, summed, in the usage and
// costs APIs of each of them (once each has published), equal to the three
// ledgers together to the nano-dollar.
func TestRedisUsageOfThreeGatewaysInEachUsageAPI(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	gws, keys := startSharedGateways(t, rs, 3)
	for i := range 30 {
		model := []string{"tiny", "big"}[i%2]
		if code, body := gws[i%3].post(t, keys["acme"], `{"model":"`+model+`","max_tokens":5,"messages":[{"role":"user","content":"hi `+fmt.Sprint(i)+`"}]}`); code != 200 {
			t.Fatalf("request %d: %d %s", i, code, body)
		}
	}
	var want money.Money
	wantRequests := 0
	for _, g := range gws {
		sum, _ := ledgerTotal(g.store)
		want += sum
		g.store.Ledger(func(e tenancy.Entry) error { wantRequests++; return nil })
	}
	if wantRequests != 30 || want == 0 {
		t.Fatalf("ledgers hold %d entries, %v", wantRequests, want)
	}
	// Each gateway publishes its ledger every 500ms, and its own before answering: the
	// test publishes all three rather than wait for that.
	for _, g := range gws {
		if err := g.srv.usage.(*usage.Redis).Publish(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	from := time.Now().Add(-time.Hour)
	for i, g := range gws {
		ts := &testServer{t: t, url: g.url}
		for _, key := range []string{"admin-secret", keys["acme"]} {
			_, costs, body := ts.usagePage("/v1/organization/costs", key, vals("start_time", unix(from), "bucket_width", "1h", "limit", "3"))
			_, use, _ := ts.usagePage("/v1/organization/usage/completions", key, vals("start_time", unix(from), "bucket_width", "1m", "limit", "120"))
			var got money.Money
			var n int64
			for _, b := range costs.Data {
				for _, r := range b.Results {
					got += money.USD(r.Amount.Value)
				}
			}
			for _, b := range use.Data {
				for _, r := range b.Results {
					n += r.NumModelRequests
				}
			}
			if got != want || n != int64(wantRequests) {
				t.Errorf("gateway %d, key %.5s: usage API %v over %d requests, ledgers %v over %d (%s)", i, key, got, n, want, wantRequests, body)
			}
		}
	}
	// Redis down: the usage API says so (503), it does not answer from one process.
	rs.Kill()
	ts := &testServer{t: t, url: gws[0].url}
	if code, _, body := ts.usagePage("/v1/organization/costs", keys["acme"], vals("start_time", unix(from))); code != 503 || !strings.Contains(body, "usage_unavailable") {
		t.Errorf("costs with Redis down: %d %s", code, body)
	}
}

// batchGateways starts two gateways sharing rs, each with a batch store of its own.
func batchGateways(t *testing.T, rs *redistest.Server) []*sharedGateway {
	gws, _ := batchGatewaysWith(t, rs)
	return gws
}

// batchGatewaysWith is batchGateways with more tenants, and the tenants' keys.
func batchGatewaysWith(t *testing.T, rs *redistest.Server, extraTenants ...string) ([]*sharedGateway, map[string]string) {
	return startSharedGatewaysWith(t, rs, 2, func(i int, rc *redis.Client, o *Options) {
		bs, err := batch.OpenStore(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { bs.Close() })
		o.Batches = bs
	}, extraTenants...)
}

// A batch line that one gateway ran and settled (then, say, died before its result
// was recorded) and that another gateway runs again after reclaiming it (Retry) is
// charged once: the second run answers the first run's cost, its ledger charges
// nothing, and the shared spend is one run's.
func TestRedisReclaimedBatchLineChargedOnce(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	gws := batchGateways(t, rs)
	body := []byte(`{"model":"tiny","max_tokens":8,"messages":[{"role":"user","content":"hi there"}]}`)
	req := batch.Request{Tenant: "acme", Endpoint: "/v1/chat/completions", RequestID: "batch_reclaim-3", Body: body,
		MaxCost: money.USD(1)}
	first := gws[0].srv.RunLine(context.Background(), req)
	if first.StatusCode != 200 || first.Cost <= 0 {
		t.Fatalf("first run: %d, cost %v: %s", first.StatusCode, first.Cost, first.Body)
	}
	req.Retry = true
	again := gws[1].srv.RunLine(context.Background(), req)
	if again.StatusCode != 200 || again.Cost != first.Cost {
		t.Fatalf("rerun: %d, cost %v, want the first run's %v: %s", again.StatusCode, again.Cost, first.Cost, again.Body)
	}
	if sum, _ := ledgerTotal(gws[1].store); sum != 0 {
		t.Errorf("the second gateway's ledger charged %v for a line charged before", sum)
	}
	if day, _, _ := gws[0].sh.Spent("acme", time.Now()); day != first.Cost {
		t.Errorf("shared spend %v, want one run's %v", day, first.Cost)
	}
	// A line never run before is charged on its first (retried) run.
	req.RequestID = "batch_reclaim-4"
	other := gws[1].srv.RunLine(context.Background(), req)
	if other.StatusCode != 200 || other.Cost <= 0 {
		t.Fatalf("line 4: %d, cost %v", other.StatusCode, other.Cost)
	}
	if sum, _ := ledgerTotal(gws[1].store); sum != other.Cost {
		t.Errorf("the second gateway's ledger %v, want line 4's %v", sum, other.Cost)
	}
}

// A batch line reclaimed while its first run still goes (the worker stalled past its
// lease) runs twice at once; the shared state charges it once, and so must the
// ledgers: whichever run settles second charges nothing in its ledger and answers
// the first settlement's cost. Both orders: the rerun settling second (the original
// was fast once it went on), and the rerun settling first (the original was stalled).
func TestRedisBatchLineRunTwiceAtOnceChargedOnce(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	gws := batchGateways(t, rs)
	body := []byte(`{"model":"tiny","max_tokens":8,"messages":[{"role":"user","content":"hi there"}]}`)
	for _, tc := range []struct {
		name      string
		slowRetry bool // the rerun (Retry, on gateway 1) is the slow run, else the original (gateway 0)
		line      string
	}{{"rerun settles second", true, "batch_overlap-1"}, {"original settles second", false, "batch_overlap-2"}} {
		slow, fast := gws[1], gws[0]
		if !tc.slowRetry {
			slow, fast = gws[0], gws[1]
		}
		slow.eng.Delay, fast.eng.Delay = 50*time.Millisecond, 0 // 8 tokens: the slow run takes 400 ms
		reqOf := func(g *sharedGateway) batch.Request {
			return batch.Request{Tenant: "acme", Endpoint: "/v1/chat/completions", RequestID: tc.line, Body: body,
				MaxCost: money.USD(1), Retry: g == gws[1]}
		}
		before0, _ := ledgerTotal(gws[0].store)
		before1, _ := ledgerTotal(gws[1].store)
		spent0, _, _ := gws[0].sh.Spent("acme", time.Now())
		started := slow.eng.started.Load()
		slowDone := make(chan batch.Response, 1)
		go func() { slowDone <- slow.srv.RunLine(context.Background(), reqOf(slow)) }()
		for slow.eng.started.Load() == started { // the slow run is past its start (and its Retry check)
			time.Sleep(time.Millisecond)
		}
		first := fast.srv.RunLine(context.Background(), reqOf(fast))
		second := <-slowDone
		if first.StatusCode != 200 || first.Cost <= 0 || second.StatusCode != 200 {
			t.Fatalf("%s: runs %d (cost %v) and %d: %s %s", tc.name, first.StatusCode, first.Cost, second.StatusCode, first.Body, second.Body)
		}
		if second.Cost != first.Cost {
			t.Errorf("%s: the second settlement answers cost %v, want the first's %v", tc.name, second.Cost, first.Cost)
		}
		after0, _ := ledgerTotal(gws[0].store)
		after1, _ := ledgerTotal(gws[1].store)
		if got := after0 - before0 + after1 - before1; got != first.Cost {
			t.Errorf("%s: the two ledgers charged %v for the line, want one run's %v", tc.name, got, first.Cost)
		}
		if day, _, _ := gws[0].sh.Spent("acme", time.Now()); day-spent0 != first.Cost {
			t.Errorf("%s: shared spend grew %v, want one run's %v", tc.name, day-spent0, first.Cost)
		}
	}
}
