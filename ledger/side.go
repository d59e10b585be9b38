package ledger

// Side records: another store's record written in a group's write, after the group's
// own record, so that one write(2) and one fsync make both durable (respstore keeps a
// stored response this way, beside the ledger entry of the request that made it: a
// stored request waits for one sync, not two).
//
// A side record is a record of the log (the same length and CRC framing) whose payload
// starts with SideMark; an Owner's payloads never start with it (tenancy's are JSON
// arrays, '['). It follows its group's record in the same write, so a torn write that
// keeps the side record keeps the group too (replay stops a segment at its first torn
// record). A group written with side records succeeds or fails as a whole: each
// Side's SideWritten says which, once, with the log's write lock held, in log order.
//
// The log keeps side records only until its SideOwner has them in its own database:
// the background apply asks SideOwner.ApplySides before it deletes a segment, and Open
// hands the side records a killed process left to ReplaySide (then ReplayedSides)
// before it deletes their segments.

// SideMark is the first byte of a side record's payload.
const SideMark byte = 0

// A Side is one side record waiting in a group (AppendWith).
type Side interface {
	// AppendSide appends the side record's payload (without SideMark) to dst. It is
	// called once, with the log's write lock held, as the group is written (in log
	// order).
	AppendSide(dst []byte) []byte
	// SideWritten is called once, with the log's write lock held, after the write of
	// its group: err nil when the group and its side records were written (and
	// fsynced with SyncFsync), else the write's error.
	SideWritten(err error)
}

// A SideOwner keeps the side records in its own database (Options.Side).
type SideOwner interface {
	// ReplaySide is called at Open with the payload (after SideMark) of each intact
	// side record left in the log, in log order.
	ReplaySide(payload []byte) error
	// ReplayedSides makes what ReplaySide was given durable in the owner's database;
	// Open calls it before it deletes the segments.
	ReplayedSides() error
	// ApplySides returns once every side record whose SideWritten has been called is
	// durable in the owner's database; the log deletes a segment only after it
	// returned nil.
	ApplySides() error
	// SideLog is called once, at Open, with the log, before any side is written: the
	// owner may AppendWith side records of its own (a group with no entry).
	SideLog(l *Log)
}

// AppendWith is Append that also adds side, when not nil, to the group: it is written
// after the group's record, in the same write. fn may be nil.
func (l *Log) AppendWith(fn func(g Group), side Side) (*Pending, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	if fn != nil {
		fn(l.cur.g)
	}
	if side != nil {
		l.cur.sides = append(l.cur.sides, side)
	}
	l.cur.refs.Add(1)
	return l.cur, nil
}

// appendSides appends p's side records after its group's record in rec.
func appendSides(rec []byte, p *Pending) []byte {
	for _, sd := range p.sides {
		start := len(rec)
		rec = BeginRecord(rec)
		rec = append(rec, SideMark)
		rec = sd.AppendSide(rec)
		EndRecord(rec, start)
	}
	return rec
}

// sidesWritten tells p's side records how their write ended.
func sidesWritten(p *Pending, err error) {
	for i, sd := range p.sides {
		sd.SideWritten(err)
		p.sides[i] = nil
	}
	p.sides = p.sides[:0]
}

// isSide reports whether a record's payload is a side record's.
func isSide(payload []byte) bool { return len(payload) > 0 && payload[0] == SideMark }
