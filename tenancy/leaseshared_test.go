package tenancy

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/internal/redistest"
	"github.com/lmlite/lmlite/money"
)

// leaseProc is one process's tenancy served through leases on a shared Redis.
type leaseProc struct {
	ten   *Tenancy
	ls    *LeaseShared
	store *Store
	c     redis.UniversalClient
	cmds  *atomic.Int64 // commands this process sent to Redis
}

type cmdCounter struct{ n *atomic.Int64 }

func (h cmdCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h cmdCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h cmdCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(int64(len(cmds))); return next(ctx, cmds) }
}

// newLeaseProc starts a process on srv with its ledger at path ("": a new one).
func newLeaseProc(t *testing.T, srv *redistest.Server, node, path string, period time.Duration) *leaseProc {
	t.Helper()
	return newLeaseProcWith(t, srv, node, path, LeaseConfig{Period: period})
}

// newLeaseProcWith is newLeaseProc with the whole lease configuration.
func newLeaseProcWith(t *testing.T, srv *redistest.Server, node, path string, cfg LeaseConfig) *leaseProc {
	t.Helper()
	c, err := rediscli.New(rediscli.Options{URL: srv.URL(0), Name: node})
	if err != nil {
		t.Fatal(err)
	}
	n := &atomic.Int64{}
	c.AddHook(cmdCounter{n})
	if path == "" {
		path = filepath.Join(t.TempDir(), "lmlite.db")
	}
	store := openStore(t, path, SyncProcess)
	r := NewRedisShared(c, RedisOptions{KeyPrefix: "test:", Node: node, TTL: 5 * time.Second})
	ls := NewLeaseShared(r, LeaseOptions{LeaseConfig: cfg, Store: store})
	ten := New(store)
	ten.UseShared(ls)
	p := &leaseProc{ten, ls, store, c, n}
	t.Cleanup(func() { ls.Close(); c.Close(); store.Close() })
	return p
}

// kill stops p as kill -9 would, as far as Redis can tell: no more refreshes, its
// leases never given back. Its ledger is closed as written.
func (p *leaseProc) kill() {
	close(p.ls.stop)
	<-p.ls.done
	p.ls.RedisShared.Close()
	p.store.Close()
}

// request runs one request on p: admitted, its worst case reserved, settled at cost.
func (p *leaseProc) request(q *Quota, worst, cost money.Money) error {
	now := time.Now()
	tk, err := p.ten.Admit(q, now, 10)
	if err != nil {
		return err
	}
	if err := tk.Reserve(now, worst); err != nil {
		tk.Settle(Entry{Time: now, Status: 402})
		return err
	}
	_, err = tk.Settle(Entry{Time: now, Status: 200, PromptTokens: 10, CompletionTokens: 10, Cost: cost})
	return err
}

func redisHeld(t *testing.T, c redis.UniversalClient, tenant string) (held, slots int64) {
	v, err := c.HMGet(context.Background(), "test:t:{"+tenant+"}:s", "=held", "=n").Result()
	if err != nil {
		t.Fatal(err)
	}
	get := func(x any) int64 {
		s, _ := x.(string)
		var n int64
		for _, ch := range s {
			n = n*10 + int64(ch-'0')
		}
		return n
	}
	return get(v[0]), get(v[1])
}

// TestLeaseNeverOverspendsAcrossProcesses hammers one tenant from three processes
// sharing one Redis, each request charged its whole worst case: the ledgers never sum
// past the day's ceiling, the tenant gets all but a few requests' worth of it, and
// after Close Redis's spend equals the ledgers' to the cent with nothing held.
func TestLeaseNeverOverspendsAcrossProcesses(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	period := 200 * time.Millisecond
	ps := []*leaseProc{newLeaseProc(t, srv, "a", "", period), newLeaseProc(t, srv, "b", "", period), newLeaseProc(t, srv, "c", "", period)}
	worst := money.USD(0.001)
	ceiling := 300*worst + worst/2
	q := &Quota{Tenant: "hammer", DailyBudget: ceiling, MaxConcurrency: 64, RequestsPerSecond: 100000, Burst: 100000, TokensPerMinute: 100000000}
	deadline := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	var ok atomic.Int64
	for g := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := ps[g%3]
			for time.Now().Before(deadline) {
				err := p.request(q, worst, worst)
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, ErrInsufficientQuota), errors.Is(err, ErrLimited):
					time.Sleep(5 * time.Millisecond)
				default:
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	var sum money.Money
	for _, p := range ps {
		sum += ledgerSum(t, p.store)
	}
	if sum > ceiling {
		t.Fatalf("ledgers sum to %v, past the ceiling %v", sum, ceiling)
	}
	if sum < ceiling-3*worst {
		t.Errorf("ledgers sum to %v: more than one worst case per process under the ceiling %v", sum, ceiling)
	}
	for _, p := range ps {
		p.ls.Close()
	}
	day, _, err := ps[0].ls.RedisShared.Spent(q.Tenant, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if held, slots := redisHeld(t, ps[0].c, q.Tenant); day != sum || held != 0 || slots != 0 {
		t.Fatalf("after Close Redis has spent %v (ledgers %v), held %v, slots %d: want equal, 0, 0", day, sum, money.Money(held), slots)
	}
	t.Logf("%d requests served, ledgers %v of %v", ok.Load(), sum, ceiling)
}

// TestLeaseServesWithoutRoundTrips: once a lease covers a tenant, its requests
// (admission, tokens/min check, reservation, settlement) send nothing to Redis.
func TestLeaseServesWithoutRoundTrips(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	p := newLeaseProc(t, srv, "a", "", 10*time.Second)
	worst := money.USD(0.001)
	q := &Quota{Tenant: "quiet", DailyBudget: money.USD(100), MaxConcurrency: 64, RequestsPerSecond: 1000, Burst: 1000, TokensPerMinute: 1000000}
	for range 3 { // the first goes one by one and asks for a lease
		if err := p.request(q, worst, worst/2); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	before := p.cmds.Load()
	for range 50 {
		now := time.Now()
		tk, err := p.ten.Admit(q, now, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := tk.CheckTokens(now, 10); err != nil {
			t.Fatal(err)
		}
		if err := tk.Reserve(now, worst); err != nil {
			t.Fatal(err)
		}
		if _, err := tk.Settle(Entry{Time: now, Cost: worst / 2, PromptTokens: 10}); err != nil {
			t.Fatal(err)
		}
	}
	if n := p.cmds.Load() - before; n > 6 {
		t.Fatalf("50 leased requests sent %d commands to Redis; want only a few refreshes", n)
	}
}

// TestLeaseKilledHolderReconciledAtRestart: a process killed holding a lease strands
// at most that lease (never overspent: Redis's spend plus what it holds stays under
// the ceiling), and its restart on the same ledger charges what the ledger settled
// beyond its reports and gives the rest back.
func TestLeaseKilledHolderReconciledAtRestart(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	path := filepath.Join(t.TempDir(), "lmlite.db")
	a := newLeaseProc(t, srv, "a", path, 10*time.Second) // no periodic refresh: settlements stay unreported
	worst := money.USD(0.001)
	ceiling := money.USD(1)
	q := &Quota{Tenant: "killed", DailyBudget: ceiling}
	var lease money.Money
	var granted bool
	for i := 0; i < 20 || (lease == 0 && i < 200); i++ { // until the lease covers some
		if err := a.request(q, worst, worst); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
		a.ls.mu.RLock()
		b := a.ls.books[q.Tenant]
		a.ls.mu.RUnlock()
		b.mu.Lock()
		lease, granted = b.money, b.granted
		b.mu.Unlock()
	}
	if !granted || lease == 0 {
		t.Fatalf("a holds no lease after 20 requests (granted %v, %v)", granted, lease)
	}
	ledger := ledgerSum(t, a.store)
	a.kill()
	r := newLeaseProc(t, srv, "watch", "", time.Second)
	spent, _, _ := r.ls.RedisShared.Spent(q.Tenant, time.Now())
	held, _ := redisHeld(t, r.c, q.Tenant)
	if money.Money(held) > lease {
		t.Fatalf("Redis holds %v after a died holding a lease of %v", money.Money(held), lease)
	}
	if spent+money.Money(held) < ledger {
		t.Fatalf("overspendable: Redis's spend %v + held %v < a's ledger %v", spent, money.Money(held), ledger)
	}
	t.Logf("stranded: lease %v, Redis spent %v held %v, a's ledger %v", lease, spent, money.Money(held), ledger)

	a2 := newLeaseProc(t, srv, "a2", path, 10*time.Second) // restarted on a's ledger
	back, err := a2.ls.Reconcile()
	if err != nil {
		t.Fatal(err)
	}
	spent, _, _ = r.ls.RedisShared.Spent(q.Tenant, time.Now())
	held, _ = redisHeld(t, r.c, q.Tenant)
	if spent != ledger || held != 0 {
		t.Fatalf("after reconciliation Redis has spent %v held %v; want the ledger's %v and 0", spent, money.Money(held), ledger)
	}
	if back != lease {
		t.Fatalf("reconciliation released %v, want the lease %v", back, lease)
	}
	if back, _ := a2.ls.Reconcile(); back != 0 {
		t.Fatalf("a second reconciliation released %v more", back)
	}
}

// TestLeaseNearCeilingIdleLeaseComesBack: a tenant with money left spends it through
// another process while the first sits on an idle lease: the idle lease is given back
// within a period, and near the ceiling requests go one by one.
func TestLeaseNearCeilingIdleLeaseComesBack(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	period := 200 * time.Millisecond
	a, b := newLeaseProc(t, srv, "a", "", period), newLeaseProc(t, srv, "b", "", period)
	worst := money.USD(0.01)
	ceiling := 20 * worst
	q := &Quota{Tenant: "near", DailyBudget: ceiling}
	for range 5 { // a leases and goes idle
		if err := a.request(q, worst, worst/10); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	var spentB money.Money
	for time.Since(start) < 3*time.Second {
		err := b.request(q, worst, worst)
		if err == nil {
			spentB += worst
			continue
		}
		if !errors.Is(err, ErrInsufficientQuota) {
			t.Fatal(err)
		}
		if left := ceiling - ledgerSum(t, a.store) - spentB; left < worst {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	total := ledgerSum(t, a.store) + ledgerSum(t, b.store)
	if total > ceiling || ceiling-total >= worst {
		t.Fatalf("a and b spent %v of %v in %v: want all but less than one worst case, never more", total, ceiling, time.Since(start))
	}
	t.Logf("b spent %v; all spent %v after %v", spentB, total, time.Since(start))
}

// TestLeaseReturnedOnClose: Close reports every settlement and gives the money and
// slots back: nothing held, the lease forgotten, Redis's spend the ledger's.
func TestLeaseReturnedOnClose(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a := newLeaseProc(t, srv, "a", "", 10*time.Second)
	w := newLeaseProc(t, srv, "watch", "", time.Second)
	worst := money.USD(0.001)
	q := &Quota{Tenant: "closing", DailyBudget: money.USD(1), MaxConcurrency: 10}
	for range 30 {
		if err := a.request(q, worst, worst/3); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if held, _ := redisHeld(t, w.c, q.Tenant); held == 0 {
		t.Fatal("a holds no lease in Redis before Close")
	}
	a.ls.Close()
	spent, _, _ := w.ls.RedisShared.Spent(q.Tenant, time.Now())
	held, slots := redisHeld(t, w.c, q.Tenant)
	if spent != ledgerSum(t, a.store) || held != 0 || slots != 0 {
		t.Fatalf("after Close: Redis spent %v (ledger %v), held %v, slots %d", spent, ledgerSum(t, a.store), money.Money(held), slots)
	}
	if n, _ := w.c.Keys(context.Background(), "test:*lease*").Result(); len(n) != 0 {
		t.Fatalf("lease keys left after Close: %v", n)
	}
}

// TestLeaseKilledHolderReleasedFromItsLedger: a process killed holding a lease that
// never returns is reconciled by an operator from its ledger (ReconcileLeases, what
// lmlite ledger verify --release runs): the ledger's spend charged, the rest back.
func TestLeaseKilledHolderReleasedFromItsLedger(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	path := filepath.Join(t.TempDir(), "lmlite.db")
	a := newLeaseProc(t, srv, "a", path, 10*time.Second)
	worst := money.USD(0.001)
	q := &Quota{Tenant: "gone", DailyBudget: money.USD(1)}
	for i := 0; i < 200; i++ {
		if err := a.request(q, worst, worst/2); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
		if held, _ := redisHeld(t, a.c, q.Tenant); i >= 20 && held > 0 {
			break
		}
	}
	a.kill()
	w := newLeaseProc(t, srv, "operator", "", time.Second)
	if held, _ := redisHeld(t, w.c, q.Tenant); held == 0 {
		t.Fatal("nothing stranded: a held no lease when it died")
	}
	store := openStore(t, path, SyncProcess) // a's ledger, its server gone
	defer store.Close()
	ledger := ledgerSum(t, store)
	sums, err := LeaseSums(store)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReconcileLeases(w.c, "test:", store.ID(), "", sums); err != nil {
		t.Fatal(err)
	}
	spent, _, _ := w.ls.RedisShared.Spent(q.Tenant, time.Now())
	held, _ := redisHeld(t, w.c, q.Tenant)
	if spent != ledger || held != 0 {
		t.Fatalf("after the release Redis has spent %v held %v; want the ledger's %v and 0", spent, money.Money(held), ledger)
	}
}

// TestLeaseSpendWithoutBudgetReported: a tenant with rates but no budget is served from
// its lease too, and what it spends still reaches Redis's spend (as on the per-request
// path), reported with the refreshes: after Close Redis's spend is the ledger's.
func TestLeaseSpendWithoutBudgetReported(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a := newLeaseProc(t, srv, "a", "", 200*time.Millisecond)
	q := &Quota{Tenant: "nobudget", RequestsPerSecond: 1000, Burst: 1000, MaxConcurrency: 8}
	for range 50 {
		if err := a.request(q, money.USD(0.01), money.USD(0.004)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	a.ls.Close()
	spent, _, _ := a.ls.RedisShared.Spent(q.Tenant, time.Now())
	if ledger := ledgerSum(t, a.store); spent != ledger {
		t.Fatalf("Redis's spend %v, the ledger's %v", spent, ledger)
	}
}

// TestLeaseRedisDownSpendsOnlyWhatWasLeased: with Redis down a process serves from its
// lease and no more (beyond it money fails closed, ErrUnavailable); the settlements made
// meanwhile reach Redis once it is back (the failed refresh resent as it was, charged
// once), and after Close Redis's spend is the ledger's.
func TestLeaseRedisDownSpendsOnlyWhatWasLeased(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Persist: true})
	a := newLeaseProc(t, srv, "a", "", 200*time.Millisecond)
	worst := money.USD(0.001)
	q := &Quota{Tenant: "outage", DailyBudget: money.USD(1)}
	var lease money.Money
	for i := 0; i < 500 && lease < 20*worst; i++ {
		if err := a.request(q, worst, worst); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
		a.ls.mu.RLock()
		b := a.ls.books[q.Tenant]
		a.ls.mu.RUnlock()
		b.mu.Lock()
		lease = b.money - b.resv - b.owedSum
		if b.sending != nil {
			lease -= b.sending.reported()
		}
		b.mu.Unlock()
	}
	srv.Kill()
	var during money.Money
	for {
		err := a.request(q, worst, worst)
		if err != nil {
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("with Redis down: %v, want ErrUnavailable once the lease is spent", err)
			}
			break
		}
		during += worst
		if during > money.USD(1) {
			t.Fatal("served without end while Redis was down")
		}
	}
	if during > lease || during == 0 {
		t.Fatalf("served %v while Redis was down, with %v free in the lease when it went", during, lease)
	}
	srv.Restart()
	back := time.Now()
	for a.request(q, worst, worst) != nil {
		if time.Since(back) > 3*time.Second {
			t.Fatal("not serving 3s after Redis returned")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("served %v from a lease of %v free while Redis was down; back after %v", during, lease, time.Since(back))
	a.ls.Close()
	spent, _, _ := a.ls.RedisShared.Spent(q.Tenant, time.Now())
	held, _ := redisHeld(t, a.c, q.Tenant)
	if ledger := ledgerSum(t, a.store); spent != ledger || held != 0 {
		t.Fatalf("after Close Redis has spent %v held %v, the ledger %v", spent, money.Money(held), ledger)
	}
}

// leaseFree is the free part of p's lease of tenant: money Redis holds for p that no
// request reserved or spent.
func leaseFree(p *leaseProc, tenant string) money.Money {
	p.ls.mu.RLock()
	b := p.ls.books[tenant]
	p.ls.mu.RUnlock()
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	v := b.viewLocked(time.Time{})
	return v.free()
}

// TestLeaseRedisDownKeepsServingFromLeaseUntilItsTermEnds: with Redis killed, a
// process keeps admitting a tenant's requests against what its lease still holds
// (its money, its slots, its request tokens, then this process's share of the
// requests/s limit) for as long as the outage lasts within the lease's term, however
// many refreshes fail meanwhile; past the term it refuses (ErrUnavailable, a 503).
// What it served during the outage is at most what the lease held free when Redis
// went; once Redis is back, it serves again and Redis's spend equals the ledger.
func TestLeaseRedisDownKeepsServingFromLeaseUntilItsTermEnds(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Persist: true})
	a := newLeaseProcWith(t, srv, "a", "", LeaseConfig{Period: time.Second, Term: 1500 * time.Millisecond})
	worst := money.USD(0.001)
	q := &Quota{Tenant: "term", DailyBudget: money.USD(1), RequestsPerSecond: 200, Burst: 20, MaxConcurrency: 8}
	// Demand of up to 100 requests/s builds a lease of a second's worth.
	for start := time.Now(); time.Since(start) < 1500*time.Millisecond || leaseFree(a, q.Tenant) < 40*worst; {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("no lease of 40 worst cases after 5 s: %v", leaseFree(a, q.Tenant))
		}
		if err := a.request(q, worst, worst); err != nil {
			t.Fatalf("building the lease at half the rate: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	free := leaseFree(a, q.Tenant)
	srv.Kill()
	killed := time.Now()
	// 25 requests/s for 1 s: within the lease's money and the term, more than its
	// request tokens (at most the burst, 20): the rest on this process's share of the rate.
	served, refused := 0, []error{}
	for time.Since(killed) < time.Second {
		if err := a.request(q, worst, worst); err != nil {
			refused = append(refused, err)
		} else {
			served++
		}
		time.Sleep(40 * time.Millisecond)
	}
	t.Logf("Redis down 1 s: served %d requests (%v) from a lease of %v free; refused %d", served, money.Money(served)*worst, free, len(refused))
	if len(refused) > 0 {
		t.Fatalf("refused %d of %d during the outage with the lease's money left (first: %v)", len(refused), served+len(refused), refused[0])
	}
	if money.Money(served)*worst > free {
		t.Fatalf("served %v during the outage, more than the %v the lease held free", money.Money(served)*worst, free)
	}
	// Past the term: refused, though the lease still has money.
	time.Sleep(time.Until(killed.Add(1600 * time.Millisecond)))
	if err := a.request(q, worst, worst); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("past the lease's term with Redis down: %v, want ErrUnavailable", err)
	}
	srv.Restart()
	back := time.Now()
	for a.request(q, worst, worst) != nil {
		if time.Since(back) > 3*time.Second {
			t.Fatal("not serving 3 s after Redis returned")
		}
		time.Sleep(20 * time.Millisecond)
	}
	a.ls.Close()
	spent, _, _ := a.ls.RedisShared.Spent(q.Tenant, time.Now())
	held, slots := redisHeld(t, a.c, q.Tenant)
	if ledger := ledgerSum(t, a.store); spent != ledger || held != 0 || slots != 0 {
		t.Fatalf("after Close Redis has spent %v held %v slots %d, the ledger %v", spent, money.Money(held), slots, ledger)
	}
}

// TestLeaseTenantAtHalfItsRateIsNeverRefused: a tenant at about half its requests/s
// limit, on one process serving it from leases, gets no rate refusal over 2 s: the
// lease takes request tokens ahead of use, but only beyond half the burst, so a
// request that finds the lease out of tokens between refreshes finds them in
// Redis's bucket on the per-request path (issue 37).
func TestLeaseTenantAtHalfItsRateIsNeverRefused(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a := newLeaseProcWith(t, srv, "a", "", LeaseConfig{Period: time.Second})
	defer a.ls.Close()
	worst := money.USD(0.001)
	q := &Quota{Tenant: "half", DailyBudget: money.USD(10), RequestsPerSecond: 200, Burst: 20, MaxConcurrency: 8}
	tick := time.NewTicker(10 * time.Millisecond) // at most 100 requests/s
	defer tick.Stop()
	served, refused := 0, []error{}
	for start := time.Now(); time.Since(start) < 2*time.Second; <-tick.C {
		if err := a.request(q, worst, worst); err != nil {
			refused = append(refused, err)
		} else {
			served++
		}
	}
	t.Logf("served %d requests in 2 s from leases, refused %d", served, len(refused))
	if len(refused) > 0 {
		t.Fatalf("refused %d of %d requests at half the rate (first: %v)", len(refused), served+len(refused), refused[0])
	}
	if served < 100 {
		t.Fatalf("served %d requests in 2 s, want at least 100 (half the rate, less the loaded machine's delays)", served)
	}
}

// TestLeaseRedisJustDownServesFromLeaseWhenOutOfRequestTokens: Redis dies while the
// lease is out of request tokens and no refresh has failed yet (the process does not
// know); the next request goes to the per-request path, which finds Redis down. It
// is served from the lease's money on this process's share of the rate, not refused,
// both when its worst case is reserved at admission (AdmitReserve, the gateway's
// path) and after it (Admit, then Reserve); once Redis is back, Redis's spend equals
// the ledger with nothing held.
func TestLeaseRedisJustDownServesFromLeaseWhenOutOfRequestTokens(t *testing.T) {
	for _, atAdmit := range []bool{true, false} {
		name := map[bool]string{true: "AdmitReserve", false: "Admit then Reserve"}[atAdmit]
		t.Run(name, func(t *testing.T) {
			srv := redistest.Start(t, redistest.Options{Persist: true})
			// A long period: no refresh of its own during the test.
			a := newLeaseProcWith(t, srv, "a", "", LeaseConfig{Period: 10 * time.Second})
			worst := money.USD(0.001)
			q := &Quota{Tenant: "justdown", DailyBudget: money.USD(1), RequestsPerSecond: 100, Burst: 20, MaxConcurrency: 8}
			for start := time.Now(); leaseFree(a, q.Tenant) < 10*worst; time.Sleep(10 * time.Millisecond) {
				if time.Since(start) > 5*time.Second {
					t.Fatalf("no lease of 10 worst cases after 5 s: %v", leaseFree(a, q.Tenant))
				}
				if err := a.request(q, worst, worst); err != nil {
					t.Fatalf("building the lease: %v", err)
				}
			}
			b := a.ls.books[q.Tenant]
			b.mu.Lock()
			b.reqTok, b.queued = 0, true // out of request tokens; no refresh kicked
			b.mu.Unlock()
			srv.Kill()
			now := time.Now()
			var tk *Ticket
			var err error
			if atAdmit {
				tk, err = a.ten.AdmitReserve(q, now, 10, worst)
			} else if tk, err = a.ten.Admit(q, now, 10); err == nil {
				if err = tk.Reserve(now, worst); err != nil {
					tk.Settle(Entry{Time: now, Status: 402})
				}
			}
			if err != nil {
				t.Fatalf("Redis just down, the lease holding %v free: %v", leaseFree(a, q.Tenant), err)
			}
			if _, err := tk.Settle(Entry{Time: now, Status: 200, PromptTokens: 10, CompletionTokens: 10, Cost: worst}); err != nil {
				t.Fatal(err)
			}
			srv.Restart()
			b.mu.Lock()
			b.queued = false
			b.mu.Unlock()
			for back := time.Now(); a.request(q, worst, worst) != nil; time.Sleep(20 * time.Millisecond) {
				if time.Since(back) > 5*time.Second {
					t.Fatal("not serving 5 s after Redis returned")
				}
			}
			a.ls.Close()
			spent, _, _ := a.ls.RedisShared.Spent(q.Tenant, time.Now())
			held, slots := redisHeld(t, a.c, q.Tenant)
			if ledger := ledgerSum(t, a.store); spent != ledger || held != 0 || slots != 0 {
				t.Fatalf("after Close Redis has spent %v held %v slots %d, the ledger %v", spent, money.Money(held), slots, ledger)
			}
		})
	}
}

// TestLeaseSlotServesPerRequestPathNearCeiling: near its ceiling a tenant's lease holds
// its only concurrency slot and no money (money goes one by one, the per-request
// way); a request then takes the lease's idle slot with its money reserved in Redis,
// not refused by the concurrency limit with nothing in flight; while it runs a second
// is refused by that limit; once stopped nothing is held (issue 37).
func TestLeaseSlotServesPerRequestPathNearCeiling(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a := newLeaseProc(t, srv, "a", "", 10*time.Second) // no periodic refresh during the test
	worst := money.USD(0.001)
	q := &Quota{Tenant: "nearslot", MaxConcurrency: 1, DailyBudget: 2 * worst}
	for start := time.Now(); ; time.Sleep(5 * time.Millisecond) {
		b := a.ls.books[q.Tenant]
		var slots int
		var leased money.Money
		if b != nil {
			b.mu.Lock()
			slots, leased = b.slots, b.money
			b.mu.Unlock()
		}
		if slots == 1 {
			if leased != 0 {
				t.Fatalf("the lease holds %v, want no money (nothing reserved yet)", leased)
			}
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("the lease holds no slot after 5 s")
		}
		if tk, err := a.ten.Admit(q, time.Now(), 0); err == nil { // asks for the lease
			tk.Settle(Entry{Time: time.Now(), Status: 200})
		}
	}
	now := time.Now()
	tk, err := a.ten.AdmitReserve(q, now, 0, worst)
	if err != nil {
		t.Fatalf("the lease's slot idle, money left for the request: %v", err)
	}
	var le *LimitError
	if _, err := a.ten.AdmitReserve(q, now, 0, worst); !errors.As(err, &le) || le.Reason != "concurrency" {
		t.Fatalf("the only slot in use: %v, want a concurrency limit", err)
	}
	if _, err := tk.Settle(Entry{Time: now, Status: 200, Cost: worst}); err != nil {
		t.Fatal(err)
	}
	if tk, err = a.ten.AdmitReserve(q, now, 0, worst); err != nil {
		t.Fatalf("the slot back, money left for one more: %v", err)
	}
	if _, err := tk.Settle(Entry{Time: now, Status: 200, Cost: worst}); err != nil {
		t.Fatal(err)
	}
	a.ls.Close()
	spent, _, _ := a.ls.RedisShared.Spent(q.Tenant, time.Now())
	held, slots := redisHeld(t, a.c, q.Tenant)
	if ledger := ledgerSum(t, a.store); spent != 2*worst || ledger != spent || held != 0 || slots != 0 {
		t.Fatalf("after Close Redis has spent %v held %v slots %d, the ledger %v; want %v spent, nothing held", spent, money.Money(held), slots, ledger, 2*worst)
	}
}

// TestLeaseFirstRequestNotRefusedForSlotsItsLeaseTook: a new tenant's first request
// goes the per-request way while it kicks the lease's first refresh, which may take
// every slot first; the request then runs on a slot of the lease rather than being
// refused by the concurrency limit with nothing in flight. 100 new tenants with 2
// slots, 2 requests each, none refused (before: 2 to 10 of 200, in 3 runs of 3) (issue 37).
func TestLeaseFirstRequestNotRefusedForSlotsItsLeaseTook(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a := newLeaseProc(t, srv, "a", "", time.Second)
	worst := money.USD(0.001)
	var refused []error
	for i := range 100 {
		q := &Quota{Tenant: "first" + strconv.Itoa(i), MaxConcurrency: 2, DailyBudget: money.USD(1)}
		for range 2 {
			if err := a.request(q, worst, worst); err != nil {
				refused = append(refused, err)
			}
		}
	}
	if len(refused) > 0 {
		t.Fatalf("%d of 200 requests refused, one at a time (first: %v)", len(refused), refused[0])
	}
}

// TestLeaseKilledBeforeHoldTicketReturnedAtRestart: a process dies between a
// request's reservation in Redis on the per-request path (its lease did not cover it)
// and the hold that records it in the ledger (logged once the request runs): its
// restart on the same ledger gives that ticket's money and slot back at once, and
// charges the ticket whose hold was logged exactly once (SettleInterrupted), so that
// nothing the dead process held stays counted in Redis after the restart.
func TestLeaseKilledBeforeHoldTicketReturnedAtRestart(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	path := filepath.Join(t.TempDir(), "lmlite.db")
	a := newLeaseProc(t, srv, "a", path, 10*time.Second)
	worst := money.USD(0.03)
	orphan := &Quota{Tenant: "orphan", DailyBudget: money.USD(1), MaxConcurrency: 8}
	held := &Quota{Tenant: "heldone", DailyBudget: money.USD(1), MaxConcurrency: 8}
	now := time.Now()
	// Each tenant's first request: no lease yet, so it is reserved in Redis on the
	// per-request path.
	if _, err := a.ten.AdmitReserve(orphan, now, 10, worst); err != nil {
		t.Fatal(err)
	}
	tk, err := a.ten.AdmitReserve(held, now, 10, worst)
	if err != nil {
		t.Fatal(err)
	}
	if err := tk.Hold(now, Entry{RequestID: "r-held", Model: "m"}); err != nil {
		t.Fatal(err)
	}
	// The fault: killed after orphan's reservation reached Redis, before its hold.
	a.kill()
	if h, _ := redisHeld(t, srv0Client(t, srv), orphan.Tenant); money.Money(h) < worst {
		t.Fatalf("orphan's reservation not in Redis after the kill: held %v", money.Money(h))
	}

	a2 := newLeaseProc(t, srv, "a", path, 10*time.Second) // restarted on a's ledger, at once
	if _, err := a2.ls.Reconcile(); err != nil {
		t.Fatal(err)
	}
	n, err := a2.ten.SettleInterrupted(func(tenant string) *Quota {
		if tenant == held.Tenant {
			return held
		}
		return orphan
	})
	if err != nil || n != 1 {
		t.Fatalf("SettleInterrupted: %d, %v; want the one held request", n, err)
	}
	for _, q := range []*Quota{orphan, held} {
		m, slots := redisHeld(t, a2.c, q.Tenant)
		spent, _, _ := a2.ls.RedisShared.Spent(q.Tenant, time.Now())
		want := money.Money(0)
		if q == held {
			want = worst
		}
		if m != 0 || slots != 0 || spent != want {
			t.Errorf("%s after the restart: held %v, slots %d, spent %v; want nothing held and spent %v",
				q.Tenant, money.Money(m), slots, spent, want)
		}
	}
	if back, err := a2.ls.Reconcile(); err != nil || back != 0 {
		t.Fatalf("a second reconciliation gave back %v (%v)", back, err)
	}
}

// srv0Client is a client of srv, closed with the test.
func srv0Client(t *testing.T, srv *redistest.Server) redis.UniversalClient {
	t.Helper()
	c, err := rediscli.New(rediscli.Options{URL: srv.URL(0), Name: "watch"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestLeaseExactWaitEndsAtTheRequestsDeadline: a request the per-request path refuses
// while its lease's refresh is under way waits for that refresh until a quarter
// period after its own time (the now it is admitted at), not after the wall clock's:
// a request whose now is a period old has no wait left and is refused at once, not a
// quarter period (15 minutes here) later.
func TestLeaseExactWaitEndsAtTheRequestsDeadline(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a := newLeaseProc(t, srv, "a", "", time.Hour)
	q := &Quota{Tenant: "deadline", DailyBudget: money.USD(1)}
	b := a.ls.book(q)
	b.mu.Lock()
	b.queued = true // a refresh under way, never answered here
	wait := b.answered
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.queued = false
		close(wait)
		b.answered = make(chan struct{})
		b.mu.Unlock()
	}()
	done := make(chan error, 1)
	go func() {
		_, err := a.ls.admitExact(b, q, "r1", time.Now().Add(-time.Hour), 0, money.USD(2))
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrInsufficientQuota) {
			t.Fatalf("a $2 request on a $1 budget: %v, want ErrInsufficientQuota", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a request an hour old still waits for the refresh: its deadline ran from the wall clock, not from its now")
	}
}

// TestLeaseMoneyServesReservesRedisRefuses: money a lease holds free serves a
// reservation Redis refuses (what is left beyond the leases short of it): all of it
// for a request admitted on the per-request path before the lease was granted, and
// near the ceiling a free part under the request's worst case together with what
// Redis has left (part from the lease, the rest reserved in Redis). Before, both were
// refused unless a refresh happened to be under way: in
// TestRedisBudgetAcrossThreeGateways a process whose first requests were admitted
// before its lease was granted refused them all with ten worst cases in its lease,
// and 300 concurrent requests left up to that much unspent.
func TestLeaseMoneyServesReservesRedisRefuses(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a := newLeaseProc(t, srv, "a", "", 10*time.Second) // no periodic refresh during the test
	burn := newLeaseProc(t, srv, "burn", "", time.Second)
	worst := money.USD(0.01)
	q := &Quota{Tenant: "late", DailyBudget: 40 * worst}
	now := time.Now()
	early, err := a.ten.Admit(q, now, 10) // no lease yet: the per-request path
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // their demand sizes the lease (the second one's refresh, MinGap after the first)
		time.Sleep(50 * time.Millisecond)
		if err := a.request(q, worst, worst); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // the lease's refresh answered
	// burnTo reserves in Redis (another process's request) all that is left beyond
	// the leases but keep.
	burnTo := func(keep money.Money, id string) {
		t.Helper()
		spent, _, _ := burn.ls.RedisShared.Spent(q.Tenant, time.Now())
		held, _ := redisHeld(t, burn.c, q.Tenant)
		left := q.DailyBudget - spent - money.Money(held)
		if left <= keep {
			t.Fatalf("Redis has %v left beyond the leases: want more than %v", left, keep)
		}
		if _, err := burn.ls.RedisShared.Admit(q, id, time.Now(), 0, left-keep); err != nil {
			t.Fatalf("burning %v of %v: %v", left-keep, left, err)
		}
	}
	f := leaseFree(a, q.Tenant)
	if f < 2*worst {
		t.Fatalf("a's lease holds %v free: want two worst cases at least", f)
	}
	burnTo(worst/2, "burn1")
	if err := early.Reserve(now, worst); err != nil {
		t.Fatalf("admitted before the lease was granted: %v free in the lease, %v in Redis, refused a reservation of %v: %v", f, worst/2, worst, err)
	}
	if _, err := early.Settle(Entry{Time: now, Status: 200, Cost: worst}); err != nil {
		t.Fatal(err)
	}

	f = leaseFree(a, q.Tenant)
	tk, err := a.ten.Admit(q, now, 10) // from the lease
	if err != nil {
		t.Fatal(err)
	}
	total := f + worst/2
	if err := tk.Reserve(now, total); err != nil {
		t.Fatalf("%v free in the lease and %v in Redis refused a reservation of %v: %v", f, worst/2, total, err)
	}
	if _, err := tk.Settle(Entry{Time: now, Status: 200, Cost: total}); err != nil {
		t.Fatal(err)
	}
	a.ls.Close()
	spent, _, _ := burn.ls.RedisShared.Spent(q.Tenant, time.Now())
	if got := ledgerSum(t, a.store); spent != got || got != 3*worst+total {
		t.Fatalf("Redis spent %v, a's ledger %v: want %v", spent, got, 3*worst+total)
	}
}

// TestLeaseReserveWaitEndsAtTheRequestsDeadline: Reserve's two waits for a refresh
// (a ticket the lease does not hold, and one it does) end a quarter period after the
// request's own now, as admitExact's does, measured on the configured clock
// (LeaseOptions.Now), not on the wall clock: a reservation dated a period ago, or one
// whose clock is a period ahead of the wall's, has no wait left and is refused at
// once, not a quarter period (15 minutes here) later. Before, both deadlines were
// time.Now() plus a quarter period, and the wait was measured with time.Until.
func TestLeaseReserveWaitEndsAtTheRequestsDeadline(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	for _, c := range []struct {
		name  string
		clock func() time.Time // LeaseOptions.Now; nil: time.Now
		at    func() time.Time // the request's now
	}{
		{"an hour-old now", nil, func() time.Time { return time.Now().Add(-time.Hour) }},
		{"a clock an hour ahead", func() time.Time { return time.Now().Add(time.Hour) }, time.Now},
	} {
		for _, held := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/held by the lease %v", c.name, held), func(t *testing.T) {
				cl, err := rediscli.New(rediscli.Options{URL: srv.URL(0), Name: "a"})
				if err != nil {
					t.Fatal(err)
				}
				store := openStore(t, filepath.Join(t.TempDir(), "lmlite.db"), SyncProcess)
				r := NewRedisShared(cl, RedisOptions{KeyPrefix: "test:", Node: "a", TTL: 5 * time.Second})
				ls := NewLeaseShared(r, LeaseOptions{LeaseConfig: LeaseConfig{Period: time.Hour}, Store: store, Now: c.clock})
				t.Cleanup(func() { ls.Close(); cl.Close(); store.Close() })
				q := &Quota{Tenant: fmt.Sprintf("reserve-deadline-%v-%v", c.clock != nil, held), DailyBudget: money.USD(1)}
				b := ls.book(q)
				b.mu.Lock()
				b.queued = true // a refresh under way, never answered here
				wait := b.answered
				if held {
					b.tickets["r1"] = leaseTicket{} // served from the lease, nothing reserved yet
				}
				b.mu.Unlock()
				defer func() {
					b.mu.Lock()
					b.queued = false
					close(wait)
					b.answered = make(chan struct{})
					b.mu.Unlock()
				}()
				done := make(chan error, 1)
				go func() {
					_, err := ls.Reserve(q, "r1", c.at(), money.USD(2))
					done <- err
				}()
				select {
				case err := <-done:
					if !errors.Is(err, ErrInsufficientQuota) {
						t.Fatalf("$2 on a $1 budget: %v, want ErrInsufficientQuota", err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("Reserve still waits for the refresh: its deadline ran from the wall clock, not from its now and the configured clock")
				}
			})
		}
	}
}
