package ledger

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// record is one whole record of payload p.
func record(p string) []byte {
	b := BeginRecord(nil)
	b = append(b, p...)
	EndRecord(b, 0)
	return b
}

// TestRecordsStopAtTornRecord: the records written whole are read back in order; a
// record cut short, or with a byte changed, ends the segment (it and what follows are
// never read), as replay after a kill mid-write needs.
func TestRecordsStopAtTornRecord(t *testing.T) {
	var log []byte
	for _, p := range []string{`[1]`, `[2,3]`, ``, `[4]`} {
		start := len(log)
		log = BeginRecord(log)
		log = append(log, p...)
		EndRecord(log, start)
	}
	read := func(data []byte) (got []string, n int) {
		n = Records(data, func(p []byte) bool { got = append(got, string(p)); return true })
		return got, n
	}
	if got, n := read(log); !slices.Equal(got, []string{`[1]`, `[2,3]`, ``, `[4]`}) || n != len(log) {
		t.Fatalf("whole log: %q, %d of %d bytes", got, n, len(log))
	}
	last := len(log) - len(record(`[4]`))
	for cut := last + 1; cut < len(log); cut++ { // the last record torn anywhere
		if got, n := read(log[:cut]); len(got) != 3 || n != last {
			t.Fatalf("cut at %d: %q, %d bytes, want the first 3 records (%d bytes)", cut, got, n, last)
		}
	}
	bad := slices.Clone(log)
	bad[len(record(`[1]`))+HeaderLen+1] ^= 1 // a byte of the second record's payload
	if got, _ := read(bad); !slices.Equal(got, []string{`[1]`}) {
		t.Fatalf("second record corrupt: read %q, want only the first", got)
	}
	if n := Records(log, func([]byte) bool { return false }); n != 0 {
		t.Fatalf("fn returning false at the first record: %d bytes taken, want 0", n)
	}
}

// TestSegmentsInNumberOrder: a log's segments are listed by number (10 after 9, not
// after 1), the old single log as number 0, and other files beside it are not.
func TestSegmentsInNumberOrder(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "lmlite.db")
	for _, name := range []string{"lmlite.db", "lmlite.db.wal", "lmlite.db.wal.10", "lmlite.db.wal.9", "lmlite.db.wal.1", "lmlite.db.wal.x", "other.db.wal.2", "lmlite.db.wal.0"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	segs, err := Segments(base)
	if err != nil {
		t.Fatal(err)
	}
	var ns []int
	for _, s := range segs {
		ns = append(ns, s.N)
		if want := SegmentPath(base, s.N); s.N > 0 && s.Path != want {
			t.Errorf("segment %d at %s, want %s", s.N, s.Path, want)
		}
	}
	if !slices.Equal(ns, []int{0, 1, 9, 10}) {
		t.Fatalf("segments %v, want [0 1 9 10]", ns)
	}
	if err := SyncDir(dir); err != nil {
		t.Fatal(err)
	}
}

// TestReadSegmentsAfterKill: what a replay sees of a log left by a killed process:
// every segment's intact records in segment order, a torn record ending only its own
// segment; CreateSegment never reuses a number, and RemoveSegments leaves no segment.
func TestReadSegmentsAfterKill(t *testing.T) {
	base := filepath.Join(t.TempDir(), "lmlite.db")
	for n, recs := range map[int][][]byte{
		1: {record(`[1]`), record(`[2]`)[:5]}, // the second record torn (kill mid-write)
		2: {record(`[3]`), record(`[4]`)},
	} {
		f, err := CreateSegment(base, n, n == 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			f.Write(r)
		}
		f.Close()
	}
	if _, err := CreateSegment(base, 2, false); err == nil {
		t.Fatal("CreateSegment made segment 2 a second time")
	}
	var got []string
	segs, err := ReadSegments(base, func(p []byte) bool { got = append(got, string(p)); return true })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{`[1]`, `[3]`, `[4]`}) || len(segs) != 2 || segs[1].N != 2 {
		t.Fatalf("read %q from %v, want [1] [3] [4] from segments 1 and 2", got, segs)
	}
	if err := RemoveSegments(segs); err != nil {
		t.Fatal(err)
	}
	if left, _ := Segments(base); len(left) != 0 {
		t.Fatalf("segments left after RemoveSegments: %v", left)
	}
}
