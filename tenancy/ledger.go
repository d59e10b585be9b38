package tenancy

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/lmlite/lmlite/tiers"
)

// The ledger's write path.
//
// Record encodes its entry in the caller's goroutine, appends it to the current group
// under s.mu (where it also gets its seq, so that seqs follow the order of the log),
// then takes s.walMu. Whoever holds s.walMu with its group not yet written writes the
// whole group as one log record (and fsyncs it with SyncFsync): entries that arrive
// while a record is being written queue on s.walMu and go out together in the next one
// (group commit). An uncontended Record writes its own one-entry group with no
// goroutine hand-off; a contended one waits for one write. A record is
//
//	uint32 length | uint32 CRC-32 (IEEE) of the payload | payload: a JSON array of entries
//
// big-endian. The log is a sequence of segment files (path.wal.N): the background
// goroutine (applier) switches the writers to a new segment, applies the entries of
// the old ones to the database in one fsynced transaction (the entry's JSON is the
// ledger bucket's value, so it is encoded once) and deletes them; writers never wait
// for the database. Open replays every segment left by a killed process: a segment
// ends at its first torn record (a write that was never acknowledged), and entries
// the database already holds (seq ≤ its applied seq) are skipped.

// group is the entries acknowledged together.
type group struct {
	buf     []byte   // the entries' JSON objects, comma-separated
	entries []logged // their seq, offsets in buf and what the spend totals need

	// guarded by Store.walMu
	written bool
	err     error
}

// logged is one entry on its way to the database.
type logged struct {
	seq        uint64
	tenant     string
	time       time.Time
	cost       tiers.Money
	start, end int    // of its JSON in the group's buf
	json       []byte // its JSON, once the group is written
}

// Record appends e to the ledger and returns when the group holding it is logged
// (see SyncMode for how durable that is).
func (s *Store) Record(e Entry) error {
	e.Seq = 0
	js, err := json.Marshal(&e)
	if err != nil {
		return fmt.Errorf("tenancy: ledger: %w", err)
	}
	const zeroSeq = `{"seq":0` // the encoding's prefix: Seq is Entry's first field
	rest := js[len(zeroSeq):]
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.seq++
	g := s.cur
	if len(g.buf) > 0 {
		g.buf = append(g.buf, ',')
	}
	start := len(g.buf)
	g.buf = append(g.buf, `{"seq":`...)
	g.buf = strconv.AppendUint(g.buf, s.seq, 10)
	g.buf = append(g.buf, rest...)
	g.entries = append(g.entries, logged{seq: s.seq, tenant: e.Tenant, time: e.Time, cost: e.Cost, start: start, end: len(g.buf)})
	s.mu.Unlock()

	s.walMu.Lock()
	if !g.written {
		s.mu.Lock()
		if s.cur == g {
			s.cur = &group{buf: make([]byte, 0, len(g.buf)+len(js))}
		}
		s.mu.Unlock()
		s.writeLocked(g)
	}
	err = g.err
	s.walMu.Unlock()
	return err
}

// writeLocked appends g to the log as one record. s.walMu is held.
func (s *Store) writeLocked(g *group) {
	g.written = true
	rec := s.rec[:0]
	rec = binary.BigEndian.AppendUint32(rec, uint32(len(g.buf)+2))
	rec = append(rec, 0, 0, 0, 0) // the CRC, below
	rec = append(rec, '[')
	rec = append(rec, g.buf...)
	rec = append(rec, ']')
	binary.BigEndian.PutUint32(rec[4:], crc32.ChecksumIEEE(rec[8:]))
	if cap(rec) <= 1<<20 {
		s.rec = rec
	}
	_, err := s.wal.Write(rec)
	if err == nil && s.opts.Sync == SyncFsync {
		err = s.wal.Sync()
	}
	if err != nil {
		g.err = fmt.Errorf("tenancy: ledger: %w", err)
		// The record may be torn, and replay ends a segment at a torn record: later
		// records go to a new segment.
		if f, n, err := s.createSegment(); err == nil {
			s.wal.Close()
			s.wal, s.walSeg = f, n
		}
		return
	}
	for i := range g.entries {
		le := &g.entries[i]
		le.json = g.buf[le.start:le.end:le.end]
	}
	s.pending = append(s.pending, g.entries...)
	s.commits.Add(1)
	if len(s.pending) >= s.opts.ApplyEntries {
		select {
		case s.kick <- struct{}{}:
		default: // an apply is already due
		}
	}
}

// flushLocked writes the current group if it has entries. s.walMu is held.
func (s *Store) flushLocked() {
	s.mu.Lock()
	g := s.cur
	s.cur = &group{}
	s.mu.Unlock()
	if !g.written && len(g.entries) > 0 {
		s.writeLocked(g)
	}
}

// applier applies logged entries to the database every ApplyEvery, or sooner when
// ApplyEntries are waiting, until Close.
func (s *Store) applier() {
	defer close(s.stopped)
	t := time.NewTicker(s.opts.ApplyEvery)
	defer t.Stop()
	for {
		select {
		case <-s.kick:
		case <-t.C:
		case <-s.stop:
			return
		}
		if err := s.apply(); err != nil {
			slog.Default().Error("tenancy: applying the ledger log failed; it stays in the log", "error", err)
		}
	}
}

// apply switches the writers to a new segment, writes the entries logged so far to
// the database in one fsynced transaction and deletes the segments they were in.
func (s *Store) apply() error {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	s.walMu.Lock()
	empty := len(s.pending) == 0
	s.walMu.Unlock()
	if empty {
		return nil
	}
	// Create the segment outside the log lock: with SyncFsync it syncs the directory.
	f, n, err := s.createSegment()
	if err != nil {
		return err
	}
	s.walMu.Lock()
	batch, old := s.pending, s.wal
	s.pending, s.wal, s.walSeg = nil, f, n
	s.walMu.Unlock()
	old.Close()
	err = s.db.Update(func(tx *bolt.Tx) error {
		if err := writeEntries(tx, batch); err != nil {
			return err
		}
		var v [8]byte
		binary.BigEndian.PutUint64(v[:], batch[len(batch)-1].seq) // groups are logged in seq order
		return tx.Bucket(bucketMeta).Put(keyApplied, v[:])
	})
	if err != nil {
		s.walMu.Lock()
		s.pending = append(batch, s.pending...)
		s.walMu.Unlock()
		return err
	}
	// Every segment numbered below n was closed before the switch: all its entries
	// were in batch (or failed to log, or were applied before).
	segs, err := s.segments()
	if err != nil {
		return err
	}
	for _, sg := range segs {
		if sg.n < n {
			if err := os.Remove(sg.path); err != nil && !os.IsNotExist(err) {
				return err
			}
		}
	}
	return nil
}

// sync makes every acknowledged entry visible in the database.
func (s *Store) sync() error {
	return s.apply()
}

func writeEntries(tx *bolt.Tx, entries []logged) error {
	led, spend := tx.Bucket(bucketLedger), tx.Bucket(bucketSpend)
	totals := map[string]tiers.Money{}
	var kb [8]byte
	for i := range entries {
		e := &entries[i]
		binary.BigEndian.PutUint64(kb[:], e.seq)
		if err := led.Put(kb[:], e.json); err != nil {
			return err
		}
		if e.cost != 0 {
			d, m := windows(e.time)
			totals[spendKey(e.tenant, 'd', d)] += e.cost
			totals[spendKey(e.tenant, 'm', m)] += e.cost
		}
	}
	for k, add := range totals {
		old := tiers.Money(0)
		if v := spend.Get([]byte(k)); len(v) == 8 {
			old = tiers.Money(binary.BigEndian.Uint64(v))
		}
		var vb [8]byte
		binary.BigEndian.PutUint64(vb[:], uint64(old+add))
		if err := spend.Put([]byte(k), vb[:]); err != nil {
			return err
		}
	}
	return nil
}

// segment is one log file: path.wal.N (or path.wal, the single log of earlier
// versions, as number 0).
type segment struct {
	n    int
	path string
}

func (s *Store) segPath(n int) string { return s.path + ".wal." + strconv.Itoa(n) }

// segments lists the log's files, in number order.
func (s *Store) segments() ([]segment, error) {
	dir, base := filepath.Split(s.path)
	if dir == "" {
		dir = "."
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []segment
	for _, de := range des {
		name := de.Name()
		if name == base+".wal" {
			out = append(out, segment{0, filepath.Join(dir, name)})
			continue
		}
		if num, ok := strings.CutPrefix(name, base+".wal."); ok {
			if n, err := strconv.Atoi(num); err == nil && n > 0 {
				out = append(out, segment{n, filepath.Join(dir, name)})
			}
		}
	}
	slices.SortFunc(out, func(a, b segment) int { return a.n - b.n })
	return out, nil
}

// createSegment creates a new, empty log segment with the next number.
func (s *Store) createSegment() (*os.File, int, error) {
	n := int(s.segNum.Add(1))
	path := s.segPath(n)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		return nil, 0, fmt.Errorf("tenancy: ledger: %w", err)
	}
	if s.opts.Sync == SyncFsync { // the new file's name must survive a power cut too
		if err := syncDir(filepath.Dir(path)); err != nil {
			f.Close()
			os.Remove(path)
			return nil, 0, fmt.Errorf("tenancy: ledger: %w", err)
		}
	}
	return f, n, nil
}

func syncDir(dir string) error {
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

// replay applies the entries of the segments left behind (by a killed process), then
// deletes them and opens a new segment.
func (s *Store) replay() error {
	segs, err := s.segments()
	if err != nil {
		return err
	}
	applied := s.seq
	var batch []logged
	for _, sg := range segs {
		data, err := os.ReadFile(sg.path)
		if err != nil {
			return err
		}
		s.segNum.Store(max(s.segNum.Load(), int64(sg.n)))
		for len(data) >= 8 {
			n := binary.BigEndian.Uint32(data)
			sum := binary.BigEndian.Uint32(data[4:])
			if uint64(len(data)-8) < uint64(n) || crc32.ChecksumIEEE(data[8:8+n]) != sum {
				break // a torn tail: never acknowledged
			}
			var es []json.RawMessage
			if err := json.Unmarshal(data[8:8+n], &es); err != nil {
				break
			}
			for _, raw := range es {
				var e Entry
				if err := json.Unmarshal(raw, &e); err != nil {
					return fmt.Errorf("ledger log %s: %w", sg.path, err)
				}
				if e.Seq > applied {
					batch = append(batch, logged{seq: e.Seq, tenant: e.Tenant, time: e.Time, cost: e.Cost, json: raw})
					s.seq = max(s.seq, e.Seq)
				}
			}
			data = data[8+n:]
		}
	}
	if len(batch) > 0 {
		slices.SortFunc(batch, func(a, b logged) int { return cmp.Compare(a.seq, b.seq) })
		batch = slices.CompactFunc(batch, func(a, b logged) bool { return a.seq == b.seq })
		err := s.db.Update(func(tx *bolt.Tx) error {
			if err := writeEntries(tx, batch); err != nil {
				return err
			}
			var v [8]byte
			binary.BigEndian.PutUint64(v[:], batch[len(batch)-1].seq)
			return tx.Bucket(bucketMeta).Put(keyApplied, v[:])
		})
		if err != nil {
			return err
		}
	}
	for _, sg := range segs {
		if err := os.Remove(sg.path); err != nil {
			return err
		}
	}
	s.wal, s.walSeg, err = s.createSegment()
	return err
}
