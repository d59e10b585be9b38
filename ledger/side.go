package ledger

import (
	"errors"
	"slices"
)

// # Side records
//
// Another store can log its own records in the ledger's group commit, so that what
// a request leaves in it is made durable by the same write and sync as the request's
// usage entry: respstore's stored responses (issue 31). A stored response used to
// wait for the ledger's fsync (the settle) and then for its own journal's fdatasync;
// under 16 connections the second queued behind other requests' ledger syncs, and
// /v1/responses with store: true ran at 0.69x chat's requests/s. Riding in the
// entry's group it waits for one sync, and a group whose write fails fails both: a
// stored response is never left by a settle that failed.
//
// A side record is AppendSide'd to the Pending its request's entry was appended to
// (before anyone Commits it). Commit then writes the group's record followed by its
// side records, each a record of its own (the same header) whose payload starts with
// SideTag, in one write and one sync; each side record's SideWritten is called, with
// the write lock held, in log order, with the write's error. When the Pending's
// write has already begun (another writer took the group), the side record goes in
// the current group instead, and is written only if the Pending's write succeeded
// (else its SideWritten gets that error): still never without its entry.
//
// Replay: Open keeps the side records it finds (ReplayedSides) and the segments that
// hold them; a store attaches with AttachSide, takes them, and gives the log its
// sync: before the log deletes a segment holding side records, it calls the sync,
// which returns once the side store holds every side record written so far in its
// own files. Until a store is attached (or while its sync fails), those segments
// stay, and a later Open reads them again (the owner's Replay skips what its
// database holds). The owner's payloads must not start with SideTag (tenancy's are
// JSON arrays, '['). A binary older than side records reads one as a record its
// owner cannot read, which ends that segment for it.

// SideTag is the first byte of a side record's payload.
const SideTag = 0x00

// A SideRecord is another store's record, logged in a group's batch (AppendSide).
type SideRecord interface {
	// AppendSide appends the record's payload (after SideTag) to dst. It is called
	// with the log's write lock held, in log order, once, when the group is written.
	AppendSide(dst []byte) []byte
	// SideWritten is called with the write lock held, in log order, once the record
	// is written (and synced with SyncFsync): err nil, or the write's error.
	SideWritten(err error)
}

// errNotLogged is the error of a side record that had to follow a group that was
// never written.
var errNotLogged = errors.New("ledger: the record it follows was not logged")

// side is a side record in a Pending; after, when not nil, is the Pending it must
// follow (written only if after's write succeeded).
type side struct {
	rec   SideRecord
	after *Pending
}

// AppendSide adds rec to p's group, to be written with it in one write and sync, if
// p's write has not begun; else to the current group, written after p only if p's
// write succeeded. It returns the Pending rec went in, to Commit (it holds an
// appender's reference to it); ErrClosed after Close. p's own appender must not
// Commit p before the Commit of the Pending returned here has returned (p stays
// alive until then).
func (l *Log) AppendSide(p *Pending, rec SideRecord) (*Pending, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	s := side{rec: rec}
	if l.cur != p {
		s.after = p
	}
	l.cur.sides = append(l.cur.sides, s)
	l.cur.refs.Add(1)
	return l.cur, nil
}

// appendSides appends p's side records after its group's record in rec (from
// writeLocked, walMu held) and returns rec.
func (l *Log) appendSides(rec []byte, p *Pending) []byte {
	for _, s := range p.sides {
		if s.after != nil && (!s.after.written || s.after.err != nil) {
			continue // its entry was not logged: neither is it (sideWritten tells it)
		}
		at := len(rec)
		rec = BeginRecord(rec)
		rec = append(rec, SideTag)
		rec = s.rec.AppendSide(rec)
		EndRecord(rec, at)
	}
	if !l.sideKept {
		l.sideKept, l.sideLow = true, l.walSeg
	}
	l.sideHigh = l.walSeg
	return rec
}

// sideWritten tells p's side records their write's outcome (walMu held).
func (l *Log) sideWritten(p *Pending, err error) {
	for i, s := range p.sides {
		switch {
		case s.after != nil && !s.after.written:
			s.rec.SideWritten(errNotLogged)
		case s.after != nil && s.after.err != nil:
			s.rec.SideWritten(s.after.err)
		default:
			s.rec.SideWritten(err)
		}
		p.sides[i] = side{}
	}
	p.sides = p.sides[:0]
}

// commitDone is Commit of a Pending already written (p.done): its error at once,
// without the write lock, which the next group's write may hold for a whole sync.
// That is the case of a request whose stored response rode in its entry's group:
// the Put's Commit wrote it, and the request's own Commit comes after. The last
// reference dropped here leaves p to the garbage collector (the free list is the
// write lock's).
func (l *Log) commitDone(p *Pending) error {
	err := p.err
	p.refs.Add(-1)
	return err
}

// AttachSide makes sync the log's side store's: it returns once the store holds
// every side record written so far (apply calls it before deleting a segment that
// holds some; nil detaches). It returns the side records Open found in the log
// (their payloads after SideTag, in log order), for the store to apply what it
// lacks; they are handed over once.
func (l *Log) AttachSide(sync func() error) [][]byte {
	l.walMu.Lock()
	defer l.walMu.Unlock()
	l.sideSync = sync
	r := l.replayedSides
	l.replayedSides = nil
	return r
}

// replaySide is Open's reader of a record: a side record is kept for AttachSide, the
// others go to the owner.
func (l *Log) replaySide(payload []byte) bool {
	if len(payload) > 0 && payload[0] == SideTag {
		l.replayedSides = append(l.replayedSides, slices.Clone(payload[1:]))
		return true
	}
	return l.o.Replay(payload)
}

// deletable is the first segment number apply may not delete, given that it
// switched the writers to segment n: n, unless segments before it hold side records
// the side store may not hold yet (then the first of those, while its sync fails or
// no store is attached).
func (l *Log) deletable(n int) int {
	l.walMu.Lock()
	kept, low, sync := l.sideKept, l.sideLow, l.sideSync
	l.walMu.Unlock()
	if !kept || low >= n {
		return n
	}
	if sync == nil || sync() != nil {
		return low
	}
	l.walMu.Lock()
	if l.sideHigh >= n {
		l.sideLow = n // written after the switch: the next apply's
	} else {
		l.sideKept = false
	}
	l.walMu.Unlock()
	return n
}
