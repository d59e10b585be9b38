package ledger

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// testSide is a side record "v" and what the log told it.
type testSide struct {
	v       string
	written int
	err     error
}

func (s *testSide) AppendSide(dst []byte) []byte { return append(dst, s.v...) }
func (s *testSide) SideWritten(err error)        { s.written++; s.err = err }

// sideOwner keeps the side records it is given, and counts ApplySides.
type sideOwner struct {
	mu       sync.Mutex
	replayed []string
	applies  int
	log      *Log
	refuse   bool // ApplySides fails
}

func (o *sideOwner) ReplaySide(p []byte) error {
	o.replayed = append(o.replayed, string(p))
	return nil
}
func (o *sideOwner) ReplayedSides() error { return nil }
func (o *sideOwner) SideLog(l *Log)       { o.log = l }
func (o *sideOwner) ApplySides() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.applies++
	if o.refuse {
		return errors.New("refused")
	}
	return nil
}

// countWrites counts a segment's Write calls.
type countWrites struct {
	*os.File
	n *int
}

func (c countWrites) Write(p []byte) (int, error) { *c.n++; return c.File.Write(p) }

// TestSideRecordsShareTheGroupsWrite: an entry and the side record appended with it
// go out in one write(2) (so one fsync); SideWritten is called once, after it; a
// killed process's side records reach the SideOwner at Open, its entries the Owner,
// each its own.
func TestSideRecordsShareTheGroupsWrite(t *testing.T) {
	base := filepath.Join(t.TempDir(), "l.db")
	writes := 0
	o := &sideOwner{}
	l := openTestLog(t, base, Options{Side: o, ApplyEvery: 1 << 40, WrapSegment: func(f *os.File) SegmentFile { return countWrites{f, &writes} }})
	if o.log != l.Log {
		t.Fatal("SideLog was not given the log")
	}
	sd := &testSide{v: "resp_1"}
	p, err := l.AppendWith(func(g Group) { l.seq++; g.(*testGroup).items = append(g.(*testGroup).items, item{l.seq, "e1"}) }, sd)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Commit(p); err != nil {
		t.Fatal(err)
	}
	if writes != 1 || sd.written != 1 || sd.err != nil {
		t.Fatalf("%d writes, SideWritten %d times (%v); want 1 write, once, nil", writes, sd.written, sd.err)
	}
	// A side record alone (no entry) is a group of its own.
	if p, err = l.AppendWith(nil, &testSide{v: "resp_2"}); err != nil {
		t.Fatal(err)
	}
	l.Commit(p)
	// The process dies: copy the segments aside and reopen over them.
	segs, _ := Segments(base)
	saved := map[string][]byte{}
	for _, sg := range segs {
		saved[sg.Path], _ = os.ReadFile(sg.Path)
	}
	dbCopy, _ := os.ReadFile(base)
	dir2 := t.TempDir()
	base2 := filepath.Join(dir2, "l.db")
	os.WriteFile(base2, dbCopy, 0o600)
	for p, b := range saved {
		os.WriteFile(filepath.Join(dir2, filepath.Base(p)), b, 0o600)
	}
	o2 := &sideOwner{}
	l2 := openTestLog(t, base2, Options{Side: o2})
	if got := o2.replayed; len(got) != 2 || got[0] != "resp_1" || got[1] != "resp_2" {
		t.Errorf("side records replayed: %q, want resp_1, resp_2", got)
	}
	if ow := l2.o.(*testOwner); len(ow.found) != 1 || ow.found[0].V != "e1" {
		t.Errorf("entries replayed: %+v, want e1 alone", ow.found)
	}
}

// TestSegmentKeptUntilSideOwnerHoldsIt: the apply deletes a segment with side
// records only once ApplySides said the owner holds them.
func TestSegmentKeptUntilSideOwnerHoldsIt(t *testing.T) {
	base := filepath.Join(t.TempDir(), "l.db")
	o := &sideOwner{refuse: true}
	l := openTestLog(t, base, Options{Side: o, ApplyEvery: 1 << 40})
	p, _ := l.AppendWith(nil, &testSide{v: "resp_1"})
	if err := l.Commit(p); err != nil {
		t.Fatal(err)
	}
	first, _ := Segments(base)
	if err := l.Sync(); err == nil {
		t.Fatal("Sync with the side owner refusing: nil, want its error")
	}
	if segs, _ := Segments(base); len(segs) < 1 || segs[0] != first[0] {
		t.Fatalf("segments %v after a refused ApplySides; the first (%v) must stay", segs, first)
	}
	o.mu.Lock()
	o.refuse = false
	o.mu.Unlock()
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if segs, _ := Segments(base); len(segs) != 1 || segs[0] == first[0] {
		t.Fatalf("segments %v after ApplySides; want only a new one", segs)
	}
}
