package respstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
)

// The journal (path + "-journal", beside the bbolt file) makes a group of Puts
// durable with one fdatasync, before bbolt commits them. It is a file of records
//
//	uint32 len(payload) | uint32 crc32c(seq | payload) | uint64 seq | payload
//
// (little-endian), each record one group of Puts with seq one more than the last
// group's, its payload the group's Puts one after the other:
//
//	str tenant | str id | str record (appendRecord)
//
// Records are written from the file's start again once bbolt holds every record
// written (its commit stores the seq of the last group it holds: bucketJournal's
// "applied"), over the records made useless, so once the file has reached its size
// the writes only overwrite: no size or block allocation for fdatasync to sync. Reading stops at the
// first record whose checksum fails (a torn write, or an older record's middle) or
// whose seq does not grow (an older pass's record).
const (
	journalHeader = 16
	// journalSize is the size the file is made at open (zeros) and the bytes a pass
	// of records fills before the writer waits for bbolt to hold them all and starts
	// from the beginning again (a larger group is written anyway, growing the file).
	journalSize = 4 << 20
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

var errJournalCorrupt = errors.New("respstore: malformed journal record")

type journal struct {
	f   *os.File
	off int64  // where the next record is written
	buf []byte // the record being written (reused)
}

// openJournal opens (creating, and syncing the directory that holds it) the
// journal and returns it with its contents (to replay).
func openJournal(path string) (*journal, []byte, error) {
	_, err := os.Stat(path)
	created := errors.Is(err, os.ErrNotExist)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, nil, err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if created {
		if err := syncDir(filepath.Dir(path)); err != nil {
			f.Close()
			return nil, nil, err
		}
	}
	return &journal{f: f}, data, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// reset empties the journal (every record it holds is in bbolt) and makes it size
// bytes of zeros (journalSize; 0 in ledger mode, which writes none), synced, so
// that the records written next only overwrite.
func (j *journal) reset(size int) error {
	if err := j.f.Truncate(0); err != nil {
		return err
	}
	if _, err := j.f.WriteAt(make([]byte, size), 0); err != nil {
		return err
	}
	j.off = 0
	return j.f.Sync()
}

// fits says whether a record of n payload bytes fits in the file's current pass
// (a record alone in a pass always does).
func (j *journal) fits(n int) bool {
	return j.off == 0 || j.off+int64(journalHeader+n) <= journalSize
}

// write writes the record of seq and payload after the last one and, with sync,
// fdatasyncs it: once it returns nil, the record is on the disk (without sync: in
// the OS, which writes it out even if this process is killed).
func (j *journal) write(seq uint64, payload []byte, sync bool) error {
	b := appendJournalRecord(j.buf[:0], seq, payload)
	j.buf = b
	if _, err := j.f.WriteAt(b, j.off); err != nil {
		return err
	}
	if sync {
		if err := datasync(j.f); err != nil {
			return err
		}
	}
	j.off += int64(len(b))
	if cap(j.buf) > 1<<20 {
		j.buf = nil // a large group's buffer is not kept
	}
	return nil
}

// appendJournalRecord appends the record of seq and payload to b.
func appendJournalRecord(b []byte, seq uint64, payload []byte) []byte {
	at := len(b)
	b = append(b, make([]byte, journalHeader)...)
	binary.LittleEndian.PutUint32(b[at:], uint32(len(payload)))
	binary.LittleEndian.PutUint64(b[at+8:], seq)
	b = append(b, payload...)
	binary.LittleEndian.PutUint32(b[at+4:], crc32.Checksum(b[at+8:], crcTable))
	return b
}

// rewind makes the next record start the file again (after a bbolt commit that
// holds every record written).
func (j *journal) rewind() { j.off = 0 }

func (j *journal) close() error { return j.f.Close() }

// journalRecords calls fn with each record of data in order, up to the first torn,
// corrupt or older one, and returns the last seq it passed.
func journalRecords(data []byte, fn func(seq uint64, payload []byte) error) (uint64, error) {
	var last uint64
	for len(data) >= journalHeader {
		n := int(binary.LittleEndian.Uint32(data[0:]))
		sum := binary.LittleEndian.Uint32(data[4:])
		seq := binary.LittleEndian.Uint64(data[8:])
		if n > len(data)-journalHeader || seq == 0 || seq <= last || crc32.Checksum(data[8:journalHeader+n], crcTable) != sum {
			break
		}
		if err := fn(seq, data[journalHeader:journalHeader+n]); err != nil {
			return last, err
		}
		last = seq
		data = data[journalHeader+n:]
	}
	return last, nil
}

// appendJournalPut appends one Put to a record's payload.
func appendJournalPut(b []byte, op *putOp) []byte {
	b = appendStr(b, []byte(op.rec.Tenant))
	b = appendStr(b, []byte(op.rec.ID))
	return appendStr(b, op.val)
}

// journalPuts decodes a record's payload into the Puts it holds (their values are
// subslices of payload).
func journalPuts(payload []byte) ([]*putOp, error) {
	var ops []*putOp
	r := reader{b: payload}
	for len(r.b) > 0 && r.err == nil {
		tenant, id, val := r.str(), r.str(), r.str()
		if r.err != nil {
			break
		}
		v, err := viewRecord(val)
		if err != nil {
			return nil, err
		}
		rec, err := v.record(string(tenant), string(id))
		if err != nil {
			return nil, err
		}
		ops = append(ops, &putOp{rec: rec, val: val, size: rec.Size()})
	}
	if r.err != nil {
		return nil, fmt.Errorf("%w: %w", errJournalCorrupt, r.err)
	}
	return ops, nil
}
