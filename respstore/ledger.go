package respstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/lmlite/lmlite/ledger"
)

// Ledger mode (OpenBoltLedger): a Put is made durable as a side record of the usage
// ledger's write (ledger.Side), not by a journal record of its own. The gateway
// carries a stored response's record in the write of its request's ledger entry
// (PutCarried), so the request waits for one sync, not two; a Put that nothing
// carries is a side record alone in a ledger group.
//
// A Put goes through these states; the decisions are serialised by s.mu, each made
// in the Put's own goroutine (decideHere: no hand-off to the owner and back) or, for
// a Put of a held key, one whose tenant has an expired response to sweep first, or
// one that comes while the owner runs a write that needs no Put held (exclusive: a
// Delete, a sweep, Close), by the owner goroutine (ownerLoop); every change of state
// is made under s.mu:
//
//	decided (held)  the owner checked the limits and took the Put: it counts in its
//	                tenant's worst usage (pendingUsage.hold), it is in s.holding, not
//	                in the overlay (readers do not see it)
//	written         the ledger wrote its group (SideWritten, under the ledger's write
//	                lock): it is queued for the applier, in log order
//	published       held → overlay: its usage moves from hold to u (its exact
//	                change), it is in s.recent (readers see it); done by its Put once
//	                the ledger write returned, or by the applier if it comes first
//	applied         bbolt holds it (the applier): out of the overlay
//	failed          its group's write failed (or was never made): out of hold; no
//	                stored response, as no ledger entry
//
// The owner decides a Put against its tenant's worst usage, u + hold: u is the usage
// with every published Put (exact), hold the growth of every held Put as if each
// were written (max(change, 0), so that a held Put that shrinks a response and then
// fails cannot let another Put through). Every change made by another goroutine
// (publish, fail, apply) lowers u + hold or leaves it, and only a decision raises it,
// under s.mu, in the same critical section as its check: so the limits are never
// passed, whatever the interleaving. A tenant's pendingUsage lives while it has a
// Put held or not applied (n); without one, bbolt holds everything of the tenant's,
// and the owner reads its usage there (under s.mu, so that an applier cannot commit
// in between: it takes its Puts out of the overlay under s.mu too).
//
// A Put of a key that has a Put held waits (the owner parks it) until that one is
// published or failed: each held Put's change is then counted against what is
// written, never against another held Put. Delete, sweeps and Close wait until no
// Put is held and bbolt holds every written one (drain).
//
// The ledger deletes a segment only once bbolt holds its side records (ApplySides),
// and hands those a killed process left to ReplaySide at its Open (the seq of the
// last one bbolt holds is kept in bbolt: older ones are not applied again, so a
// response deleted after its Put does not come back).

// keySide (bucketJournal) holds the seq of the last side record bbolt holds.
var keySide = []byte("side")

// errNotWritten is the error of a Put whose side record no ledger write carried.
var errNotWritten = errors.New("respstore: the ledger did not write the response")

// OpenBoltLedger opens the store in ledger mode (ledger.go): give it as the ledger's
// Options.Side (tenancy.Options.Side) before its Open, which hands it the side
// records a killed process left and then the log; until then a Put fails.
// Options.ProcessSync is the ledger's to choose.
func OpenBoltLedger(path string, o Options) (*Bolt, error) {
	return openBoltLedger(path, o, ledgerCommitEvery, ledgerCommitEvery)
}

// ledgerCommitEvery is the applier's own rule in ledger mode (commitEvery and
// commitIdle both): the ledger's writes keep the Puts durable, and its applies
// (every 200 ms, tenancy's ApplyEvery) ask for a commit of what it wrote
// (ApplySides) before it deletes a segment; that is when bbolt commits, this only
// when they do not come. A commit's fixed cost (its two fdatasyncs, the meta and
// freelist pages) is shared by the Puts of 200 ms, not of the 25 ms (commitIdle)
// or 100 ms (commitEvery) the journal's mode waits.
const ledgerCommitEvery = time.Second

func openBoltLedger(path string, o Options, every, idle time.Duration) (*Bolt, error) {
	return openBolt(path, o, every, idle, true)
}

// PutCarried is PutWithin whose record carry writes in a ledger write: once the
// limits are checked, carry is called with the record as a ledger.Side, to add it to
// the ledger group it commits (ledger.Log.AppendWith; the gateway: the request's
// settlement), and must return after that commit. When the group is written, the
// response is stored; when its write fails, it is not (an error). When carry did not
// add it (no ledger entry to write), it is written alone. A Put refused by its limits
// is a LimitError, and carry is not called. Outside ledger mode carry is not called
// and PutCarried is PutWithin.
func (s *Bolt) PutCarried(ctx context.Context, rec Record, lim Limits, carry func(ledger.Side)) error {
	if !s.led {
		return s.PutWithin(ctx, rec, lim)
	}
	rec, err := s.o.prepare(rec)
	if err != nil {
		return err
	}
	op := &putOp{rec: rec, lim: lim, val: appendRecord(nil, &rec), size: rec.Size(), st: s}
	if !s.decideHere(op) { // the owner decides it: it parks it, sweeps first, or the store is exclusive
		op.done = make(chan struct{})
		select {
		case s.puts <- op:
		case <-s.quit:
			return ErrClosed
		case <-ctx.Done():
			return ctx.Err()
		}
		<-op.done
	}
	if op.err != nil {
		return op.err // refused: nothing held
	}
	if carry != nil {
		carry(op)
	}
	if !op.written { // nothing carried it: a group of its own
		if l := s.log.Load(); l == nil {
			op.written, op.werr = true, errNotWritten
		} else if p, err := l.AppendWith(nil, op); err != nil {
			op.werr = fmt.Errorf("respstore: %w", err)
		} else {
			l.Commit(p) // its error is op.werr (SideWritten)
		}
	}
	return s.resolve(op)
}

// resolve ends a held Put once its ledger write returned: published (readers see
// it) or failed.
func (s *Bolt) resolve(op *putOp) error {
	s.mu.Lock()
	if op.written && op.werr == nil {
		if !op.published { // else the applier published it, and bbolt holds it
			s.publishLocked(op)
			s.recent[op.key] = op
		}
	} else {
		s.failLocked(op)
	}
	s.mu.Unlock()
	switch {
	case op.written && op.werr == nil:
		return nil
	case op.werr == nil: // cannot be: a Commit returns after SideWritten
		return errNotWritten
	case errors.Is(op.werr, errNotWritten):
		return op.werr
	}
	return fmt.Errorf("respstore: the ledger write: %w", op.werr)
}

// AppendSide is the Put's side record: uvarint seq | str tenant | str id | str record.
// The ledger calls it under its write lock, in log order: the seqs grow in log order.
func (op *putOp) AppendSide(dst []byte) []byte {
	s := op.st
	s.sideSeq++
	op.seq = s.sideSeq
	dst = binary.AppendUvarint(dst, op.seq)
	return appendJournalPut(dst, op)
}

// SideWritten takes the outcome of the Put's ledger write; a written Put is queued
// for the applier (in log order). Under the ledger's write lock: it takes only qmu.
// It wakes the applier only when the queue was empty: the applier then sets its
// timer, and reads the queue again whenever it wakes (a wake a Put, as before, was a
// goroutine switch a stored request for nothing).
func (op *putOp) SideWritten(err error) {
	op.written, op.werr = true, err
	if err != nil {
		return
	}
	s := op.st
	now := time.Now()
	s.qmu.Lock()
	first := len(s.queue) == 0
	if first {
		s.queued = now
	}
	s.queue = append(s.queue, op)
	s.lastQ = now
	s.qmu.Unlock()
	s.written.Store(op.seq)
	if !first {
		return
	}
	s.kicks.Add(1)
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// growth is what a change of usage d can add, at most: its positive parts.
func growth(d Usage) Usage { return Usage{Count: max(d.Count, 0), Bytes: max(d.Bytes, 0)} }

func (u Usage) plus(d Usage) Usage  { return Usage{Count: u.Count + d.Count, Bytes: u.Bytes + d.Bytes} }
func (u Usage) minus(d Usage) Usage { return Usage{Count: u.Count - d.Count, Bytes: u.Bytes - d.Bytes} }

// publishLocked moves a written Put from held to the overlay's usage (the exact
// change). s.mu is held.
func (s *Bolt) publishLocked(op *putOp) {
	op.published = true
	p := s.usage[op.rec.Tenant]
	p.u = p.u.plus(op.delta)
	p.hold = p.hold.minus(growth(op.delta))
	s.unholdLocked(op)
}

// failLocked forgets a held Put whose write failed. s.mu is held.
func (s *Bolt) failLocked(op *putOp) {
	op.published = true // resolved: nothing more to do for it
	p := s.usage[op.rec.Tenant]
	p.hold = p.hold.minus(growth(op.delta))
	if p.n--; p.n <= 0 {
		delete(s.usage, op.rec.Tenant)
	}
	s.unholdLocked(op)
}

func (s *Bolt) unholdLocked(op *putOp) {
	delete(s.holding, op.key)
	s.held--
	if s.wakeWanted { // the owner has a Put parked, or drains
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// decideLedger (the owner) checks op's limits against its tenant's worst usage and
// holds it (op.err nil), refuses it (op.err), or parks it (true: a Put of its key is
// held).
func (s *Bolt) decideLedger(op *putOp) (parked bool) {
	return s.decide(op, false) == putParked
}

// decideHere is decideLedger in the Put's own goroutine (PutCarried), with no hand-off
// to the owner and back: true when it decided op (held or refused); false when the
// owner must (a Put of its key is held, the tenant has an expired response to sweep
// first, or the owner runs a write that needs no Put decided meanwhile: exclusive).
// Decisions are serialised by s.mu either way, the owner's and the Puts' own.
func (s *Bolt) decideHere(op *putOp) bool {
	return s.decide(op, true) == putDecided
}

// The outcomes of decide.
const (
	putDecided = iota // held (op.err nil) or refused (op.err)
	putParked         // a Put of its key is held: the owner parks it
	putToOwner        // here: the owner must decide it
)

// decide is decideLedger (here false, the owner) and decideHere (here true). One
// critical section under s.mu, bbolt's reads included: no publish, failure or apply
// comes between the check and the hold, and no exclusive write (exclusive) begins
// between them either: it waits for the held Puts.
func (s *Bolt) decide(op *putOp, here bool) int {
	rec := &op.rec
	op.key = string(tkey(rec.Tenant, rec.ID))
	now := rec.Created.UnixMilli()
	for swept := false; ; swept = true {
		s.mu.Lock()
		if here && s.excl {
			s.mu.Unlock()
			return putToOwner
		}
		if s.holding[op.key] != nil {
			if here {
				s.mu.Unlock()
				return putToOwner
			}
			s.wakeWanted = true
			s.mu.Unlock()
			return putParked
		}
		p := s.usage[rec.Tenant]
		var st putState
		haveOld := false
		if old := s.recent[op.key]; old != nil {
			st.replace, st.oldSize, haveOld = true, old.size, true
		}
		var bu Usage
		err := s.db.View(func(tx *bolt.Tx) error {
			if p == nil {
				bu = getUsage(tx, rec.Tenant)
			}
			return boltState(tx, rec, op.key, now, haveOld, &st)
		})
		if err != nil {
			s.mu.Unlock()
			op.err = wrapBolt(err)
			return putDecided
		}
		if p != nil && p.minExp <= now {
			st.expired = true
		}
		if st.expired && !swept {
			s.mu.Unlock()
			if here {
				return putToOwner
			}
			// Sweep the tenant's expired responses first, in bbolt, once bbolt holds
			// every Put (as a Put always did; rare).
			op.err = s.exclusive(func() error {
				return wrapBolt(s.db.Update(func(tx *bolt.Tx) error {
					_, err := sweepTenantTx(tx, rec.Tenant, now, sweepPerTx)
					return err
				}))
			})
			if op.err != nil {
				return putDecided
			}
			continue
		}
		worst := bu
		if p != nil {
			worst = p.u.plus(p.hold)
		}
		delta := Usage{Count: 1, Bytes: op.size}
		if st.replace {
			delta = Usage{Bytes: op.size - st.oldSize}
		}
		if err := checkLimits(op.lim, worst, worst.plus(delta)); err != nil {
			s.mu.Unlock()
			op.err = err
			return putDecided
		}
		if p == nil {
			p = &pendingUsage{u: bu, minExp: math.MaxInt64}
			s.usage[rec.Tenant] = p
		}
		p.n++
		p.hold = p.hold.plus(growth(delta))
		p.minExp = min(p.minExp, rec.Expires.UnixMilli())
		op.delta = delta
		s.holding[op.key] = op
		s.held++
		s.mu.Unlock()
		if !here {
			s.ownerDecided.Add(1)
		}
		return putDecided
	}
}

// exclusive (the owner) runs fn once no Put is held and bbolt holds every written
// one (drain), with no Put decided meanwhile: the Puts that come wait for the owner.
func (s *Bolt) exclusive(fn func() error) error {
	s.mu.Lock()
	s.excl = true
	s.mu.Unlock()
	err := s.drain()
	if err == nil {
		err = fn()
	}
	s.mu.Lock()
	s.excl = s.closing
	s.mu.Unlock()
	return err
}

// boltState reads what bbolt says of op's state (putState): whether one of the
// tenant's responses has expired at now, and the response op replaces (unless the
// overlay had it: haveOld).
func boltState(tx *bolt.Tx, rec *Record, key string, now int64, haveOld bool, st *putState) error {
	if !st.expired { // what the overlay said stands: no need to seek
		prefix := append([]byte(rec.Tenant), '/')
		k, _ := tx.Bucket(bucketExpiry).Cursor().Seek(prefix)
		if rest, ok := bytes.CutPrefix(k, prefix); ok && len(rest) >= 8 && int64(binary.BigEndian.Uint64(rest)) <= now {
			st.expired = true
		}
	}
	if haveOld {
		return nil
	}
	v := tx.Bucket(bucketResponses).Get([]byte(key))
	if v == nil {
		return nil
	}
	view, err := viewRecord(v)
	if err != nil {
		return fmt.Errorf("respstore: %s/%s: %w", rec.Tenant, rec.ID, err)
	}
	old, err := view.record(rec.Tenant, rec.ID)
	if err != nil {
		return err
	}
	st.replace, st.oldSize = true, old.Size()
	return nil
}

// drain (the owner) waits until no Put is held and bbolt holds every written one.
func (s *Bolt) drain() error {
	s.waitUnheld()
	return s.flushTo(0)
}

// waitUnheld (the owner) waits until no Put is held.
func (s *Bolt) waitUnheld() {
	for {
		s.mu.Lock()
		held := s.held
		s.wakeWanted = held > 0 || len(s.parked) > 0
		s.mu.Unlock()
		if held == 0 {
			return
		}
		<-s.wake
	}
}

// flushTo (any goroutine) waits until bbolt holds every Put queued, or (upTo not 0)
// those of seq upTo or less.
func (s *Bolt) flushTo(upTo uint64) error {
	c := make(chan error, 1)
	select {
	case s.flushes <- flushReq{upTo: upTo, c: c}:
	case <-s.applDone:
		return ErrClosed
	}
	return <-c
}

// ownerLoop is commitLoop in ledger mode: it decides the Puts one by one (answering
// each at once: the ledger write is its Put's), runs the other writes once drained,
// and at Close waits for the held Puts before the applier's last commit.
func (s *Bolt) ownerLoop() {
	defer close(s.stopped)
	unpark := func() {
		s.mu.Lock()
		s.wakeWanted = false // set again by a Put parked again
		s.mu.Unlock()
		parked := s.parked
		s.parked = nil
		for _, op := range parked {
			if s.decideLedger(op) {
				s.parked = append(s.parked, op)
				continue
			}
			close(op.done)
		}
	}
	for {
		select {
		case op := <-s.puts:
			if s.decideLedger(op) {
				s.parked = append(s.parked, op)
				continue
			}
			close(op.done)
		case e := <-s.execs:
			e.err = s.exclusive(e.fn)
			close(e.done)
		case <-s.wake:
		case <-s.quit:
			s.mu.Lock()
			s.excl, s.closing = true, true // no Put decided here from now: they find quit
			s.mu.Unlock()
			for _, op := range s.parked {
				op.err = ErrClosed
				close(op.done)
			}
			s.parked = nil
			s.waitUnheld() // the held Puts end by their ledger writes
			close(s.stopAppl)
			<-s.applDone
			return
		}
		if len(s.parked) > 0 { // a drain (a sweep, an exec) may have taken the wake
			unpark()
		}
	}
}

// ReplaySide (ledger.SideOwner) keeps a side record left in the ledger that bbolt
// does not hold (by seq).
func (s *Bolt) ReplaySide(payload []byte) error {
	r := reader{b: payload}
	seq := r.uvarint()
	if r.err != nil {
		return fmt.Errorf("%w: %w", errJournalCorrupt, r.err)
	}
	ops, err := journalPuts(r.b)
	if err != nil {
		return err
	}
	if seq <= s.sideSeq {
		return nil
	}
	for _, op := range ops {
		op.seq = seq
		s.sideFound = append(s.sideFound, op)
	}
	s.sideSeq = seq
	return nil
}

// ReplayedSides (ledger.SideOwner) applies what ReplaySide kept, in one fsynced
// transaction with its last seq.
func (s *Bolt) ReplayedSides() error {
	found := s.sideFound
	s.sideFound = nil
	if len(found) == 0 {
		return nil
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		for _, op := range found {
			if err := applyTx(tx, op); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketJournal).Put(keySide, binary.BigEndian.AppendUint64(nil, found[len(found)-1].seq))
	})
	if err != nil {
		return wrapBolt(err)
	}
	s.mu.Lock()
	s.replayed += len(found)
	s.mu.Unlock()
	return nil
}

// ApplySides (ledger.SideOwner) returns once bbolt holds every Put written so far
// (not those written meanwhile: under load the queue is never empty).
func (s *Bolt) ApplySides() error {
	upTo := s.written.Load()
	if upTo == 0 || s.applied.Load() >= upTo {
		return nil
	}
	return s.flushTo(upTo)
}

// SideLog (ledger.SideOwner) takes the ledger that writes lone Puts.
func (s *Bolt) SideLog(l *ledger.Log) { s.log.Store(l) }

// Carries reports whether the store is in ledger mode: PutCarried calls its carry.
func (s *Bolt) Carries() bool { return s.led }
