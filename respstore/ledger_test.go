package respstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lmlite/lmlite/ledger"
)

// openLedgerPair opens a Bolt in ledger mode in dir and its test ledger (wrap, when
// not nil, wraps the ledger's segments); cleanup closes both.
func openLedgerPair(t *testing.T, dir string, wrap func(*os.File) ledger.SegmentFile) (*Bolt, *testLedger) {
	t.Helper()
	s, err := openBoltLedger(filepath.Join(dir, "r.db"), Options{}, time.Hour, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	l, err := openTestLedgerWith(dir, ledger.Options{Side: s, WrapSegment: wrap})
	if err != nil {
		s.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.close()
		s.Close()
	})
	return s, l
}

// TestLedgerCarriedPutsKeepLimitsExact: 300 concurrent Puts of three tenants, two
// against limits, each carried by its own settlement's ledger write (PutCarried),
// store exactly up to each limit, with exact usage; the ledger wrote no more records
// than there were settlements (no Put wrote a record of its own) and the store no
// journal record. Run with -race.
func TestLedgerCarriedPutsKeepLimitsExact(t *testing.T) {
	s, l := openLedgerPair(t, t.TempDir(), nil)
	const each = 100
	size := func(tenant string) int64 { r := gcRec(tenant, "resp_00000", 10); return r.Size() }
	lims := map[string]Limits{
		"count": {MaxCount: 37},
		"bytes": {MaxBytes: 23*size("bytes") + size("bytes")/2},
		"free":  {},
	}
	want := map[string]int64{"count": 37, "bytes": 23, "free": each}
	var mu sync.Mutex
	stored := map[string]int64{}
	var settled atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for tenant, lim := range lims {
		for i := range each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				carried := false
				err := s.PutCarried(context.Background(), gcRec(tenant, fmt.Sprintf("resp_%05d", i), 10), lim, func(sd ledger.Side) {
					carried = true
					settled.Add(1)
					if err := l.settle(sd); err != nil {
						t.Error(err)
					}
				})
				var le *LimitError
				switch {
				case err == nil:
					mu.Lock()
					stored[tenant]++
					mu.Unlock()
				case errors.As(err, &le):
					if carried {
						t.Errorf("%s: a refused Put was carried", tenant)
					}
				default:
					t.Error(err)
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	for tenant, n := range want {
		u, err := s.Usage(context.Background(), tenant)
		if err != nil || stored[tenant] != n || u.Count != n || u.Bytes != n*size(tenant) {
			t.Errorf("%s: %d stored, usage %+v (%v); want %d, %d bytes", tenant, stored[tenant], u, err, n, n*size(tenant))
		}
	}
	if c, n := l.log.Commits(), settled.Load(); c > n {
		t.Errorf("%d ledger records for %d settlements: a Put wrote its own", c, n)
	}
	if c := s.commits.Load(); c != 0 {
		t.Errorf("%d journal records in ledger mode", c)
	}
}

// TestLedgerOneWritePerStoredRequest: stored one after the other, each response is
// one ledger record with its settlement (one write, one sync), not two.
func TestLedgerOneWritePerStoredRequest(t *testing.T) {
	s, l := openLedgerPair(t, t.TempDir(), nil)
	for i := range 10 {
		err := s.PutCarried(context.Background(), gcRec("a", fmt.Sprintf("resp_%d", i), 10), Limits{}, func(sd ledger.Side) { l.settle(sd) })
		if err != nil {
			t.Fatal(err)
		}
	}
	if c := l.log.Commits(); c != 10 {
		t.Errorf("%d ledger records for 10 stored requests, want 10", c)
	}
}

// failingWrites fails every Write of a segment while fail is set.
type failingWrites struct {
	*os.File
	fail *atomic.Bool
}

func (f failingWrites) Write(p []byte) (int, error) {
	if f.fail.Load() {
		return 0, errors.New("injected write failure")
	}
	return f.File.Write(p)
}

// TestLedgerFailedSettleStoresNothing: a Put whose settlement's ledger write fails
// is an error, and leaves nothing: no response to read, no usage, nothing after a
// restart; the next Put is stored as usual.
func TestLedgerFailedSettleStoresNothing(t *testing.T) {
	dir := t.TempDir()
	var fail atomic.Bool
	s, l := openLedgerPair(t, dir, func(f *os.File) ledger.SegmentFile { return failingWrites{f, &fail} })
	fail.Store(true)
	var settleErr error
	err := s.PutCarried(context.Background(), gcRec("a", "resp_lost", 10), Limits{MaxCount: 1}, func(sd ledger.Side) { settleErr = l.settle(sd) })
	if err == nil || settleErr == nil {
		t.Fatalf("Put: %v, settle: %v; want both to fail", err, settleErr)
	}
	if _, err := s.Get(context.Background(), "a", "resp_lost", time.Now()); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after a failed settle: %v, want ErrNotFound", err)
	}
	if u, _ := s.Usage(context.Background(), "a"); u != (Usage{}) {
		t.Errorf("usage after a failed settle: %+v", u)
	}
	fail.Store(false)
	// The limit (one response) has room: the failed Put holds none of it.
	if err := s.PutCarried(context.Background(), gcRec("a", "resp_kept", 10), Limits{MaxCount: 1}, func(sd ledger.Side) { l.settle(sd) }); err != nil {
		t.Fatal(err)
	}
	l.close()
	s.Close()
	s, l = openLedgerPair(t, dir, nil)
	if _, err := s.Get(context.Background(), "a", "resp_lost", time.Now()); !errors.Is(err, ErrNotFound) {
		t.Errorf("after a restart: %v, want ErrNotFound", err)
	}
	if _, err := s.Get(context.Background(), "a", "resp_kept", time.Now()); err != nil {
		t.Errorf("after a restart: %v", err)
	}
	if u, _ := s.Usage(context.Background(), "a"); u.Count != 1 {
		t.Errorf("usage after a restart: %+v, want 1 response", u)
	}
}

// TestLedgerReplayKeepsDeletedDeleted: a response Put (in the ledger), applied,
// then deleted, is not brought back by a replay of the ledger's segments after a
// crash (bbolt keeps the seq of the last side record it holds).
func TestLedgerReplayKeepsDeletedDeleted(t *testing.T) {
	dir := t.TempDir()
	s, l := openLedgerPair(t, dir, nil)
	ctx := context.Background()
	for _, id := range []string{"resp_del", "resp_keep"} {
		if err := s.PutCarried(ctx, gcRec("a", id, 10), Limits{}, func(sd ledger.Side) { l.settle(sd) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete(ctx, "a", "resp_del", time.Now()); err != nil {
		t.Fatal(err)
	}
	// A crash: the ledger's segments stay (its apply never ran: ApplyEvery is 200
	// ms, and nothing closes it), bbolt holds what the Delete's drain committed.
	segs, _ := ledger.Segments(filepath.Join(dir, "ledger.db"))
	if len(segs) == 0 {
		t.Fatal("no segment left to replay")
	}
	saved := map[string][]byte{}
	for _, sg := range segs {
		b, err := os.ReadFile(sg.Path)
		if err != nil {
			t.Fatal(err)
		}
		saved[sg.Path] = b
	}
	l.close()
	s.Close()
	for p, b := range saved { // as the kill left them
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s, _ = openLedgerPair(t, dir, nil)
	if _, err := s.Get(ctx, "a", "resp_del", time.Now()); !errors.Is(err, ErrNotFound) {
		t.Errorf("the deleted response after a replay: %v, want ErrNotFound", err)
	}
	if _, err := s.Get(ctx, "a", "resp_keep", time.Now()); err != nil {
		t.Errorf("the kept response after a replay: %v", err)
	}
	if u, _ := s.Usage(ctx, "a"); u.Count != 1 {
		t.Errorf("usage after a replay: %+v, want 1", u)
	}
}
