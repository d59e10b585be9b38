package tenancy

import (
	"errors"
	"log/slog"
	"time"

	"github.com/lmlite/lmlite/ledger"
	"github.com/lmlite/lmlite/usage"
)

// Refusals before admission are telemetry, not money, and a hostile tenant can send
// them at any rate: one ledger entry (and one fsync wait) per refused request would
// let a flood of 429s grow the ledger without bound. So RecordRefusal coalesces them:
// it counts a refusal in memory per (tenant, key, model, adapter, tier, reason,
// status, minute) and returns at once; the counts are written as one entry per key
// (Entry.Count) appended to the next group the ledger commits (Record's), or by a
// flush at least every refusalFlush, and at Close. The followed rollups
// (FollowRollups) count a refusal when it is recorded, so the usage API sees it at
// once; the database's rollups and the Redis usage publisher count it from its entry.
// A crash loses at most the counts of the refusals since the last flush.

// refusalFlush is the longest a refusal's count waits in memory for its entry.
const refusalFlush = time.Second

// errStoreClosed is RecordRefusal's error after Close.
var errStoreClosed = errors.New("tenancy: store closed")

// refusalKey is what coalesced refusals share.
type refusalKey struct {
	tenant, keyID, model, adapter, tier, reason string
	status                                      int
	minute                                      int64 // the rollups' minute: a count never straddles buckets
}

// aggMark marks an event of a group that is a coalesced refusal, counted in the
// followed rollups when it was recorded: Written counts it only in the rollups
// registered after it was drained (s.rollups[at:]).
type aggMark struct {
	i, at int // index in group.evs; len(s.rollups) at its drain
}

// RecordRefusal counts e, the entry of a request refused before its admission
// (NotAdmitted), in the followed rollups at once and in the ledger with the next
// commit (or flush): it never waits for a write.
func (s *Store) RecordRefusal(e Entry) error {
	e.Cost, e.NotAdmitted = 0, true
	if e.Count < 1 {
		e.Count = 1
	}
	k := refusalKey{e.Tenant, e.KeyID, e.Model, e.Adapter, e.Tier, e.Refused, e.Status, e.Time.Unix() / 60}
	ev := e.event()
	s.tailMu.Lock()
	defer s.tailMu.Unlock()
	s.refMu.Lock()
	defer s.refMu.Unlock()
	if s.refClosed {
		return errStoreClosed
	}
	for _, m := range s.rollups {
		m.Add(ev)
	}
	if p := s.refPending[k]; p != nil {
		p.Count += e.Count
	} else {
		if s.refPending == nil {
			s.refPending = map[refusalKey]*Entry{}
		}
		// Only what the rollups count is kept of the later ones: the entry holds the
		// first one's request id, client request id and time.
		e.Latency, e.TTFT, e.User, e.SafetyIdentifier = 0, 0, "", ""
		s.refPending[k] = &e
	}
	s.refOn.Store(true)
	if s.refStop == nil { // refClosed is false: Close has not taken it
		s.refStop, s.refDone = make(chan struct{}), make(chan struct{})
		go s.flushEvery(s.refStop, s.refDone)
	}
	return nil
}

// drainRefusals appends the coalesced refusals to g, the log's current group (the
// log's append lock is held), as entries with their seqs.
func (s *Store) drainRefusals(g *group) {
	if !s.refOn.Load() {
		return
	}
	s.refMu.Lock()
	defer s.refMu.Unlock()
	at := s.refRollups
	for k, e := range s.refPending {
		s.seq++
		e.Seq = s.seq
		if g.first == 0 {
			g.first = e.Seq
		} else {
			g.buf = append(g.buf, ',')
		}
		g.buf = appendEntry(g.buf, e)
		g.evs = append(g.evs, e.event())
		g.agg = append(g.agg, aggMark{len(g.evs) - 1, at})
		g.last = e.Seq
		delete(s.refPending, k)
	}
	s.refOn.Store(false)
}

// flushRefusals writes the coalesced refusals now, in a group of their own unless
// another writer's takes them first.
func (s *Store) flushRefusals() error {
	if !s.refOn.Load() {
		return nil
	}
	p, err := s.log.Append(func(lg ledger.Group) { s.drainRefusals(lg.(*group)) })
	if err != nil {
		return err
	}
	return s.log.Commit(p)
}

// flushEvery flushes the coalesced refusals every refusalFlush until stop closes.
func (s *Store) flushEvery(stop, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(refusalFlush)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if err := s.flushRefusals(); err != nil {
				slog.Default().Error("tenancy: writing refusals to the ledger failed", "error", err)
			}
		}
	}
}

// closeRefusals stops the flusher and writes what is left (Close, before the log's).
func (s *Store) closeRefusals() error {
	s.refMu.Lock()
	s.refClosed = true
	stop, done := s.refStop, s.refDone
	s.refStop, s.refDone = nil, nil // a second Close stops nothing
	s.refMu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
	return s.flushRefusals()
}

// followPendingLocked counts the refusals not yet drained in m, registered as a
// followed rollup at index n of s.rollups; s.tailMu is held. Those drained before
// it are counted by Written (their mark's at ≤ n).
func (s *Store) followPendingLocked(m *usage.Memory) {
	s.refMu.Lock()
	defer s.refMu.Unlock()
	s.refRollups = len(s.rollups)
	for _, e := range s.refPending {
		m.Add(e.event())
	}
}
