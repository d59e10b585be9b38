package tenancy

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/internal/redistest"
	"github.com/lmlite/lmlite/money"
)

// lineStores are the two ways a Tenancy keeps its money, for the tests that must hold
// for both: the store alone, and the store with a real Redis as the shared state.
// start opens (or, the second time, reopens: a restart) the Tenancy on dir's store;
// the returned func stops it.
var lineStores = []struct {
	name  string
	start func(t *testing.T, rs *redistest.Server, dir string) (*Tenancy, func())
}{
	{"store", func(t *testing.T, _ *redistest.Server, dir string) (*Tenancy, func()) {
		s := openStore(t, filepath.Join(dir, "lmlite.db"), SyncProcess)
		return New(s), func() { s.Close() }
	}},
	{"redis", func(t *testing.T, rs *redistest.Server, dir string) (*Tenancy, func()) {
		s := openStore(t, filepath.Join(dir, "lmlite.db"), SyncProcess)
		c, err := rediscli.New(rediscli.Options{URL: rs.URL(0), Name: "p"})
		if err != nil {
			t.Fatal(err)
		}
		sh := NewRedisShared(c, RedisOptions{KeyPrefix: "test:", Node: "p", TTL: 5 * time.Second})
		ten := New(s)
		ten.UseShared(withTestLeases(t, sh, s))
		return ten, func() { sh.Close(); c.Close(); s.Close() }
	}},
}

// TestClientRequestIDIsNotALineCharge: a tenant's interactive request whose client
// id (X-Request-Id) is a batch line's id, and an entry of an older version whose
// request id looks like a line's, are not taken for the line's charge after a
// restart; only a settlement of the line's own ticket is, and only for its tenant.
// (Before client ids were kept apart, the gateway took every request id starting with
// "batch_" for a charged line, and ran the line for free after a restart.)
func TestClientRequestIDIsNotALineCharge(t *testing.T) {
	for _, st := range lineStores {
		t.Run(st.name, func(t *testing.T) {
			var rs *redistest.Server
			if st.name == "redis" {
				rs = redistest.Start(t, redistest.Options{})
			}
			dir := t.TempDir()
			now := time.Now()
			q := &Quota{Tenant: "t", DailyBudget: money.USD(1)}
			ten, stop := st.start(t, rs, dir)
			// The tenant's cheap request, with the line's id as its X-Request-Id (and a
			// Line the caller has no say over).
			tk, err := ten.AdmitReserve(q, now, 10, money.USD(0.001))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tk.Settle(Entry{Time: now, RequestID: "req_1", ClientRequestID: "batch_1-0", Line: "batch_1-0",
				Status: 200, Cost: money.USD(0.0001)}); err != nil {
				t.Fatal(err)
			}
			// An older version's entry: the client's id as the request id.
			if err := ten.Store().Record(Entry{Time: now, RequestID: "batch_1-1", Tenant: "t", Status: 200, Cost: money.USD(0.0001)}); err != nil {
				t.Fatal(err)
			}
			// Line 2 of tenant t, and line 3 of tenant u, really charged.
			for _, l := range []struct {
				tenant, line string
				cost         money.Money
			}{{"t", "batch_1-2", money.USD(0.02)}, {"u", "batch_1-3", money.USD(0.03)}} {
				lq := &Quota{Tenant: l.tenant, DailyBudget: money.USD(1)}
				tk, err := ten.AdmitBatchLine(lq, now, l.line)
				if err != nil {
					t.Fatal(err)
				}
				if err := tk.Reserve(now, money.USD(0.05)); err != nil {
					t.Fatal(err)
				}
				if _, err := tk.Settle(Entry{Time: now, RequestID: l.line, Status: 200, Cost: l.cost}); err != nil {
					t.Fatal(err)
				}
			}
			stop()

			ten, stop = st.start(t, rs, dir) // the restart
			defer stop()
			if err := ten.LoadChargedLines(); err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				tenant, line string
				want         money.Money
				charged      bool
			}{
				{"t", "batch_1-0", 0, false},
				{"t", "batch_1-1", 0, false},
				{"t", "batch_1-2", money.USD(0.02), true},
				{"t", "batch_1-3", 0, false},
				{"u", "batch_1-3", money.USD(0.03), true},
			} {
				got, ok, err := ten.LineCharged(c.tenant, c.line)
				if err != nil || ok != c.charged || got != c.want {
					t.Errorf("LineCharged(%s, %s) = %v %v %v, want %v %v", c.tenant, c.line, got, ok, err, c.want, c.charged)
				}
			}
		})
	}
}

// TestInterruptedHoldIsChargedAtRestart: a request held (Ticket.Hold) and never
// settled, its process gone, is charged its reservation when the store is next opened
// (SettleInterrupted), once: in the ledger, the spend and, with Redis, the shared
// spend; a request held and settled is charged what it settled, not its hold.
func TestInterruptedHoldIsChargedAtRestart(t *testing.T) {
	for _, st := range lineStores {
		t.Run(st.name, func(t *testing.T) {
			var rs *redistest.Server
			if st.name == "redis" {
				rs = redistest.Start(t, redistest.Options{})
			}
			dir := t.TempDir()
			now := time.Now()
			q := &Quota{Tenant: "t", DailyBudget: money.USD(1)}
			quota := func(string) *Quota { return q }
			ten, stop := st.start(t, rs, dir)
			done, err := ten.AdmitReserve(q, now, 10, money.USD(0.01))
			if err != nil {
				t.Fatal(err)
			}
			if err := done.Hold(now, Entry{RequestID: "req_done", Model: "m"}); err != nil {
				t.Fatal(err)
			}
			if _, err := done.Settle(Entry{Time: now, RequestID: "req_done", Status: 200, Cost: money.USD(0.002)}); err != nil {
				t.Fatal(err)
			}
			cut, err := ten.AdmitReserve(q, now, 10, money.USD(0.03))
			if err != nil {
				t.Fatal(err)
			}
			if err := cut.Hold(now, Entry{RequestID: "req_cut", ClientRequestID: "mine", Model: "m", PromptTokens: 10}); err != nil {
				t.Fatal(err)
			}
			stop() // the process dies with req_cut running

			want := money.USD(0.002) + money.USD(0.03)
			for restart := range 2 {
				ten, stop = st.start(t, rs, dir)
				n, err := ten.SettleInterrupted(quota)
				if err != nil || n != 1-restart {
					t.Fatalf("restart %d: SettleInterrupted = %d %v, want %d", restart, n, err, 1-restart)
				}
				var entries []Entry
				ten.Store().Ledger(func(e Entry) error { entries = append(entries, e); return nil })
				day, _, err := ten.Spent("t", now)
				if err != nil {
					t.Fatal(err)
				}
				dayLedger, _, _ := ten.Store().Spent("t", now)
				if day != want || dayLedger != want || len(entries) != 2 {
					t.Fatalf("restart %d: spent %v (ledger %v), want %v; entries %+v", restart, day, dayLedger, want, entries)
				}
				if e := entries[1]; e.RequestID != "req_cut" || e.ClientRequestID != "mine" || e.Cost != money.USD(0.03) ||
					e.Finish != FinishInterrupted || e.PromptTokens != 10 || e.Hold == 0 {
					t.Fatalf("restart %d: the interrupted request's entry %+v", restart, e)
				}
				stop()
			}
		})
	}
}

// TestHoldsReplayedFromTheLog: holds and the entries that settle them, still only in
// the log when the process dies (nothing applied to the database), are replayed at
// Open: the settled hold is closed, the other is interrupted, and a hold logged
// after an applied batch keeps its own sequence.
func TestHoldsReplayedFromTheLog(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "lmlite.db")
	s, err := Open(path, Options{Sync: SyncProcess, ApplyEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	h1, err := s.Hold(Hold{Time: now, RequestID: "req_1", Tenant: "t", Reserved: 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Record(Entry{Time: now, RequestID: "req_1", Tenant: "t", Status: 200, Cost: 3, Hold: h1}); err != nil {
		t.Fatal(err)
	}
	if err := s.sync(); err != nil { // one batch applied: h1 held and settled within it
		t.Fatal(err)
	}
	h2, err := s.Hold(Hold{Time: now, RequestID: "req_2", Tenant: "t", Reserved: 20})
	if err != nil {
		t.Fatal(err)
	}
	h3, err := s.Hold(Hold{Time: now, RequestID: "req_3", Tenant: "t", Reserved: 30})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Record(Entry{Time: now, RequestID: "req_3", Tenant: "t", Status: 200, Cost: 4, Hold: h3}); err != nil {
		t.Fatal(err)
	}
	// The process dies: its files as they are (copied while it holds them).
	killed := filepath.Join(t.TempDir(), "lmlite.db")
	des, _ := os.ReadDir(dir)
	for _, de := range des {
		b, err := os.ReadFile(filepath.Join(dir, de.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(filepath.Dir(killed), de.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	r, err := Open(killed, Options{Sync: SyncProcess})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := r.Interrupted(); len(got) != 1 || got[0].Seq != h2 || got[0].RequestID != "req_2" || got[0].Reserved != 20 {
		t.Fatalf("interrupted %+v, want req_2's hold %d", got, h2)
	}
	h4, err := r.Hold(Hold{Time: now, RequestID: "req_4", Tenant: "t"})
	if err != nil || h4 <= h3 {
		t.Fatalf("a new hold %d (%v), after %d", h4, err, h3)
	}
	if day, _, _ := r.Spent("t", now); day != 7 {
		t.Fatalf("spent %v, want 7", day)
	}
}
