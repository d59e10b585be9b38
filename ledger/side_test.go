package ledger

import (
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// countingFile counts a segment's writes and syncs, and fails its syncs while fail
// is set.
type countingFile struct {
	SegmentFile
	writes, syncs *atomic.Int64
	fail          *atomic.Bool
}

func (f countingFile) Write(p []byte) (int, error) { f.writes.Add(1); return f.SegmentFile.Write(p) }
func (f countingFile) Sync() error {
	f.syncs.Add(1)
	if f.fail.Load() {
		return errors.New("injected sync failure")
	}
	return f.SegmentFile.Sync()
}

type counts struct {
	writes, syncs atomic.Int64
	fail          atomic.Bool
}

func (c *counts) wrap(f *os.File) SegmentFile {
	return countingFile{SegmentFile: f, writes: &c.writes, syncs: &c.syncs, fail: &c.fail}
}

// testSide is a side record: its payload, and what SideWritten said.
type testSide struct {
	payload string
	called  atomic.Int32
	err     error
}

func (s *testSide) AppendSide(dst []byte) []byte { return append(dst, s.payload...) }
func (s *testSide) SideWritten(err error)        { s.err = err; s.called.Add(1) }

// TestSideRecordRidesInItsEntrysSync: a side record appended to its entry's Pending
// is written and synced with it, one write and one sync for both, and is told so
// before the Commit returns; the entry's own Commit then waits for nothing.
func TestSideRecordRidesInItsEntrysSync(t *testing.T) {
	var c counts
	l := openTestLog(t, filepath.Join(t.TempDir(), "db"), Options{Sync: SyncFsync, WrapSegment: c.wrap})
	p, err := l.add("entry")
	if err != nil {
		t.Fatal(err)
	}
	s := &testSide{payload: "stored"}
	q, err := l.AppendSide(p, s)
	if err != nil {
		t.Fatal(err)
	}
	if q != p {
		t.Fatal("the side record went in another group than its entry's, with nobody writing")
	}
	if err := l.Commit(q); err != nil {
		t.Fatal(err)
	}
	if s.called.Load() != 1 || s.err != nil {
		t.Fatalf("SideWritten called %d times, err %v; want once, nil", s.called.Load(), s.err)
	}
	if err := l.Commit(p); err != nil {
		t.Fatal(err)
	}
	if w, y := c.writes.Load(), c.syncs.Load(); w != 1 || y != 1 {
		t.Errorf("an entry and its side record: %d writes, %d syncs; want 1 and 1", w, y)
	}
}

// TestSideRecordFailsWithItsEntry: when the group's write fails, so does its side
// record, and a side record that had to go in a later group (the entry's write had
// begun) is not written after an entry that failed.
func TestSideRecordFailsWithItsEntry(t *testing.T) {
	var c counts
	base := filepath.Join(t.TempDir(), "db")
	l := openTestLog(t, base, Options{Sync: SyncFsync, WrapSegment: c.wrap, ApplyEvery: time.Hour})
	c.fail.Store(true)
	p, _ := l.add("entry")
	s := &testSide{payload: "stored"}
	q, _ := l.AppendSide(p, s)
	if err := l.Commit(q); err == nil {
		t.Fatal("Commit of a failed write: nil")
	}
	if s.called.Load() != 1 || s.err == nil {
		t.Errorf("side record of a failed write: SideWritten %d times, err %v", s.called.Load(), s.err)
	}
	l.Commit(p)

	// The entry's write begins (another writer takes its group) before the side
	// record is appended: the side record goes in the next group, after the failure.
	p2, _ := l.add("entry2")
	l.walMu.Lock()
	l.mu.Lock()
	l.cur = l.newPendingLocked() // as Commit does before writing p2
	l.mu.Unlock()
	l.writeLocked(p2) // fails
	l.walMu.Unlock()
	c.fail.Store(false)
	s2 := &testSide{payload: "stored2"}
	q2, err := l.AppendSide(p2, s2)
	if err != nil {
		t.Fatal(err)
	}
	if q2 == p2 {
		t.Fatal("a side record joined a group already written")
	}
	l.add("other") // q2's group has an entry of its own, written fine
	if err := l.Commit(q2); err != nil {
		t.Fatal(err)
	}
	if s2.err == nil {
		t.Error("a side record whose entry failed was logged")
	}
	l.Commit(p2)
	if got := l.AttachSide(func() error { return nil }); len(got) != 0 {
		t.Errorf("side records replayed in a running log: %q", got)
	}
	// What the log holds: the first record's write went through before its sync
	// failed, so a replay may find it, the entry with its side record; never the
	// side record whose entry failed.
	for _, v := range readSides(t, base) {
		if v == "stored2" {
			t.Errorf("the side record of a failed entry is in the log")
		}
	}
}

func readSides(t *testing.T, base string) []string {
	t.Helper()
	var out []string
	if _, err := ReadSegments(base, func(p []byte) bool {
		if len(p) > 0 && p[0] == SideTag {
			out = append(out, string(p[1:]))
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSideRecordsKeptUntilTheirStoreHoldsThem: a log killed with side records in it
// hands them over at AttachSide, keeps their segments until the side store's sync
// says it holds them, then deletes them.
func TestSideRecordsKeptUntilTheirStoreHoldsThem(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "db")
	l := openTestLog(t, base, Options{Sync: SyncProcess, ApplyEvery: time.Hour})
	for _, v := range []string{"a", "b"} {
		p, _ := l.add("e" + v)
		q, _ := l.AppendSide(p, &testSide{payload: v})
		if err := l.Commit(q); err != nil {
			t.Fatal(err)
		}
		l.Commit(p)
	}
	cp := filepath.Join(t.TempDir(), "db")
	segs, _ := Segments(base)
	for _, f := range [][2]string{{base, cp}, {segs[0].Path, SegmentPath(cp, segs[0].N)}} {
		b, err := os.ReadFile(f[0])
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(f[1], b, 0o600)
	}
	c := openTestLog(t, cp, Options{Sync: SyncProcess, ApplyEvery: time.Hour})
	if got := c.items(t); len(got) != 2 { // the owner's entries are replayed as always
		t.Errorf("entries replayed: %v", got)
	}
	c.record(t, "more")
	if err := c.Sync(); err != nil { // no side store yet: the old segment stays
		t.Fatal(err)
	}
	if got := readSides(t, cp); len(got) != 2 {
		t.Fatalf("side records left in the log before a store attached: %q, want a and b", got)
	}
	synced := false
	got := c.AttachSide(func() error { synced = true; return nil })
	if len(got) != 2 || string(got[0]) != "a" || string(got[1]) != "b" {
		t.Fatalf("AttachSide handed %q, want [a b]", got)
	}
	c.record(t, "more2")
	if err := c.Sync(); err != nil {
		t.Fatal(err)
	}
	if !synced {
		t.Error("the log deleted side records' segments without the side store's sync")
	}
	if got := readSides(t, cp); len(got) != 0 {
		t.Errorf("side records left after the store's sync: %q", got)
	}
}
