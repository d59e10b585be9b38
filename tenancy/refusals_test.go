package tenancy

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lmlite/lmlite/usage"
)

// TestAFloodOfRefusalsIsAFewLedgerEntries: 10,000 requests of one tenant refused
// before admission (NotAdmitted, from 4 goroutines, with admitted requests settled
// among them) are a handful of ledger entries (coalesced per key, Entry.Count), not
// one each, while the followed rollups count the 10,000 at once (before any flush),
// and the rollups loaded from the store after a restart count them too (Close
// flushes).
func TestAFloodOfRefusalsIsAFewLedgerEntries(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lmlite.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ten := New(s)
	m := usage.NewMemory()
	if err := s.FollowRollups(m, time.Now()); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Truncate(time.Minute)
	q := &Quota{Tenant: "flood"}
	const floods, writers, settled = 10000, 4, 3
	start := time.Now()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range floods / writers {
				reason, status := usage.Rate, 429
				if i%2 == 1 {
					reason = usage.Concurrency
				}
				_, err := ten.NotAdmitted(q).Settle(Entry{Time: t0, RequestID: fmt.Sprintf("req_%d_%d", w, i), KeyID: "key_1",
					Tenant: "flood", Model: "m", Status: status, Refused: reason.String(), NotAdmitted: true})
				if err != nil {
					t.Error(err)
					return
				}
				if w == 0 && i%(floods/writers/settled) == 0 && i > 0 { // a request admitted among them: its commit takes the counts along
					if err := s.Record(Entry{Time: t0, RequestID: fmt.Sprintf("ok_%d", i), Tenant: "flood", Model: "m", Status: 200, Cost: 1000}); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	counted := func(name string, m *usage.Memory) {
		t.Helper()
		bs, err := m.Query(usage.Query{Tenants: []string{"flood"}, Start: t0, End: t0.Add(time.Minute), Width: usage.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(bs) != 1 || len(bs[0].Results) != 1 {
			t.Fatalf("%s: %+v", name, bs)
		}
		c := bs[0].Results[0]
		if c.Refused(usage.Rate) != floods/2 || c.Refused(usage.Concurrency) != floods/2 || c.Requests != settled {
			t.Errorf("%s rollups: %d rate and %d concurrency refusals, %d requests; want %d, %d and %d",
				name, c.Refused(usage.Rate), c.Refused(usage.Concurrency), c.Requests, floods/2, floods/2, settled)
		}
	}
	counted("followed", m)
	flushes := int(time.Since(start)/refusalFlush) + 1
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var entries, refusals int
	if err := s.Ledger(func(e Entry) error {
		entries++
		if e.NotAdmitted {
			refusals += max(1, e.Count)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Each flush or commit writes at most one entry per key (2 here): a commit per
	// settled request, a flush a second, and Close's.
	if most := settled + 2*(settled+flushes+1); entries > most || refusals != floods {
		t.Errorf("the ledger holds %d entries for %d refusals (%d settled requests), want at most %d for %d", entries, refusals, settled, most, floods)
	}
	loaded := usage.NewMemory()
	if _, err := s.LoadRollups(loaded, time.Now()); err != nil {
		t.Fatal(err)
	}
	counted("loaded after a restart", loaded)
}

// TestRollupsFollowedDuringAFloodCountEachRefusalOnce: in-memory rollups that start
// following the ledger (FollowRollups) while refusals are being recorded and drained
// into commits count every refusal exactly once, like those that followed from the
// start: whether it was still pending, drained into a group not yet written, or
// written.
func TestRollupsFollowedDuringAFloodCountEachRefusalOnce(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "lmlite.db"), Options{Sync: SyncProcess})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ten := New(s)
	first := usage.NewMemory()
	if err := s.FollowRollups(first, time.Now()); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Truncate(time.Minute)
	q := &Quota{Tenant: "flood"}
	const writers, each = 4, 5000
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if _, err := ten.NotAdmitted(q).Settle(Entry{Time: t0, RequestID: "r", Tenant: "flood", Model: "m", Status: 429, Refused: usage.Rate.String()}); err != nil {
					t.Error(err)
					return
				}
				if i%50 == 0 { // commits that drain the pending refusals
					if err := s.Record(Entry{Time: t0, RequestID: fmt.Sprintf("ok_%d_%d", w, i), Tenant: "flood", Model: "m", Status: 200}); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	var late []*usage.Memory
	for range 20 {
		m := usage.NewMemory()
		if err := s.FollowRollups(m, time.Now()); err != nil {
			t.Fatal(err)
		}
		late = append(late, m)
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	if err := s.flushRefusals(); err != nil {
		t.Fatal(err)
	}
	for i, m := range append([]*usage.Memory{first}, late...) {
		bs, err := m.Query(usage.Query{Tenants: []string{"flood"}, Start: t0, End: t0.Add(time.Minute), Width: usage.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(bs) != 1 || len(bs[0].Results) != 1 {
			t.Fatalf("rollups %d: %+v", i, bs)
		}
		if c := bs[0].Results[0]; c.Refused(usage.Rate) != writers*each || c.Requests != writers*each/50 {
			t.Errorf("rollups %d (0 followed from the start): %d refusals, %d requests; want %d and %d", i, c.Refused(usage.Rate), c.Requests, writers*each, writers*each/50)
		}
	}
}
