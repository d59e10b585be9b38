package tenancy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/internal/redistest"
	"github.com/lmlite/lmlite/money"
)

// proc is one lmlite process's tenancy on a shared Redis: its own client, its own
// shared state and its own ledger.
type proc struct {
	ten   *Tenancy
	sh    *RedisShared
	store *Store
}

// testLeases reports whether the Redis suites run with leases, as `lmlite serve` does
// by default: unless LMLITE_TEST_LEASES=0, which runs them on the per-request path
// (redis: {leases: false}).
func testLeases() bool { return os.Getenv("LMLITE_TEST_LEASES") != "0" }

// withTestLeases is sh served through leases (LeaseShared, as `lmlite serve` does by
// default), or with LMLITE_TEST_LEASES=0 sh itself: the Redis suites run either way.
func withTestLeases(t *testing.T, sh *RedisShared, store *Store) Shared {
	if !testLeases() {
		return sh
	}
	ls := NewLeaseShared(sh, LeaseOptions{Store: store})
	t.Cleanup(ls.Close)
	return ls
}

func newProc(t *testing.T, srv *redistest.Server, node string, ttl time.Duration) *proc {
	t.Helper()
	c, err := rediscli.New(rediscli.Options{URL: srv.URL(0), Name: node})
	if err != nil {
		t.Fatal(err)
	}
	store := openStore(t, filepath.Join(t.TempDir(), "lmlite.db"), SyncProcess)
	sh := NewRedisShared(c, RedisOptions{KeyPrefix: "test:", Node: node, TTL: ttl})
	ten := New(store)
	ten.UseShared(withTestLeases(t, sh, store))
	t.Cleanup(func() { sh.Close(); c.Close(); store.Close() })
	return &proc{ten, sh, store}
}

// report makes p's spend all reach Redis: with leases, Close reports what it settled
// from them and gives them back (a lease reports with its next refresh otherwise).
func (p *proc) report() {
	if ls, ok := p.ten.SharedState().(*LeaseShared); ok {
		ls.Close()
	}
}

func ledgerSum(t *testing.T, s *Store) (sum money.Money) {
	t.Helper()
	if err := s.Ledger(func(e Entry) error { sum += e.Cost; return nil }); err != nil {
		t.Fatal(err)
	}
	return sum
}

func TestRedisBudgetAcrossProcesses(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ps := []*proc{newProc(t, srv, "a", 5*time.Second), newProc(t, srv, "b", 5*time.Second), newProc(t, srv, "c", 5*time.Second)}
	worst := money.USD(0.001)
	ceiling := 50*worst + worst/2 // covers 50 and a half: the half is never spendable
	q := &Quota{Tenant: "shared", DailyBudget: ceiling, MaxConcurrency: 1000}
	now := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	ran, refused := 0, 0
	for i := range 300 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := ps[i%3]
			tk, err := p.ten.Admit(q, now, 10)
			if err != nil {
				t.Error(err)
				return
			}
			if err := tk.Reserve(now, worst); err != nil {
				if !errors.Is(err, ErrInsufficientQuota) {
					t.Error(err)
				}
				tk.Settle(Entry{Time: now, Status: 429, RequestID: tk.ID()})
				mu.Lock()
				refused++
				mu.Unlock()
				return
			}
			if _, err := tk.Settle(Entry{Time: now, Cost: worst, Status: 200, RequestID: tk.ID()}); err != nil {
				t.Error(err)
			}
			mu.Lock()
			ran++
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, p := range ps {
		p.report()
	}
	day, _, err := ps[0].sh.Spent("shared", now)
	if err != nil {
		t.Fatal(err)
	}
	least := ceiling - worst
	if testLeases() {
		least = ceiling - 3*worst // a lease's free part less than a worst case: one per process
	}
	if ran+refused != 300 || day > ceiling || day < least {
		t.Fatalf("ran %d, refused %d, spent %v of %v (want ≥ %v)", ran, refused, day, ceiling, least)
	}
	var sum money.Money
	for _, p := range ps {
		sum += ledgerSum(t, p.store)
	}
	if sum != day {
		t.Fatalf("ledgers sum to %v, Redis says %v", sum, day)
	}
	if held, _ := ps[0].sh.Held("shared"); held != 0 {
		t.Fatalf("%v still held after every settlement", held)
	}
	t.Logf("ran %d, refused %d, spent %v of %v", ran, refused, day, ceiling)
}

func TestRedisSettleIdempotentPerTicket(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	p := newProc(t, srv, "a", 5*time.Second)
	q := &Quota{Tenant: "idem", DailyBudget: money.USD(1)}
	now := time.Now()
	tk, _ := p.ten.Admit(q, now, 0)
	if err := tk.Reserve(now, money.USD(0.5)); err != nil {
		t.Fatal(err)
	}
	// A retried reserve (the same total) holds the money once.
	if _, err := p.sh.Reserve(q, tk.ID(), now, money.USD(0.5)); err != nil {
		t.Fatal(err)
	}
	if held, _ := p.sh.Held("idem"); held != money.USD(0.5) {
		t.Fatalf("held %v after a repeated reserve", held)
	}
	for range 3 { // a settlement retried after a lost reply charges once (and is its own)
		if _, again, err := p.sh.Settle(q, tk.ID(), now, money.USD(0.2), 0); err != nil || again {
			t.Fatal(again, err)
		}
	}
	if day, _, _ := p.sh.Spent("idem", now); day != money.USD(0.2) {
		t.Fatalf("spent %v, want $0.2", day)
	}
	if held, _ := p.sh.Held("idem"); held != 0 {
		t.Fatalf("held %v after settlement", held)
	}
}

// TestRedisBatchLineSettledOnce: a batch line settled by one process (which then dies
// before its result is recorded) and run again by another is charged once: the
// second process sees the settlement (LineSettled), its own settlement charges
// nothing (its ledger entry is a rerun at 0), and its reservation is given back.
func TestRedisBatchLineSettledOnce(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a, b := newProc(t, srv, "a", 5*time.Second), newProc(t, srv, "b", 5*time.Second)
	q := &Quota{Tenant: "bat", DailyBudget: money.USD(1)}
	now := time.Now()
	const line = "batch_1-7"
	if _, was, err := b.ten.LineSettled("bat", line); was || err != nil {
		t.Fatalf("settled before it ran: %v %v", was, err)
	}
	// A run refused at no cost (overload) is not a settlement: the line runs again.
	tk0, err := b.ten.AdmitBatchLine(q, now, line)
	if err != nil {
		t.Fatal(err)
	}
	if err := tk0.Reserve(now, money.USD(0.5)); err != nil {
		t.Fatal(err)
	}
	if _, err := tk0.Settle(Entry{Time: now, Status: 503, RequestID: line}); err != nil {
		t.Fatal(err)
	}
	if _, was, err := b.ten.LineSettled("bat", line); was || err != nil {
		t.Fatalf("a refused run counts as settled: %v %v", was, err)
	}
	tk, err := a.ten.AdmitBatchLine(q, now, line)
	if err != nil {
		t.Fatal(err)
	}
	if err := tk.Reserve(now, money.USD(0.5)); err != nil {
		t.Fatal(err)
	}
	if _, err := tk.Settle(Entry{Time: now, Cost: money.USD(0.2), Status: 200, RequestID: line}); err != nil {
		t.Fatal(err)
	}
	cost, was, err := b.ten.LineSettled("bat", line)
	if !was || err != nil || cost != money.USD(0.2) {
		t.Fatalf("LineSettled = %v %v %v, want $0.2 true", cost, was, err)
	}
	// b runs the line again, unaware or not: its settlement charges nothing more.
	tk2, err := b.ten.AdmitBatchLine(q, now, line)
	if err != nil {
		t.Fatal(err)
	}
	if err := tk2.Reserve(now, money.USD(0.5)); err != nil {
		t.Fatal(err)
	}
	if c, err := tk2.Settle(Entry{Time: now, Cost: money.USD(0.3), Status: 200, RequestID: line}); err != nil || c != 0 {
		t.Fatalf("the second settlement charged %v (%v), want 0", c, err)
	}
	if prior, ok := tk2.Rerun(); !ok || prior != money.USD(0.2) {
		t.Fatalf("Rerun = %v %v, want $0.2 true", prior, ok)
	}
	if day, _, _ := a.sh.Spent("bat", now); day != money.USD(0.2) {
		t.Fatalf("spent %v, want $0.2 (charged once)", day)
	}
	if la, lb := ledgerSum(t, a.store), ledgerSum(t, b.store); la != money.USD(0.2) || lb != 0 {
		t.Fatalf("ledgers charged %v and %v, want $0.2 and 0", la, lb)
	}
	if held, _ := a.sh.Held("bat"); held != 0 {
		t.Fatalf("held %v after the second settlement", held)
	}
	// Another line is its own.
	if _, was, _ := b.ten.LineSettled("bat", "batch_1-8"); was {
		t.Fatal("line 8 settled")
	}
}

// flushGate holds the first flush script sent on a client once armed (its EVALSHA,
// before it is written) until released: the pipe's one sender waits, and the calls
// made meanwhile go together in its next flush.
type flushGate struct {
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
	open    sync.Once
	flushes atomic.Int32 // flush scripts sent (EVALSHA)
}

func (g *flushGate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *flushGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (g *flushGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); cmd.Name() == "evalsha" && len(a) > 1 && a[1] == flushScript.Hash() {
			g.flushes.Add(1)
			if g.armed.CompareAndSwap(true, false) {
				close(g.entered)
				<-g.release
			}
		}
		return next(ctx, cmd)
	}
}

// TestRedisBatchLineTwiceInOneFlush: two runs of a batch line (reclaimed from a worker
// that stalled past its lease, so both run at once, here in one process) settle in
// ONE flush script, one round trip: Redis charges the line once, and so do the
// ledgers: one entry at the charge, the other "<id>-rerun" at 0, which knows what the
// first was charged (Ticket.Rerun). Before the settlement answered it, both ledger
// entries charged the line.
func TestRedisBatchLineTwiceInOneFlush(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c, err := rediscli.New(rediscli.Options{URL: srv.URL(0), Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	g := &flushGate{entered: make(chan struct{}), release: make(chan struct{})}
	c.AddHook(g)
	store := openStore(t, filepath.Join(t.TempDir(), "lmlite.db"), SyncProcess)
	sh := NewRedisShared(c, RedisOptions{KeyPrefix: "test:", Node: "a", TTL: 5 * time.Second})
	ten := New(store)
	ten.UseShared(withTestLeases(t, sh, store))
	t.Cleanup(func() { sh.Close(); c.Close(); store.Close() })
	t.Cleanup(func() { g.open.Do(func() { close(g.release) }) }) // first, if the test stops early

	q := &Quota{Tenant: "bat", DailyBudget: money.USD(1)}
	now := time.Now()
	const line = "batch_2-1"
	runs := make([]*Ticket, 2)
	for i := range runs {
		tk, err := ten.AdmitBatchLine(q, now, line)
		if err != nil {
			t.Fatal(err)
		}
		if err := tk.Reserve(now, money.USD(0.5)); err != nil {
			t.Fatal(err)
		}
		runs[i] = tk
	}
	// Hold the pipe's sender on another settlement, queue both runs' settlements
	// behind it, then let it go: they leave together.
	g.armed.Store(true)
	other, err := ten.AdmitBatch(&Quota{Tenant: "other"}, now)
	if err != nil {
		t.Fatal(err)
	}
	go other.Settle(Entry{Time: now, RequestID: "other"})
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no flush script was sent")
	}
	var wg sync.WaitGroup
	for i, tk := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cost := money.USD(0.2) + money.Money(i)*money.USD(0.1)
			if _, err := tk.Settle(Entry{Time: now, Cost: cost, Status: 200, RequestID: line}); err != nil {
				t.Error(err)
			}
		}()
	}
	for len(sh.pipe.calls) < 2 {
		time.Sleep(time.Millisecond)
	}
	before := g.flushes.Load()
	g.open.Do(func() { close(g.release) })
	wg.Wait()
	if n := g.flushes.Load() - before; n != 1 {
		t.Fatalf("the two settlements went in %d flushes, want 1", n)
	}

	day, _, err := sh.Spent("bat", now)
	if err != nil {
		t.Fatal(err)
	}
	if day != money.USD(0.2) && day != money.USD(0.3) {
		t.Fatalf("Redis charged %v, want one run's", day)
	}
	byID := map[string]money.Money{}
	var sum money.Money
	if err := store.Ledger(func(e Entry) error {
		if e.Tenant == "bat" {
			byID[e.RequestID] += e.Cost
			sum += e.Cost
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if sum != day {
		t.Errorf("the ledger charged %v for the line, Redis %v", sum, day)
	}
	if got, ok := byID[line+RerunSuffix]; len(byID) != 2 || byID[line] != day || !ok || got != 0 {
		t.Errorf("ledger entries %v, want %s at %v and %s at 0", byID, line, day, line+RerunSuffix)
	}
	reruns := 0
	for _, tk := range runs {
		if prior, ok := tk.Rerun(); ok {
			reruns++
			if prior != day {
				t.Errorf("the rerun says the line was charged %v, Redis %v", prior, day)
			}
		}
	}
	if reruns != 1 {
		t.Errorf("%d runs report a rerun, want 1", reruns)
	}
	if held, _ := sh.Held("bat"); held != 0 {
		t.Errorf("held %v after both settlements", held)
	}
}

func TestRedisDeadHolderMoneyBack(t *testing.T) {
	if testLeases() {
		// A lease's holder that dies keeps its money and slots stranded (never
		// overspent) until its ledger is reconciled: TestLeaseKilledHolder*.
		t.Skip("the per-request path's tickets expiring; leases: TestLeaseKilledHolderReconciledAtRestart")
	}
	srv := redistest.Start(t, redistest.Options{})
	ttl := time.Second
	a, b := newProc(t, srv, "a", ttl), newProc(t, srv, "b", ttl)
	q := &Quota{Tenant: "dead", DailyBudget: money.USD(1), MaxConcurrency: 2}
	now := time.Now()
	for range 2 {
		tk, err := a.ten.Admit(q, now, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := tk.Reserve(now, money.USD(0.4)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2 * ttl) // a is alive: it renews its reservations and slots
	if _, err := b.ten.Admit(q, now, 0); err == nil {
		t.Fatal("b admitted a third request past MaxConcurrency 2 while a holds two")
	}
	a.sh.Close() // a dies: no more renewals, no settlement
	died := time.Now()
	for {
		tk, err := b.ten.Admit(q, now, 0)
		if err == nil && tk.Remaining(now) == money.USD(1) {
			break
		}
		if time.Since(died) > ttl+time.Second {
			t.Fatalf("a's money and slots not back %v after it died (err %v)", time.Since(died), err)
		}
		if tk != nil {
			tk.Settle(Entry{Time: now})
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("money back %v after the holder died (TTL %v)", time.Since(died), ttl)
}

func TestRedisDownMoneyFailsClosed(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Persist: true})
	p := newProc(t, srv, "a", 5*time.Second)
	q := &Quota{Tenant: "down", DailyBudget: money.USD(1), RequestsPerSecond: 100, Burst: 100}
	now := time.Now()
	tk, _ := p.ten.Admit(q, now, 0)
	if err := tk.Reserve(now, money.USD(0.1)); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	// Rates fall back to the local share: admitted; money fails closed.
	tk2, err := p.ten.Admit(q, now, 0)
	if err != nil {
		t.Fatalf("admit with redis down: %v", err)
	}
	if err := tk2.Reserve(now, money.USD(0.1)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("reserve with redis down: %v, want ErrUnavailable", err)
	}
	tk2.Settle(Entry{Time: now, Status: 503})
	// A settlement while down is ledgered now and reaches Redis once it is back.
	if _, err := tk.Settle(Entry{Time: now, Cost: money.USD(0.07), Status: 200}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("settle with redis down: %v", err)
	}
	srv.Restart()
	back := time.Now()
	for {
		tk3, err := p.ten.Admit(q, now, 0)
		if err == nil {
			if err = tk3.Reserve(now, money.USD(0.1)); err == nil {
				tk3.Settle(Entry{Time: now, Cost: money.USD(0.01)})
				break
			}
		}
		if time.Since(back) > 2*time.Second {
			t.Fatalf("not serving money requests 2s after redis returned: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("money requests served again %v after restart", time.Since(back))
	for p.sh.Pending() > 0 && time.Since(back) < 3*time.Second {
		time.Sleep(20 * time.Millisecond)
	}
	p.report()
	day, _, _ := p.sh.Spent("down", now)
	if sum := ledgerSum(t, p.store); day != sum || day != money.USD(0.08) {
		t.Fatalf("redis spent %v, ledger %v, want $0.08 both", day, sum)
	}
}

func TestRedisRateAcrossProcesses(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ps := []*proc{newProc(t, srv, "a", 5*time.Second), newProc(t, srv, "b", 5*time.Second), newProc(t, srv, "c", 5*time.Second)}
	// A burst of 10 lets a client that comes a little late catch up, as GCRA allows;
	// the rate is what was admitted beyond it.
	q := &Quota{Tenant: "rate", RequestsPerSecond: 20, Burst: 10}
	window := 4 * time.Second
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	start := time.Now()
	for i := range 6 { // two clients per process, each far faster than 20/s
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := ps[i%3]
			for time.Since(start) < window {
				tk, err := p.ten.Admit(q, time.Now(), 0)
				if err == nil {
					mu.Lock()
					admitted++
					mu.Unlock()
					tk.Settle(Entry{Time: time.Now()})
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	got := float64(admitted-q.Burst) / window.Seconds()
	if got < 20*0.95 || got > 20*1.05 {
		t.Fatalf("admitted %d in %v across three processes: %.2f/s beyond the burst, want 20 ±5%%", admitted, window, got)
	}
	t.Logf("admitted %d in %v: %.2f/s beyond the burst of %d", admitted, window, got, q.Burst)
}

func TestRedisKeysRevocationSeenEverywhereWithin1s(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	var ks []*RedisKeys
	for _, node := range []string{"a", "b", "c"} {
		c, err := rediscli.New(rediscli.Options{URL: srv.URL(0), Name: node})
		if err != nil {
			t.Fatal(err)
		}
		k, err := NewRedisKeys(c, "test:", true)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { k.Close(); c.Close() })
		ks = append(ks, k)
	}
	key, ki, err := ks[0].CreateKey("acme", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range ks { // a key made on one works on all at once
		if tenant, id, err := k.Authenticate(key); err != nil || tenant != "acme" || id != ki.ID {
			t.Fatalf("process %d: Authenticate = %q %q %v", i, tenant, id, err)
		}
	}
	wrong := key[:len(key)-1] + "a"
	if wrong == key {
		wrong = key[:len(key)-1] + "b"
	}
	if _, _, err := ks[1].Authenticate(wrong); !errors.Is(err, ErrBadKey) {
		t.Fatalf("wrong secret: %v", err)
	}
	if _, err := ks[2].RevokeKey(ki.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	for i, k := range ks {
		for {
			_, _, err := k.Authenticate(key)
			if errors.Is(err, ErrRevoked) {
				break
			}
			if time.Since(revoked) > time.Second {
				t.Fatalf("process %d still accepts the key %v after its revocation", i, time.Since(revoked))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if l := ks[1].Keys(); len(l) != 1 || l[0].Revoked.IsZero() || l[0].Hash != nil {
		t.Fatalf("Keys = %+v", l)
	}
	t.Logf("revocation seen by all three within %v", time.Since(revoked))
}

func TestRedisTokensPerMinuteShared(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a, b := newProc(t, srv, "a", 5*time.Second), newProc(t, srv, "b", 5*time.Second)
	q := &Quota{Tenant: "tpm", TokensPerMinute: 600}
	now := time.Now()
	tk, err := a.ten.Admit(q, now, 100)
	if err != nil {
		t.Fatal(err)
	}
	tk.Settle(Entry{Time: now, PromptTokens: 100, CompletionTokens: 495}) // 595 of 600 used on a
	var le *LimitError
	if _, err := b.ten.Admit(q, now, 10); !errors.As(err, &le) || le.Reason != "tokens" {
		t.Fatalf("b admitted a 10-token prompt with 5 tokens left on a: %v", err)
	}
	if tk, err := b.ten.Admit(q, now, 5); err != nil {
		t.Fatalf("b refused a 5-token prompt with 5 left: %v", err)
	} else {
		tk.Settle(Entry{Time: now})
	}
}

// TestRedisTicketChecksTokensPerMinute: a request admitted before its body was read
// (Admit with no estimate: its slot and requests/s token) has its prompt's estimate
// checked against the shared tokens/min afterwards (Ticket.CheckTokens), by another
// process too, taking nothing.
func TestRedisTicketChecksTokensPerMinute(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a, b := newProc(t, srv, "a", 5*time.Second), newProc(t, srv, "b", 5*time.Second)
	q := &Quota{Tenant: "tpm2", TokensPerMinute: 600, MaxConcurrency: 4}
	now := time.Now()
	tk, err := a.ten.Admit(q, now, 0)
	if err != nil {
		t.Fatal(err)
	}
	tk.Settle(Entry{Time: now, PromptTokens: 100, CompletionTokens: 495}) // 595 of 600 used on a
	tk, err = b.ten.Admit(q, now, 0)
	if err != nil {
		t.Fatalf("b refused a request before its body: %v", err)
	}
	var le *LimitError
	if err := tk.CheckTokens(now, 10); !errors.As(err, &le) || le.Reason != "tokens" {
		t.Fatalf("b's ticket passed a 10-token prompt with 5 tokens left on a: %v", err)
	}
	for range 2 { // it took nothing
		if err := tk.CheckTokens(now, 5); err != nil {
			t.Fatalf("b's ticket refused a 5-token prompt with 5 left: %v", err)
		}
	}
	tk.Settle(Entry{Time: now})
}

// TestRedisKilledHolderMoneyBack kills -9 a child process that holds reservations and
// concurrency slots: both are back within the TTL (plus one reaper tick).
func TestRedisKilledHolderMoneyBack(t *testing.T) {
	if os.Getenv("LMLITE_REDIS_HOLDER") != "" {
		t.Skip("in the child")
	}
	srv := redistest.Start(t, redistest.Options{})
	ttl := time.Second
	cmd := exec.Command(os.Args[0], "-test.run=^TestRedisHolderChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "LMLITE_REDIS_HOLDER="+srv.URL(0))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "held" {
	}
	b := newProc(t, srv, "b", ttl)
	q := holderQuota()
	now := time.Now()
	if held, _ := b.sh.Held(q.Tenant); held != money.USD(0.9) {
		t.Fatalf("the child holds %v, want $0.9", held)
	}
	time.Sleep(2 * ttl) // alive, the child renews
	if held, _ := b.sh.Held(q.Tenant); held != money.USD(0.9) {
		t.Fatalf("a live holder's reservations expired: %v held", held)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	killed := time.Now()
	for {
		tk, err := b.ten.Admit(q, now, 0)
		if err == nil {
			room := tk.Remaining(now)
			tk.Settle(Entry{Time: now})
			if room == money.USD(1) {
				break
			}
		}
		if time.Since(killed) > ttl+500*time.Millisecond {
			t.Fatalf("the killed holder's money and slots not back %v after kill -9 (err %v)", time.Since(killed), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("money and slots back %v after kill -9 (TTL %v)", time.Since(killed), ttl)
}

func holderQuota() *Quota {
	return &Quota{Tenant: "holder", DailyBudget: money.USD(1), MaxConcurrency: 3}
}

func TestRedisHolderChild(t *testing.T) {
	url := os.Getenv("LMLITE_REDIS_HOLDER")
	if url == "" {
		t.Skip("only as the child of TestRedisKilledHolderMoneyBack")
	}
	c, err := rediscli.New(rediscli.Options{URL: url, Name: "child"})
	if err != nil {
		os.Exit(1)
	}
	ten := New(nil)
	ten.UseShared(NewRedisShared(c, RedisOptions{KeyPrefix: "test:", Node: "child", TTL: time.Second}))
	now := time.Now()
	for range 3 {
		tk, err := ten.Admit(holderQuota(), now, 0)
		if err != nil {
			os.Exit(1)
		}
		if err := tk.Reserve(now, money.USD(0.3)); err != nil {
			os.Exit(1)
		}
	}
	fmt.Println("held")
	select {} // hold until killed
}

// TestRedisAdmitReserveIsAllOrNothing: an admission refused by the budget takes no
// requests/s token, no slot and no money, and one refused by requests/s takes no slot
// and no money, in process as in Redis (where the refusal is one script that wrote
// nothing: the slots and the held money are read from Redis).
func TestRedisAdmitReserveIsAllOrNothing(t *testing.T) {
	var srv *redistest.Server
	for _, where := range []string{"in-process", "redis"} {
		t.Run(where, func(t *testing.T) {
			st := openStore(t, filepath.Join(t.TempDir(), "lmlite.db"), SyncProcess)
			t.Cleanup(func() { st.Close() }) // before its directory goes
			ten := New(st)
			var p *proc
			if where == "redis" {
				if srv == nil {
					srv = redistest.Start(t, redistest.Options{})
				}
				p = newProc(t, srv, "a", 5*time.Second)
				ten = p.ten
			}
			state := func(wantSlots int64, wantHeld money.Money) {
				t.Helper()
				if p == nil || testLeases() {
					return // with leases Redis counts the lease's slots and money, not the request's
				}
				if n, _ := p.sh.c.HGet(context.Background(), "test:t:{aon}:s", "=n").Int64(); n != wantSlots {
					t.Fatalf("%d slots in Redis, want %d", n, wantSlots)
				}
				if held, err := p.sh.Held("aon"); err != nil || held != wantHeld {
					t.Fatalf("held %v (%v) in Redis, want %v", held, err, wantHeld)
				}
			}
			worst := money.USD(0.001)
			q := &Quota{Tenant: "aon", RequestsPerSecond: 0.001, Burst: 1, MaxConcurrency: 2, DailyBudget: worst}
			now := time.Now()
			if _, err := ten.AdmitReserve(q, now, 0, 2*worst); !errors.Is(err, ErrInsufficientQuota) {
				t.Fatalf("over the budget: %v, want ErrInsufficientQuota", err)
			}
			state(0, 0)
			// The only requests/s token (burst 1, one per 1000 s) is still there.
			tk, err := ten.AdmitReserve(q, now, 0, worst)
			if err != nil {
				t.Fatalf("within the budget, after a refusal: %v", err)
			}
			if tk.Reserved() != worst || tk.Remaining(now) != 0 {
				t.Fatalf("reserved %v, %v left; want %v, 0", tk.Reserved(), tk.Remaining(now), worst)
			}
			state(1, worst)
			var le *LimitError
			if _, err := ten.AdmitReserve(q, now, 0, 0); !errors.As(err, &le) || le.Reason != "requests" {
				t.Fatalf("the token spent: %v, want a requests limit", err)
			}
			state(1, worst)
			if _, err := tk.Settle(Entry{Time: now, Cost: worst / 2}); err != nil {
				t.Fatal(err)
			}
			state(0, 0)
			if ten.Remaining(q, now) != worst/2 && where == "in-process" {
				t.Fatalf("%v left after settling half", ten.Remaining(q, now))
			}
		})
	}
}
