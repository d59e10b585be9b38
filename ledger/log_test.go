package ledger

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The test owner: an entry is a string with a seq; a record is a JSON array of
// entries; a batch is applied as one key per entry in bucket "items".

type item struct {
	Seq uint64 `json:"seq"`
	V   string `json:"v"`
}

type testGroup struct{ items []item }

func (g *testGroup) Payload(dst []byte) []byte {
	js, _ := json.Marshal(g.items)
	return append(dst, js...)
}
func (g *testGroup) Empty() bool { return len(g.items) == 0 }

type testBatch struct{ items []item }

func (b *testBatch) Add(g Group)        { b.items = append(b.items, g.(*testGroup).items...) }
func (b *testBatch) Entries() int       { return len(b.items) }
func (b *testBatch) Empty() bool        { return len(b.items) == 0 }
func (b *testBatch) Append(newer Batch) { b.items = append(b.items, newer.(*testBatch).items...) }
func (b *testBatch) Reset()             { b.items = b.items[:0] }
func (b *testBatch) Apply(tx *bolt.Tx) error {
	bk, err := tx.CreateBucketIfNotExists([]byte("items"))
	if err != nil {
		return err
	}
	for _, it := range b.items {
		if err := bk.Put(key(it.Seq), []byte(it.V)); err != nil {
			return err
		}
	}
	return nil
}

func key(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

type testOwner struct {
	applied uint64 // the database's last seq, at Open
	found   []item
	written atomic.Int64
}

func (o *testOwner) NewGroup() Group            { return &testGroup{} }
func (o *testOwner) NewBatch() Batch            { return &testBatch{} }
func (o *testOwner) Written(g Group, err error) { o.written.Add(1) }
func (o *testOwner) Replay(p []byte) bool {
	var its []item
	if json.Unmarshal(p, &its) != nil {
		return false
	}
	for _, it := range its {
		if it.Seq > o.applied {
			o.found = append(o.found, it)
		}
	}
	return true
}
func (o *testOwner) Replayed() Batch { return &testBatch{items: o.found} }

// testLog is a Log over a fresh database with the test owner, and its next seq.
type testLog struct {
	*Log
	db  *bolt.DB
	seq uint64 // under the append lock
}

func openTestLog(t testing.TB, base string, opts Options) *testLog {
	t.Helper()
	db, err := bolt.Open(base, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := &testOwner{}
	db.View(func(tx *bolt.Tx) error {
		if bk := tx.Bucket([]byte("items")); bk != nil {
			if k, _ := bk.Cursor().Last(); k != nil {
				o.applied = binary.BigEndian.Uint64(k)
			}
		}
		return nil
	})
	l, err := Open(db, base, opts, o)
	if err != nil {
		t.Fatal(err)
	}
	tl := &testLog{Log: l, db: db, seq: o.applied + uint64(len(o.found))}
	t.Cleanup(func() { tl.Close(); db.Close() })
	return tl
}

func (l *testLog) add(v string) (*Pending, error) {
	return l.Append(func(g Group) {
		l.seq++
		g.(*testGroup).items = append(g.(*testGroup).items, item{l.seq, v})
	})
}

func (l *testLog) record(t testing.TB, v string) {
	p, err := l.add(v)
	if err == nil {
		err = l.Commit(p)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func (l *testLog) items(t testing.TB) map[string]bool {
	t.Helper()
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	l.db.View(func(tx *bolt.Tx) error {
		if bk := tx.Bucket([]byte("items")); bk != nil {
			bk.ForEach(func(_, v []byte) error { out[string(v)] = true; return nil })
		}
		return nil
	})
	return out
}

// TestGroupCommit holds the write lock while 50 writers append: they all join one
// group, written as one record when the lock is free, and each Commit returns only
// then.
func TestGroupCommit(t *testing.T) {
	for _, mode := range []SyncMode{SyncFsync, SyncProcess} {
		l := openTestLog(t, filepath.Join(t.TempDir(), "db"), Options{Sync: mode})
		l.walMu.Lock() // as a leader writing a record would
		var returned sync.WaitGroup
		var early atomic.Int32
		for i := 0; i < 50; i++ {
			returned.Add(1)
			go func() {
				defer returned.Done()
				p, err := l.add(strconv.Itoa(i))
				if err == nil {
					err = l.Commit(p)
				}
				if err != nil {
					t.Error(err)
				}
				early.Add(1)
			}()
		}
		for {
			l.mu.Lock()
			n := len(l.cur.g.(*testGroup).items)
			l.mu.Unlock()
			if n == 50 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		if n := early.Load(); n != 0 {
			t.Errorf("%d Commits returned before their group was logged", n)
		}
		l.walMu.Unlock()
		returned.Wait()
		if c := l.Commits(); c != 1 {
			t.Errorf("mode %d: %d log records for 50 entries, want 1", mode, c)
		}
		if n := len(l.items(t)); n != 50 {
			t.Errorf("mode %d: %d entries in the database", mode, n)
		}
	}
}

// TestLogReplaysWhatAKillLeft copies the database and segments of a running log (as
// a killed process leaves them, nothing applied yet): opening the copy applies every
// committed entry once, and its segments are gone.
func TestLogReplaysWhatAKillLeft(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "db")
	l := openTestLog(t, base, Options{Sync: SyncProcess, ApplyEvery: time.Hour})
	for i := 0; i < 10; i++ {
		l.record(t, "r"+strconv.Itoa(i))
	}
	cp := filepath.Join(t.TempDir(), "db")
	segs, err := Segments(base)
	if err != nil || len(segs) != 1 {
		t.Fatalf("segments %v %v", segs, err)
	}
	for _, f := range [][2]string{{base, cp}, {segs[0].Path, SegmentPath(cp, segs[0].N)}} {
		b, err := os.ReadFile(f[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f[1], b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c := openTestLog(t, cp, Options{Sync: SyncProcess, ApplyEvery: time.Hour})
	got := c.items(t)
	if len(got) != 10 || !got["r0"] || !got["r9"] {
		t.Errorf("replayed %v, want r0..r9", got)
	}
	left, _ := Segments(cp)
	if len(left) != 1 || left[0].N <= segs[0].N { // only the new, empty segment
		t.Errorf("segments after replay %v", left)
	}
	c.record(t, "after") // the seqs go on after the replayed ones
	if got := c.items(t); len(got) != 11 || !got["after"] {
		t.Errorf("after replay and one more: %v", got)
	}
}

// TestLogAppendAfterCloseFails: Close writes what was appended, and later appends
// are refused with ErrClosed.
func TestLogAppendAfterCloseFails(t *testing.T) {
	l := openTestLog(t, filepath.Join(t.TempDir(), "db"), Options{Sync: SyncProcess})
	p, err := l.add("queued")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Commit(p); err != nil {
		t.Errorf("the group appended before Close: %v", err)
	}
	if _, err := l.add("late"); err != ErrClosed {
		t.Errorf("append after Close: %v, want ErrClosed", err)
	}
	var v []byte
	l.db.View(func(tx *bolt.Tx) error { v = tx.Bucket([]byte("items")).Get(key(1)); return nil })
	if string(v) != "queued" {
		t.Errorf("entry appended before Close: %q in the database", v)
	}
}

// BenchmarkLoneWrite is one writer acknowledging one entry at a time, the case group
// commit does nothing for: the Log (one record appended, fsynced) against bbolt's
// DB.Batch (a transaction per batch, which waits MaxBatchDelay for company).
func BenchmarkLoneWrite(b *testing.B) {
	b.Run("log", func(b *testing.B) {
		l := openTestLog(b, filepath.Join(b.TempDir(), "db"), Options{Sync: SyncFsync})
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			l.record(b, "x")
		}
	})
	b.Run("db.batch", func(b *testing.B) {
		db, err := bolt.Open(filepath.Join(b.TempDir(), "db"), 0o600, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			err := db.Batch(func(tx *bolt.Tx) error {
				bk, err := tx.CreateBucketIfNotExists([]byte("items"))
				if err != nil {
					return err
				}
				return bk.Put(key(uint64(i)), []byte("x"))
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

// reuseGroup is a group whose owner reuses it: what it holds costs no allocation.
type reuseGroup struct{ n int }

func (g *reuseGroup) Payload(dst []byte) []byte { return append(dst, '[', ']') }
func (g *reuseGroup) Empty() bool               { return g.n == 0 }

// discardBatch counts its entries.
type discardBatch struct{ n int }

func (b *discardBatch) Add(g Group)             { b.n += g.(*reuseGroup).n }
func (b *discardBatch) Entries() int            { return b.n }
func (b *discardBatch) Empty() bool             { return b.n == 0 }
func (b *discardBatch) Append(newer Batch)      { b.n += newer.(*discardBatch).n }
func (b *discardBatch) Reset()                  { b.n = 0 }
func (b *discardBatch) Apply(tx *bolt.Tx) error { return nil }

// reuseOwner hands out its last written group again, as tenancy's owner does.
type reuseOwner struct{ spare *reuseGroup }

func (o *reuseOwner) NewGroup() Group {
	g := o.spare
	if g == nil {
		g = new(reuseGroup)
	}
	o.spare = nil
	return g
}
func (o *reuseOwner) NewBatch() Batch { return &discardBatch{} }
func (o *reuseOwner) Written(g Group, err error) {
	if err == nil {
		*g.(*reuseGroup) = reuseGroup{}
		o.spare = g.(*reuseGroup)
	}
}
func (o *reuseOwner) Replay(p []byte) bool { return true }
func (o *reuseOwner) Replayed() Batch      { return &discardBatch{} }

// TestAppendCommitAllocs: appending an entry and committing it (no contention, the
// owner reusing its groups) allocates nothing: the written Pending is reused once its
// appenders committed it, where each record took a new one (issue 36).
func TestAppendCommitAllocs(t *testing.T) {
	base := filepath.Join(t.TempDir(), "l.db")
	db, err := bolt.Open(base, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l, err := Open(db, base, Options{Sync: SyncProcess, ApplyEvery: time.Hour, ApplyEntries: 1 << 30}, &reuseOwner{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	n := testing.AllocsPerRun(100, func() {
		p, err := l.Append(func(g Group) { g.(*reuseGroup).n++ })
		if err == nil {
			err = l.Commit(p)
		}
		if err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Errorf("Append and Commit: %v allocs, want 0", n)
	}
	if c := l.Commits(); c < 100 {
		t.Errorf("%d records written, want one per commit", c)
	}
}
