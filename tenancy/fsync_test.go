package tenancy

import (
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/lmlite/lmlite/ledger"
)

// syncRecorder is a fault-injecting layer over a log segment: it counts the bytes
// written and the bytes covered by the last Sync, so a test sees what would survive
// a power cut at any moment (only what was synced).
type syncRecorder struct {
	f *os.File

	mu              sync.Mutex
	written, synced int64
}

func (r *syncRecorder) Write(p []byte) (int, error) {
	n, err := r.f.Write(p)
	r.mu.Lock()
	r.written += int64(n)
	r.mu.Unlock()
	return n, err
}

func (r *syncRecorder) Sync() error {
	err := r.f.Sync()
	if err == nil {
		r.mu.Lock()
		r.synced = r.written
		r.mu.Unlock()
	}
	return err
}

func (r *syncRecorder) Close() error { return r.f.Close() }

func (r *syncRecorder) lengths() (written, synced int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.written, r.synced
}

// TestFsyncBeforeAcknowledging: with SyncFsync, when Record returns (the moment the
// gateway acknowledges a response) every byte of the log written so far has been
// fsynced, so an acknowledged entry survives power loss; with SyncProcess it has
// not (which shows the test can tell the two apart). Remove the Sync from writeLocked
// and this fails.
func TestFsyncBeforeAcknowledging(t *testing.T) {
	for _, mode := range []SyncMode{SyncFsync, SyncProcess} {
		t.Run(map[SyncMode]string{SyncFsync: "fsync", SyncProcess: "process"}[mode], func(t *testing.T) {
			var mu sync.Mutex
			var segs []*syncRecorder
			opts := Options{Sync: mode, ApplyEvery: time.Hour, wrapSegment: func(f *os.File) ledger.SegmentFile {
				r := &syncRecorder{f: f}
				mu.Lock()
				segs = append(segs, r)
				mu.Unlock()
				return r
			}}
			s, err := Open(filepath.Join(t.TempDir(), "lmlite.db"), opts)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			unsynced := 0
			for i := 0; i < 20; i++ {
				if err := s.Record(Entry{Time: time.Now(), RequestID: "r" + strconv.Itoa(i), Tenant: "t", Cost: 5}); err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				cur := segs[len(segs)-1]
				mu.Unlock()
				written, synced := cur.lengths()
				if written == 0 {
					t.Fatalf("entry %d acknowledged with nothing written to the log", i)
				}
				if synced < written {
					unsynced++
				}
			}
			switch {
			case mode == SyncFsync && unsynced > 0:
				t.Errorf("SyncFsync: %d of 20 entries acknowledged before their log record was fsynced", unsynced)
			case mode == SyncProcess && unsynced == 0:
				t.Errorf("SyncProcess: every record was fsynced before acknowledging; the recorder cannot tell the modes apart")
			}
		})
	}
}
