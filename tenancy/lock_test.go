package tenancy

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/lmlite/lmlite/policies"
)

// TestStoreReadOutsideTenantLock: loading a budget window's spend from the store (a
// bbolt read, after the ledger is applied) must not hold the tenant's lock, or every
// request of the tenant, and the gauge that reads its requests in flight, queues
// behind the disk. The store is held busy (its apply lock taken) while a request of
// a new day is admitted; InFlight must still answer.
func TestStoreReadOutsideTenantLock(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), "lmlite.db"), SyncProcess)
	defer s.Close()
	ten := New(s)
	pol := policy(t, "a", policies.Plan{DailyBudgetUSD: 1})
	day1 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	tk, err := ten.Admit(pol, day1, 1)
	if err != nil {
		t.Fatal(err)
	}

	// The store is busy: a write transaction is open, and an entry waits to be
	// applied, so Spent (which applies the log first) waits for the transaction.
	tx, err := s.db.Begin(true)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Record(Entry{Time: day1, RequestID: "busy", Tenant: "b"}); err != nil {
		t.Fatal(err)
	}
	admitted := make(chan error, 1)
	go func() {
		tk2, err := ten.Admit(pol, day1.Add(24*time.Hour), 1) // a new day: reads the store
		if err == nil {
			_, err = tk2.Settle(Entry{Time: day1.Add(24 * time.Hour)})
		}
		admitted <- err
	}()
	time.Sleep(50 * time.Millisecond) // let Admit reach the store
	answered := make(chan int, 1)
	go func() { answered <- ten.InFlight("a") }()
	select {
	case n := <-answered:
		if n < 1 {
			t.Errorf("InFlight = %d, want ≥ 1", n)
		}
	case <-time.After(2 * time.Second):
		t.Error("InFlight waited for the store: the tenant's lock is held across a store read")
		defer func() { <-answered }()
	}
	tx.Rollback()
	if err := <-admitted; err != nil {
		t.Fatal(err)
	}
	if _, err := tk.Settle(Entry{Time: day1}); err != nil {
		t.Fatal(err)
	}
}
