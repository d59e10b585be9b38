package tenancy

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/lmlite/lmlite/money"
)

// TestRecordAllocs: recording a request's entry, uncontended, allocates nothing: the
// log's Pending and the owner's group are reused once written, where each record
// took a new one of each (issue 36: the ledger's write path was +1 µs per request at
// 16 connections).
func TestRecordAllocs(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "lmlite.db"), Options{Sync: SyncProcess})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	at := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	e := Entry{Time: at, RequestID: "req_1", Tenant: "t", KeyID: "k", Model: "m", Status: 200, Finish: "stop",
		PromptTokens: 10, CompletionTokens: 5, Cost: money.Money(1000), Latency: time.Millisecond}
	n := testing.AllocsPerRun(200, func() {
		if err := s.Record(e); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Errorf("Record: %v allocs, want 0", n)
	}
}
