package tenancy

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/internal/redistest"
	"github.com/lmlite/lmlite/money"
)

// bankUnderTest is a leaseBank and how to read its state back.
type bankUnderTest struct {
	leaseBank
	spent func(tenant string, now time.Time) money.Money // the day's
	held  func(tenant string) money.Money
}

// banks are the two leaseBanks, the same tests run against both.
func banks(t *testing.T) map[string]func() bankUnderTest {
	return map[string]func() bankUnderTest{
		"memory": func() bankUnderTest {
			m := newMemBank()
			return bankUnderTest{m,
				func(tenant string, now time.Time) money.Money {
					d, _ := windows(now)
					m.mu.Lock()
					defer m.mu.Unlock()
					return m.spent[memWin(tenant, 'd', d)]
				},
				func(tenant string) money.Money { m.mu.Lock(); defer m.mu.Unlock(); return m.held[tenant] }}
		},
		"redis": func() bankUnderTest {
			srv := redistest.Start(t, redistest.Options{})
			c, err := rediscli.New(rediscli.Options{URL: srv.URL(0), Name: "bank"})
			if err != nil {
				t.Fatal(err)
			}
			r := NewRedisShared(c, RedisOptions{KeyPrefix: "test:", Node: "n"})
			t.Cleanup(func() { r.Close(); c.Close() })
			return bankUnderTest{&redisBank{r: r, owner: "o"},
				func(tenant string, now time.Time) money.Money { d, _, _ := r.Spent(tenant, now); return d },
				func(tenant string) money.Money { h, _ := r.Held(tenant); return h }}
		},
	}
}

// TestLeaseBankGrantsWithinTheCeiling: a lease grows only by what fits under the
// ceiling beyond every other lease and the reserve left to the per-request path,
// shrinks to what is asked, and a report is charged once per seq (a retried refresh
// charges nothing again) — in memory and in Redis alike.
func TestLeaseBankGrantsWithinTheCeiling(t *testing.T) {
	for name, mk := range banks(t) {
		t.Run(name, func(t *testing.T) {
			b := mk()
			w := money.USD(0.01)
			q := &Quota{Tenant: "t", DailyBudget: 100 * w, MaxConcurrency: 10}
			now := time.Now()
			d, m := windows(now)
			g, err := b.refresh(q, now, &leaseAsk{Lease: "A", Seq: 1, Money: 60 * w, Slots: 6, Reserve: 4 * w})
			if err != nil || g.Money != 48*w || g.Slots != 6 || g.Left != 52*w {
				t.Fatalf("A's first lease = %+v, %v; want 48w (half of 100 less the reserve of 4), 6 slots, 52w left", g, err)
			}
			g, _ = b.refresh(q, now, &leaseAsk{Lease: "B", Seq: 1, Money: 60 * w, Slots: 6, Reserve: 4 * w})
			if g.Money != 24*w || g.Slots != 4 || g.Left != 28*w {
				t.Fatalf("B's lease = %+v; want 24w (half of 52 left less the reserve of 4), 4 slots, 28w left", g)
			}
			rep := []leaseReport{{Day: d, Month: m, Amount: 30 * w}}
			for range 2 { // the same refresh twice: a retry after a lost answer
				g, _ = b.refresh(q, now, &leaseAsk{Lease: "A", Seq: 2, Reports: rep, Money: 10 * w, Slots: 1, Reserve: 4 * w})
				if g.Money != 10*w || g.Slots != 1 {
					t.Fatalf("A after reporting 30w and shrinking = %+v; want 10w, 1 slot", g)
				}
			}
			if s := b.spent("t", now); s != 30*w {
				t.Fatalf("spent %v after one report of 30w sent twice, want 30w", s)
			}
			if h := b.held("t"); h != 34*w {
				t.Fatalf("held %v, want A's 10w + B's 24w", h)
			}
		})
	}
}

// TestLeaseBankReconcile: a dead holder's lease is closed from its ledger: each window
// raised to what the ledger says it settled (never lowered), the rest given back, and
// a second reconciliation changes nothing.
func TestLeaseBankReconcile(t *testing.T) {
	for name, mk := range banks(t) {
		t.Run(name, func(t *testing.T) {
			b := mk()
			w := money.USD(0.01)
			q := &Quota{Tenant: "t", DailyBudget: 100 * w}
			now := time.Now()
			d, m := windows(now)
			b.refresh(q, now, &leaseAsk{Lease: "A", Seq: 1, Money: 50 * w})
			b.refresh(q, now, &leaseAsk{Lease: "A", Seq: 2, Reports: []leaseReport{{d, m, 10 * w}}, Money: 40 * w})
			// The ledger holds 25w from the lease: 15w settled after the last report.
			for i := range 2 {
				back, err := b.reconcile("t", "A", map[int]money.Money{d: 25 * w, m: 25 * w})
				if err != nil {
					t.Fatal(err)
				}
				if want := [2]money.Money{40 * w, 0}[i]; back != want {
					t.Fatalf("reconciliation %d gave back %v, want %v", i+1, back, want)
				}
				if s, h := b.spent("t", now), b.held("t"); s != 25*w || h != 0 {
					t.Fatalf("after reconciliation %d: spent %v held %v, want 25w and 0", i+1, s, h)
				}
			}
		})
	}
}

var _ = filepath.Join
