package ledger

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// SyncMode says how durable a logged group is when Commit returns.
type SyncMode int

const (
	// SyncFsync fsyncs every group's record: it survives power loss.
	SyncFsync SyncMode = iota
	// SyncProcess writes every group's record to the OS without fsync: it survives
	// the process being killed, not the machine losing power.
	SyncProcess
)

// Options configure a Log. The zero value is SyncFsync, applying every 200ms or 4096
// entries.
type Options struct {
	Sync SyncMode
	// ApplyEvery is how often logged groups are applied to the database (and their
	// segments deleted); 0: 200ms. ApplyEntries applies sooner when that many entries
	// wait (Batch.Entries); 0: 4096.
	ApplyEvery   time.Duration
	ApplyEntries int
	// WrapSegment (tests) wraps each new segment file, to see what is written and synced.
	WrapSegment func(*os.File) SegmentFile
	// Side keeps the side records (side.go); nil: none is written, and those a log
	// holds at Open are dropped (with a warning).
	Side SideOwner
}

// SegmentFile is what the log needs of a segment: append, fsync, close. It is the
// *os.File itself unless Options.WrapSegment wraps it.
type SegmentFile interface {
	Write(p []byte) (int, error)
	Sync() error
	Close() error
}

// ErrClosed is returned by Append after Close.
var ErrClosed = errors.New("ledger: closed")

// Group is the owner's entries appended since the last record: written as one
// record.
type Group interface {
	// Payload appends the record's payload to dst.
	Payload(dst []byte) []byte
	// Empty reports that the group holds nothing to write.
	Empty() bool
}

// Batch is the logged groups that the database does not hold yet.
type Batch interface {
	// Add takes g, just logged, after the groups it holds.
	Add(g Group)
	// Entries is how many entries wait (for Options.ApplyEntries).
	Entries() int
	Empty() bool
	// Apply stores the batch in the database, in tx.
	Apply(tx *bolt.Tx) error
	// Append takes the groups of newer after its own (how a batch whose Apply failed
	// stays in front of those logged meanwhile).
	Append(newer Batch)
	// Reset empties the batch for reuse.
	Reset()
}

// Owner is the log's user (tenancy.Store): it makes the groups and batches, knows
// what a record holds and how it is applied; the log knows none of it.
type Owner interface {
	NewGroup() Group
	NewBatch() Batch
	// Written is called, in log order and with the log's lock held, with each group
	// once the log has written it (err nil; the batch has taken it) or failed to.
	Written(g Group, err error)
	// Replay is called at Open with the payload of each intact record left in the log,
	// in order; false ends the record's segment (a payload it cannot read).
	Replay(payload []byte) bool
	// Replayed is the batch of what Replay was given that the database does not hold.
	Replayed() Batch
}

// Log is the write-ahead log of a bbolt database: the segments base.wal.N beside it,
// written with group commit, and applied to the database in the background.
//
// Append adds to the current group under the log's append lock, where the owner
// numbers its entries, so that their numbers follow the log's order. Commit then takes
// the write lock: whoever holds it with its group not yet written writes the whole
// group as one record (and fsyncs it with SyncFsync); groups appended meanwhile queue
// on the lock and go out together in the next record (group commit). An uncontended
// Commit writes its own one-entry group with no goroutine hand-off; a contended one
// waits for one write. A written group is added to the pending batch.
//
// Every ApplyEvery (or ApplyEntries) a background goroutine switches the writers to a
// new segment, applies the pending batch in one fsynced bbolt transaction
// (Batch.Apply) and deletes the old segments: writers never wait for the database,
// and the database does one transaction per batch, not per entry. Open replays the
// segments left by a killed process (Owner.Replay skips what the database holds).
type Log struct {
	db   *bolt.DB
	base string
	opts Options
	o    Owner

	commits atomic.Int64 // records written

	mu     sync.Mutex // the append lock: guards cur and closed
	cur    *Pending
	closed bool

	walMu  sync.Mutex   // the write lock: held while a group is written (followers queue on it); guards what follows
	wal    SegmentFile  // the segment being appended to
	walSeg int          // its number
	segNum atomic.Int64 // the last segment number used
	batch  Batch        // logged, not yet in the database
	spare  Batch        // the batch last applied, for reuse
	rec    []byte       // record buffer
	free   *Pending     // a written Pending every appender has committed, for reuse
	sided  bool         // a side record was written since the last switch of segment

	applyMu sync.Mutex // serialises applies (the background goroutine, Sync and Close)

	kick    chan struct{} // cap 1: asks for an apply
	stop    chan struct{}
	stopped chan struct{}
}

// Pending is a group being appended to, until Commit has written it. It is reused
// once every appender has committed it (a request's allocation less, issue 36): an
// appender must not use it after its Commit.
type Pending struct {
	g     Group
	refs  atomic.Int32 // appenders that have not committed it yet
	sides []Side       // guarded by Log.mu until the group is taken to be written, then by Log.walMu
	// guarded by Log.walMu
	written bool
	err     error
}

// Open replays the log of base left by a killed process into db (one transaction),
// deletes its segments, opens a new one and starts applying in the background.
func Open(db *bolt.DB, base string, opts Options, o Owner) (*Log, error) {
	if opts.ApplyEvery == 0 {
		opts.ApplyEvery = 200 * time.Millisecond
	}
	if opts.ApplyEntries == 0 {
		opts.ApplyEntries = 4096
	}
	l := &Log{db: db, base: base, opts: opts, o: o,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})}
	var sideErr error
	dropped := 0
	segs, err := ReadSegments(base, func(p []byte) bool { // a torn tail (never acknowledged) ends a segment
		if !isSide(p) {
			return o.Replay(p)
		}
		if opts.Side == nil {
			dropped++
			return true
		}
		if err := opts.Side.ReplaySide(p[1:]); err != nil {
			sideErr = err
			return false
		}
		return true
	})
	if err == nil {
		err = sideErr
	}
	if err != nil {
		return nil, err
	}
	if dropped > 0 {
		slog.Default().Warn("ledger: side records left in the log with no owner to take them were dropped", "records", dropped)
	}
	for _, sg := range segs {
		l.segNum.Store(max(l.segNum.Load(), int64(sg.N)))
	}
	if b := o.Replayed(); !b.Empty() {
		if err := db.Update(b.Apply); err != nil {
			return nil, err
		}
	}
	if opts.Side != nil {
		if err := opts.Side.ReplayedSides(); err != nil {
			return nil, err
		}
	}
	if err := RemoveSegments(segs); err != nil {
		return nil, err
	}
	l.batch, l.spare = o.NewBatch(), o.NewBatch()
	l.cur = &Pending{g: o.NewGroup()}
	if l.wal, l.walSeg, err = l.createSegment(); err != nil {
		return nil, err
	}
	if opts.Side != nil {
		opts.Side.SideLog(l)
	}
	go l.applier()
	return l, nil
}

// Append calls fn with the current group, under the append lock, and returns it for
// Commit; ErrClosed after Close.
func (l *Log) Append(fn func(g Group)) (*Pending, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	fn(l.cur.g)
	l.cur.refs.Add(1)
	return l.cur, nil
}

// Commit returns when p (from Append) is logged, with the error of its write if it
// failed: whoever holds the write lock with p not yet written writes it.
func (l *Log) Commit(p *Pending) error {
	l.walMu.Lock()
	if !p.written {
		l.mu.Lock()
		if l.cur == p {
			l.cur = l.newPendingLocked()
		}
		l.mu.Unlock()
		l.writeLocked(p)
	}
	err := p.err
	if p.refs.Add(-1) == 0 { // its last appender: nobody holds it now
		*p = Pending{}
		l.free = p
	}
	l.walMu.Unlock()
	return err
}

// newPendingLocked is an empty Pending with a new group, the free one if there is
// one. l.walMu is held.
func (l *Log) newPendingLocked() *Pending {
	p := l.free
	if p == nil {
		p = new(Pending)
	}
	l.free = nil
	p.g = l.o.NewGroup()
	return p
}

// Commits is the number of records written so far.
func (l *Log) Commits() int64 { return l.commits.Load() }

// writeLocked appends p's group to the log as one record, then to the pending
// batch. l.walMu is held, and p is no longer l.cur.
func (l *Log) writeLocked(p *Pending) {
	p.written = true
	rec := BeginRecord(l.rec[:0])
	rec = p.g.Payload(rec)
	EndRecord(rec, 0)
	rec = appendSides(rec, p)
	if cap(rec) <= 1<<20 {
		l.rec = rec
	}
	_, err := l.wal.Write(rec)
	if err == nil && l.opts.Sync == SyncFsync {
		err = l.wal.Sync()
	}
	if err != nil {
		p.err = fmt.Errorf("ledger: %w", err)
		// The record may be torn, and replay ends a segment at a torn record: later
		// records go to a new segment.
		if f, n, err := l.createSegment(); err == nil {
			l.wal.Close()
			l.wal, l.walSeg = f, n
		}
		l.o.Written(p.g, p.err)
		sidesWritten(p, p.err)
		return
	}
	l.commits.Add(1)
	l.batch.Add(p.g)
	l.o.Written(p.g, nil)
	if len(p.sides) > 0 {
		l.sided = true
	}
	sidesWritten(p, nil)
	if l.batch.Entries() >= l.opts.ApplyEntries {
		select {
		case l.kick <- struct{}{}:
		default: // an apply is already due
		}
	}
}

// applier applies the pending batch every ApplyEvery, or sooner when ApplyEntries
// wait, until Close.
func (l *Log) applier() {
	defer close(l.stopped)
	t := time.NewTicker(l.opts.ApplyEvery)
	defer t.Stop()
	for {
		select {
		case <-l.kick:
		case <-t.C:
		case <-l.stop:
			return
		}
		if err := l.apply(); err != nil {
			slog.Default().Error("ledger: applying the log failed; it stays in the log", "error", err)
		}
	}
}

// Sync makes every group logged so far visible in the database: it applies the
// pending batch.
func (l *Log) Sync() error { return l.apply() }

// apply switches the writers to a new segment, applies the batch logged so far to
// the database in one fsynced transaction and deletes the segments it was in.
func (l *Log) apply() error {
	l.applyMu.Lock()
	defer l.applyMu.Unlock()
	l.walMu.Lock()
	empty := l.batch.Empty() && !l.sided
	l.walMu.Unlock()
	if empty {
		return nil
	}
	// Create the segment outside the write lock: with SyncFsync it syncs the directory.
	f, n, err := l.createSegment()
	if err != nil {
		return err
	}
	l.walMu.Lock()
	b, old := l.batch, l.wal
	l.batch, l.spare = l.spare, nil
	l.wal, l.walSeg = f, n
	l.sided = false
	l.walMu.Unlock()
	old.Close()
	if !b.Empty() {
		err = l.db.Update(b.Apply)
	}
	if err == nil && l.opts.Side != nil {
		// The side records of the old segments were all written (SideWritten) before
		// the switch: their owner must hold them before the segments go.
		if serr := l.opts.Side.ApplySides(); serr != nil {
			l.walMu.Lock()
			b.Reset()
			l.spare = b
			l.sided = true // try again at the next apply
			l.walMu.Unlock()
			return fmt.Errorf("ledger: the side records' owner: %w", serr)
		}
	}
	l.walMu.Lock()
	if err != nil { // keep the batch pending, in front of the groups logged meanwhile
		b.Append(l.batch)
		l.batch.Reset()
		l.spare, l.batch = l.batch, b
		l.walMu.Unlock()
		return err
	}
	b.Reset()
	l.spare = b
	l.walMu.Unlock()
	// Every segment numbered below n was closed before the switch: all its groups
	// were in b (or failed to log, or were applied before).
	segs, err := Segments(l.base)
	if err != nil {
		return err
	}
	for _, sg := range segs {
		if sg.N < n {
			if err := os.Remove(sg.Path); err != nil && !os.IsNotExist(err) {
				return err
			}
		}
	}
	return nil
}

// createSegment creates a new, empty segment with the next number.
func (l *Log) createSegment() (SegmentFile, int, error) {
	n := int(l.segNum.Add(1))
	// with SyncFsync the new file's name must survive a power cut too
	f, err := CreateSegment(l.base, n, l.opts.Sync == SyncFsync)
	if err != nil {
		return nil, 0, fmt.Errorf("ledger: %w", err)
	}
	if l.opts.WrapSegment != nil {
		return l.opts.WrapSegment(f), n, nil
	}
	return f, n, nil
}

// Close writes the current group, applies everything, stops the background
// goroutine and closes the segment (deleting it when everything is in the database).
// Appends after Close fail with ErrClosed. The database stays open (the caller's).
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true // no new entries: the current group is the last
	p := l.cur
	p.refs.Add(1) // Close commits it as its appenders do
	l.mu.Unlock()
	if !p.g.Empty() || len(p.sides) > 0 {
		l.Commit(p) // its error is its appenders'
	}
	close(l.stop)
	<-l.stopped
	err := l.apply()
	l.walMu.Lock()
	defer l.walMu.Unlock()
	if e := l.wal.Close(); err == nil {
		err = e
	}
	if err == nil && l.batch.Empty() { // everything is in the database
		err = os.Remove(SegmentPath(l.base, l.walSeg))
	}
	return err
}
