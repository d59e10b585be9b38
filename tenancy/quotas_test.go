package tenancy

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/lmlite/lmlite/internal/redistest"
	"github.com/lmlite/lmlite/money"
)

// quotaImpls is every implementation of the quotas and budgets (Shared): in-process
// (localQuotas), Redis per request (RedisShared) and Redis leases (LeaseShared), each
// behind a fresh Tenancy on its own store; the Redis ones share one real redis-server
// on a free loopback port, each test on its own tenant.
func quotaImpls(t *testing.T) map[string]func(t *testing.T) *Tenancy {
	srv := redistest.Start(t, redistest.Options{}) // the parent test's: outlives the subtests
	redisTen := func(t *testing.T, leases bool) *Tenancy {
		c := srv0Client(t, srv)
		store := openStore(t, filepath.Join(t.TempDir(), "lmlite.db"), SyncProcess)
		sh := NewRedisShared(c, RedisOptions{KeyPrefix: "test:", Node: "n", TTL: 5 * time.Second})
		ten := New(store)
		if leases {
			ls := NewLeaseShared(sh, LeaseOptions{Store: store})
			ten.UseShared(ls)
			t.Cleanup(ls.Close)
		} else {
			ten.UseShared(sh)
		}
		t.Cleanup(func() { sh.Close(); store.Close() })
		return ten
	}
	return map[string]func(t *testing.T) *Tenancy{
		"in-process": func(t *testing.T) *Tenancy {
			s := openStore(t, filepath.Join(t.TempDir(), "lmlite.db"), SyncProcess)
			t.Cleanup(func() { s.Close() })
			return New(s)
		},
		"redis":        func(t *testing.T) *Tenancy { return redisTen(t, false) },
		"redis-leases": func(t *testing.T) *Tenancy { return redisTen(t, true) },
	}
}

// TestQuotasBudgetExactAcrossReserveReleaseSettle: the same budget contract on every
// implementation. A reservation over what is left is refused and takes nothing; a
// released reservation is free again; a settlement above its reservation is charged
// the reservation (a ceiling is never overrun); what is left afterwards is exactly the
// ceiling less what was charged, to the nano-dollar.
func TestQuotasBudgetExactAcrossReserveReleaseSettle(t *testing.T) {
	for name, open := range quotaImpls(t) {
		t.Run(name, func(t *testing.T) {
			ten := open(t)
			unit := money.USD(0.001)
			q := &Quota{Tenant: "budget-" + name, DailyBudget: 10 * unit}
			now := time.Now()
			a, err := ten.AdmitReserve(q, now, 0, 6*unit)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ten.AdmitReserve(q, now, 0, 5*unit); !errors.Is(err, ErrInsufficientQuota) {
				t.Fatalf("5 of the 4 left: %v, want ErrInsufficientQuota", err)
			}
			a.Release()
			b, err := ten.AdmitReserve(q, now, 0, 5*unit)
			if err != nil {
				t.Fatalf("5 of the 10 left after a release: %v", err)
			}
			if err := a.Reserve(now, 5*unit); err != nil {
				t.Fatalf("the released ticket reserving the other 5: %v", err)
			}
			if charged, err := a.Settle(Entry{Time: now, Cost: 9 * unit}); err != nil || charged != 5*unit {
				t.Fatalf("settling 9 on a reservation of 5: charged %v (%v), want %v", charged, err, 5*unit)
			}
			if charged, err := b.Settle(Entry{Time: now, Cost: 2 * unit}); err != nil || charged != 2*unit {
				t.Fatalf("settling 2: charged %v (%v)", charged, err)
			}
			// 7 charged: exactly 3 left.
			if _, err := ten.AdmitReserve(q, now, 0, 3*unit+1); !errors.Is(err, ErrInsufficientQuota) {
				t.Fatalf("3 units and 1 nano-dollar of the 3 left: %v, want ErrInsufficientQuota", err)
			}
			c, err := ten.AdmitReserve(q, now, 0, 3*unit)
			if err != nil {
				t.Fatalf("the 3 left: %v", err)
			}
			if _, err := c.Settle(Entry{Time: now, Cost: 3 * unit}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestQuotasConcurrencyAndRate: the same quota contract on every implementation. A
// tenant at its concurrency limit is refused with "concurrency" until a settlement
// frees a slot; past its requests/s burst it is refused with "requests"; a refusal
// takes nothing.
func TestQuotasConcurrencyAndRate(t *testing.T) {
	for name, open := range quotaImpls(t) {
		t.Run(name, func(t *testing.T) {
			ten := open(t)
			now := time.Now()
			limit := func(err error) string {
				var le *LimitError
				if errors.As(err, &le) {
					return le.Reason
				}
				return ""
			}
			q := &Quota{Tenant: "slots-" + name, MaxConcurrency: 2}
			a, err1 := ten.Admit(q, now, 0)
			b, err2 := ten.Admit(q, now, 0)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			if _, err := ten.Admit(q, now, 0); limit(err) != "concurrency" {
				t.Fatalf("a third request with 2 in flight: %v, want a concurrency limit", err)
			}
			if _, err := a.Settle(Entry{Time: now}); err != nil {
				t.Fatal(err)
			}
			var c *Ticket
			var err error
			// With leases the slot comes back to the lease at once; allow the refresh.
			for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				if c, err = ten.Admit(q, time.Now(), 0); err == nil || time.Now().After(deadline) {
					break
				}
			}
			if err != nil {
				t.Fatalf("a request after a settlement freed a slot: %v", err)
			}
			b.Settle(Entry{Time: now})
			c.Settle(Entry{Time: now})

			r := &Quota{Tenant: "rate-" + name, RequestsPerSecond: 0.001, Burst: 1}
			d, err := ten.Admit(r, now, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ten.Admit(r, now, 0); limit(err) != "requests" {
				t.Fatalf("a second request, burst 1 at 1 per 1000 s: %v, want a requests limit", err)
			}
			d.Settle(Entry{Time: now})
		})
	}
}
