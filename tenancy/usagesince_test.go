package tenancy

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lmlite/lmlite/usage"
)

// usageSeen is what UsageSince handed over, normalised for comparison (the ledger's
// JSON keeps a time's instant, not its monotonic reading or zone).
func usageSeen(t *testing.T, read func(seq uint64, fn func(uint64, usage.Event) error) error, seq uint64) []string {
	t.Helper()
	var out []string
	err := read(seq, func(sq uint64, e usage.Event) error {
		e.Time = e.Time.UTC()
		out = append(out, fmt.Sprintf("%d %+v", sq, e))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestUsageSinceFromMemoryMatchesLedger: the events UsageSince hands over from memory
// (kept from its first call on) are exactly those read back from the ledger, from
// every seq a reader may ask from: its first call, the seq it reached, one it had
// passed (a retry after a failed publish), one before the store was reopened, and
// after the reader fell more than tailMax entries behind.
func TestUsageSinceFromMemoryMatchesLedger(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lmlite.db")
	s, err := Open(path, Options{Sync: SyncProcess})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 24, 9, 0, 0, 0, time.Local)
	n := 0
	record := func(s *Store, count, writers int) {
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range count {
					e := Entry{Time: t0.Add(time.Duration(w*count+i) * time.Second), RequestID: fmt.Sprintf("r%d-%d-%d", n, w, i), Tenant: "t",
						Model: "m", Tier: "fast", Status: 200, PromptTokens: i, CompletionTokens: w, Cost: 1000, Latency: time.Millisecond}
					if err := s.Record(e); err != nil {
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
		n++
	}
	check := func(s *Store, seq uint64, what string) []string {
		t.Helper()
		mem := usageSeen(t, s.UsageSince, seq)
		led := usageSeen(t, s.usageFromLedger, seq)
		if fmt.Sprint(mem) != fmt.Sprint(led) {
			t.Fatalf("%s (from seq %d): UsageSince handed %d events, the ledger holds %d after it\nfirst: %.200v\n       %.200v", what, seq, len(mem), len(led), mem, led)
		}
		return mem
	}
	record(s, 50, 4)
	check(s, 0, "first call") // from the ledger; memory from now on
	record(s, 100, 8)
	got := check(s, 0, "from the start again")
	if len(got) != 1000 {
		t.Fatalf("%d events, want 1000", len(got))
	}
	check(s, 200, "after the first call's")
	if !s.tailOn || s.tailFrom != 200 {
		t.Fatalf("tail on %v from %d, want from memory after seq 200", s.tailOn, s.tailFrom)
	}
	record(s, 30, 3)
	check(s, 1000, "the seq reached")
	check(s, 990, "a seq passed (a retried publish)")
	check(s, 1000, "the seq reached again")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Open(path, Options{Sync: SyncProcess})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check(s, 1050, "reopened, before any write")
	record(s, 10, 2)
	check(s, 1060, "reopened, from before")
	record(s, 10, 2)
	check(s, 1110, "reopened, from memory")
	if !s.tailOn || s.tailFrom != 1110 {
		t.Fatalf("tail on %v from %d, want from memory after seq 1110", s.tailOn, s.tailFrom)
	}
	record(s, tailMax/4+1, 4) // the reader falls behind
	if s.tailOn {
		t.Fatalf("%d events kept, past tailMax %d", len(s.tail), tailMax)
	}
	check(s, 1110, "behind")
	record(s, 10, 2)
	if got := check(s, 1130+4*(tailMax/4+1), "caught up"); len(got) != 20 {
		t.Fatalf("%d events after catching up, want 20", len(got))
	}
}
