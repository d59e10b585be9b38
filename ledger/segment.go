package ledger

import (
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// HeaderLen is the length of a record's header (length and CRC).
const HeaderLen = 8

// BeginRecord appends a record's header to b, to be filled in by EndRecord once the
// payload has been appended after it (so that a record is built in one buffer, with
// no copy of its payload).
func BeginRecord(b []byte) []byte { return append(b, 0, 0, 0, 0, 0, 0, 0, 0) }

// EndRecord fills in the header of the record that starts at b[start:] (written by
// BeginRecord) from the payload after it, to the end of b.
func EndRecord(b []byte, start int) {
	p := b[start+HeaderLen:]
	binary.BigEndian.PutUint32(b[start:], uint32(len(p)))
	binary.BigEndian.PutUint32(b[start+4:], crc32.ChecksumIEEE(p))
}

// Records calls fn with the payload of each intact record of data, in order, and stops
// at the first torn one (too short for its length, or its CRC wrong: a write never
// finished) or when fn returns false. It returns how many bytes of data the records
// passed to fn took.
func Records(data []byte, fn func(payload []byte) bool) int {
	off := 0
	for len(data)-off >= HeaderLen {
		n := binary.BigEndian.Uint32(data[off:])
		sum := binary.BigEndian.Uint32(data[off+4:])
		if uint64(len(data)-off-HeaderLen) < uint64(n) {
			break
		}
		p := data[off+HeaderLen : off+HeaderLen+int(n)]
		if crc32.ChecksumIEEE(p) != sum || !fn(p) {
			break
		}
		off += HeaderLen + int(n)
	}
	return off
}

// Segment is one file of a log: base.wal.N, or base.wal (number 0).
type Segment struct {
	N    int
	Path string
}

// SegmentPath is the path of segment n of the log of base.
func SegmentPath(base string, n int) string { return base + ".wal." + strconv.Itoa(n) }

// Segments lists the files of the log of base, in number order.
func Segments(base string) ([]Segment, error) {
	dir, name := filepath.Split(base)
	if dir == "" {
		dir = "."
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []Segment
	for _, de := range des {
		fn := de.Name()
		if fn == name+".wal" {
			out = append(out, Segment{0, filepath.Join(dir, fn)})
			continue
		}
		if num, ok := strings.CutPrefix(fn, name+".wal."); ok {
			if n, err := strconv.Atoi(num); err == nil && n > 0 {
				out = append(out, Segment{n, filepath.Join(dir, fn)})
			}
		}
	}
	slices.SortFunc(out, func(a, b Segment) int { return a.N - b.N })
	return out, nil
}

// SyncDir fsyncs a directory, so that the files created in it survive a power cut.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if e := d.Close(); err == nil {
		err = e
	}
	return err
}

// CreateSegment creates segment n of the log of base, new and empty, for appending
// (it fails if the file exists: a number is never reused). With syncDir the
// directory is fsynced after, so that the new file's name survives a power cut too.
func CreateSegment(base string, n int, syncDir bool) (*os.File, error) {
	path := SegmentPath(base, n)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	if syncDir {
		if err := SyncDir(filepath.Dir(path)); err != nil {
			f.Close()
			os.Remove(path)
			return nil, err
		}
	}
	return f, nil
}

// ReadSegments calls fn with the payload of each intact record of every segment of the
// log of base, segment by segment in number order; a segment ends at its first torn
// record or when fn returns false, and the next segment is read all the same (what a
// replay after a kill needs). It returns the segments read.
func ReadSegments(base string, fn func(payload []byte) bool) ([]Segment, error) {
	segs, err := Segments(base)
	if err != nil {
		return nil, err
	}
	for _, sg := range segs {
		data, err := os.ReadFile(sg.Path)
		if err != nil {
			return nil, err
		}
		Records(data, fn)
	}
	return segs, nil
}

// RemoveSegments deletes segs (once what they hold is stored elsewhere).
func RemoveSegments(segs []Segment) error {
	for _, sg := range segs {
		if err := os.Remove(sg.Path); err != nil {
			return err
		}
	}
	return nil
}
