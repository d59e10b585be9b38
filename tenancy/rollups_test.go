package tenancy

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lmlite/lmlite/usage"
)

// bufferedUsage is how many usage events the store holds in memory for readers.
func (s *Store) bufferedUsage() int {
	s.tailMu.Lock()
	defer s.tailMu.Unlock()
	return len(s.tail)
}

// TestFollowedRollupsHoldNoBufferWhenNobodyQueries: in-memory rollups following the
// ledger (FollowRollups) count each entry once as it is logged, so the store buffers
// nothing for them however long nobody queries (100k entries), and they hold exactly
// the ledger's entries: those logged before they started following, those logged
// after, and after a restart.
func TestFollowedRollupsHoldNoBufferWhenNobodyQueries(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lmlite.db")
	s, err := Open(path, Options{Sync: SyncProcess})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-time.Hour)
	var n int
	record := func(count, writers int) {
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range count {
					e := Entry{Time: t0, RequestID: fmt.Sprintf("r%d-%d-%d", n, w, i), Tenant: "t", Model: "m", Status: 200, Cost: 1000}
					if i%10 == 0 { // a refusal before admission counts too
						e.Status, e.Refused, e.NotAdmitted, e.Cost = 429, usage.Rate.String(), true, 0
					}
					if err := s.Record(e); err != nil {
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
		n++
	}
	counted := func(m *usage.Memory) (reqs, refused int64) {
		t.Helper()
		bs, err := m.Query(usage.Query{Start: t0.Add(-24 * time.Hour), End: t0.Add(24 * time.Hour), Width: usage.Day})
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bs {
			for _, r := range b.Results {
				reqs += r.Requests
				refused += r.RefusedTotal()
			}
		}
		return reqs, refused
	}
	record(100, 2) // before following: loaded from the store's rollups
	m := usage.NewMemory()
	if err := s.FollowRollups(m, time.Now()); err != nil {
		t.Fatal(err)
	}
	most := 0
	for range 100 {
		record(250, 4)
		most = max(most, s.bufferedUsage())
	}
	if most > 0 {
		t.Fatalf("the store buffered up to %d usage events for rollups nobody queried, want none", most)
	}
	const total, refusals = 200 + 100*1000, 20 + 100*100
	if reqs, refused := counted(m); reqs+refused != total || refused != refusals {
		t.Fatalf("followed rollups count %d requests and %d refusals, want %d and %d", reqs, refused, total-refusals, refusals)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(path, Options{Sync: SyncProcess}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m = usage.NewMemory()
	if err := s.FollowRollups(m, time.Now()); err != nil {
		t.Fatal(err)
	}
	record(5, 2)
	if reqs, refused := counted(m); reqs+refused != total+10 || refused != refusals+2 {
		t.Fatalf("after a restart, followed rollups count %d requests and %d refusals, want %d and %d", reqs, refused, total+10-refusals-2, refusals+2)
	}
}
