package respstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/lmlite/lmlite/ledger"
)

// A Bolt attached to the usage ledger (UseLedger) logs its Puts in the ledger's
// group commit instead of its own journal: each Put is a side record of the ledger
// (ledger/side.go), and a Put given its request's ledger group (PutLogged) is
// written with the request's usage entry, in one write and one sync. See doc.go,
// "One sync for a stored request".
//
// A side record's payload is
//
//	uint64 seq (big-endian) | the Put as a journal record's payload holds it
//
// with seq the store's journal seq (one per Put, in log order), so that a replay
// applies only what bbolt does not hold (bucketJournal's "applied"), as for the
// journal.

// ledgerState is a Bolt's part when it is attached to a ledger.
type ledgerState struct {
	log *ledger.Log
	// decide serialises the Puts' decisions (limits) and their place in the log:
	// a Put decides and appends its side record under it.
	decide sync.Mutex
	// seq is the last side record's seq; under the ledger's write lock (AppendSide).
	seq uint64
	// held: each tenant's Puts decided and not yet written (under Bolt.mu).
	held map[string]*Usage
}

// UseLedger attaches the store to the usage ledger l: the side records of it that
// a killed process left are applied to bbolt (those it lacks), and from then on
// every Put is logged in l (its journal is no longer written). Call it once, after
// OpenBolt, before any Put. The ledger keeps its segments holding Puts until bbolt
// holds them (the store's sync).
func (s *Bolt) UseLedger(l *ledger.Log) error {
	sides := l.AttachSide(s.syncSides)
	return s.exec(context.Background(), func() error {
		err := s.db.Update(func(tx *bolt.Tx) error {
			meta := tx.Bucket(bucketJournal)
			applied := s.seq
			for _, p := range sides {
				if len(p) < 8 {
					return errJournalCorrupt
				}
				seq := binary.BigEndian.Uint64(p)
				if seq <= applied {
					continue
				}
				ops, err := journalPuts(p[8:])
				if err != nil {
					return err
				}
				for _, op := range ops {
					if err := applyTx(tx, op); err != nil {
						return err
					}
					s.replayed++
				}
				s.seq = max(s.seq, seq)
			}
			return meta.Put(keyApplied, binary.BigEndian.AppendUint64(nil, s.seq))
		})
		if err != nil {
			return wrapBolt(err)
		}
		s.applied.Store(s.seq)
		s.queuedSeq.Store(s.seq)
		s.led.Store(&ledgerState{log: l, seq: s.seq, held: map[string]*Usage{}})
		return nil
	})
}

// UsesLedger reports that the store's Puts are logged in the usage ledger
// (UseLedger): a Put given its request's ledger group (PutLogged) costs no sync of
// its own.
func (s *Bolt) UsesLedger() bool { return s.led.Load() != nil }

// syncSides is the ledger's sync (ledger.Log.AttachSide): it returns once bbolt
// holds every Put the ledger has written.
func (s *Bolt) syncSides() error {
	if s.applied.Load() == s.queuedSeq.Load() {
		return nil
	}
	c := make(chan error, 1)
	select {
	case s.flushes <- c:
		return <-c
	case <-s.applDone:
		if s.applied.Load() == s.queuedSeq.Load() {
			return nil
		}
		return ErrClosed
	}
}

// putLogged is a Put of a store attached to a ledger: it decides the Put (its
// tenant's usage and limits, as the writer does), appends it to the ledger group p
// (its request's usage entry's; nil: the current group) and commits the group. The
// Put is acknowledged when its record is written (SideWritten), with the entry's.
func (s *Bolt) putLogged(ctx context.Context, op *putOp, p *ledger.Pending) error {
	L := s.led.Load()
	rec := &op.rec
	op.key = string(tkey(rec.Tenant, rec.ID))
	op.s = s
	now := rec.Created.UnixMilli()
	L.decide.Lock()
	st, err := s.loggedState(op, now)
	if err == nil && st.expired {
		// Sweep the tenant's expired responses first, in bbolt, as the writer does.
		L.decide.Unlock()
		if _, err = s.SweepTenant(ctx, rec.Tenant, rec.Created); err != nil {
			return err
		}
		L.decide.Lock()
		st, err = s.loggedState(op, now)
	}
	if err != nil {
		L.decide.Unlock()
		return err
	}
	next := st.u
	next.Count++
	next.Bytes += op.size
	if st.replace {
		next.Count--
		next.Bytes -= st.oldSize
	}
	if err := checkLimits(op.lim, st.u, next); err != nil {
		L.decide.Unlock()
		return err
	}
	op.delta = Usage{Count: next.Count - st.u.Count, Bytes: next.Bytes - st.u.Bytes}
	s.mu.Lock()
	h := L.held[rec.Tenant]
	if h == nil {
		h = &Usage{}
		L.held[rec.Tenant] = h
	}
	h.Count += op.delta.Count
	h.Bytes += op.delta.Bytes
	s.mu.Unlock()
	q, err := L.log.AppendSide(p, op)
	L.decide.Unlock()
	if err != nil {
		s.unhold(op)
		return fmt.Errorf("respstore: the ledger: %w", err)
	}
	if err := L.log.Commit(q); err != nil && op.err == nil {
		op.err = fmt.Errorf("respstore: the ledger: %w", err)
	}
	return op.err
}

// loggedState is stateOf for putLogged: what bbolt and the overlay hold, plus the
// Puts decided and not yet written.
func (s *Bolt) loggedState(op *putOp, now int64) (putState, error) {
	st, err := s.stateOf(&batch{}, op, now)
	if err != nil {
		return st, err
	}
	s.mu.RLock()
	if h := s.led.Load().held[op.rec.Tenant]; h != nil {
		st.u.Count += h.Count
		st.u.Bytes += h.Bytes
	}
	s.mu.RUnlock()
	return st, nil
}

// unhold takes a Put decided and not written off its tenant's held usage (s.mu
// not held).
func (s *Bolt) unhold(op *putOp) {
	s.mu.Lock()
	s.unholdLocked(op)
	s.mu.Unlock()
}

func (s *Bolt) unholdLocked(op *putOp) {
	held := s.led.Load().held
	h := held[op.rec.Tenant]
	if h == nil {
		return
	}
	h.Count -= op.delta.Count
	h.Bytes -= op.delta.Bytes
	if h.Count == 0 && h.Bytes == 0 {
		delete(held, op.rec.Tenant)
	}
}

// AppendSide is the Put's side record (ledger.SideRecord): its seq, the next one,
// then the Put. The ledger calls it with its write lock held, in log order.
func (op *putOp) AppendSide(dst []byte) []byte {
	L := op.s.led.Load()
	L.seq++
	op.seq = L.seq
	dst = binary.BigEndian.AppendUint64(dst, op.seq)
	return appendJournalPut(dst, op)
}

// SideWritten acknowledges the Put (its record is written: into the overlay and
// the applier's queue, as the writer's writeBatch does) or fails it. The ledger calls
// it with its write lock held, in log order: the queue stays in seq order.
func (op *putOp) SideWritten(err error) {
	s := op.s
	if err != nil {
		op.err = fmt.Errorf("respstore: the ledger: %w", err)
		s.unhold(op)
		return
	}
	var base Usage // the tenant's usage in bbolt, if the overlay has none
	s.mu.RLock()
	_, have := s.usage[op.rec.Tenant]
	s.mu.RUnlock()
	if !have {
		s.db.View(func(tx *bolt.Tx) error { base = getUsage(tx, op.rec.Tenant); return nil })
	}
	s.mu.Lock()
	s.unholdLocked(op)
	s.recent[op.key] = op
	p := s.usage[op.rec.Tenant]
	if p == nil {
		p = &pendingUsage{u: base, minExp: math.MaxInt64}
		s.usage[op.rec.Tenant] = p
	}
	p.u.Count += op.delta.Count
	p.u.Bytes += op.delta.Bytes
	p.n++
	p.minExp = min(p.minExp, op.rec.Expires.UnixMilli())
	s.mu.Unlock()
	s.qmu.Lock()
	if len(s.queue) == 0 {
		s.queued = timeNow()
	}
	s.queue = append(s.queue, op)
	s.lastQ = timeNow()
	s.qmu.Unlock()
	s.queuedSeq.Store(op.seq)
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

var timeNow = time.Now
