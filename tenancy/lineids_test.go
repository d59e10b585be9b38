package tenancy

import (
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
		ten.UseShared(sh)
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
