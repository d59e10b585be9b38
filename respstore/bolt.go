package respstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

var (
	bucketResponses = []byte("responses") // tenant/id → the record (appendRecord)
	bucketExpiry    = []byte("expiry")    // tenant/expires (8 bytes, big-endian Unix ms)/id → nothing: each tenant's responses by expiry
	bucketUsage     = []byte("usage")     // tenant → uvarint count | uvarint bytes
	bucketJournal   = []byte("journal")   // "applied" → the seq (8 bytes, big-endian) of the last journal record bbolt holds
	keyApplied      = []byte("applied")
)

// sweepPerTx bounds the responses one transaction of Sweep (or of a Put) removes.
const sweepPerTx = 1000

// commitEvery bounds how long acknowledged Puts stay in the journal only (in the
// committer's open bbolt transaction): the committer commits bbolt when the
// transaction is this old, when it has nothing to do for commitIdle, when the
// journal's pass is full, and before any other write (Delete, a sweep) and Close.
const (
	commitEvery = 100 * time.Millisecond
	commitIdle  = 5 * time.Millisecond
)

// Bolt is the Store of one process: an embedded bbolt database (a file in the data
// directory, e.g. data_dir/responses.db) and its journal (responses.db-journal).
// A Put returns once it is durable: its group's journal record is fdatasynced (one
// fdatasync per group of concurrent Puts; commitLoop). bbolt commits the Puts
// later, fsynced as always, and at open the journal's records bbolt lacks (a crash
// came first) are applied again. Until bbolt commits them, readers find the
// acknowledged Puts in an overlay (recent, usage).
type Bolt struct {
	db      *bolt.DB
	o       Options
	j       *journal
	puts    chan *putOp   // to commitLoop; unbuffered, so no Put is left behind at Close
	execs   chan *execOp  // other writes, run by commitLoop after a bbolt commit
	quit    chan struct{} // closed by Close
	stopped chan struct{} // closed when commitLoop returned
	once    sync.Once
	commits atomic.Int64  // group commits made: journal records, or bbolt commits of a group (tests read it)
	every   time.Duration // commitEvery
	idle    time.Duration // commitIdle

	// The committer's state (commitLoop's goroutine only).
	tx      *bolt.Tx  // the open write transaction: the acknowledged Puts bbolt has not committed, or nil
	txStart time.Time // when tx began
	pending []*putOp  // the Puts in tx, acknowledged (journaled), in order
	seq     uint64    // the last journal record's seq
	broken  error     // a journal write failed: every Put fails with it

	// The overlay: what tx holds, for readers (under mu; commitLoop changes it).
	mu       sync.RWMutex
	recent   map[string][]byte // tkey → the record of a Put in tx
	usage    map[string]Usage  // tenant → its usage in tx, for tenants with Puts in tx
	replayed int               // Puts applied again from the journal at open (tests read it)

	crashAtClose bool // tests: Close leaves bbolt without the journal's Puts, as a crash would
}

// ErrClosed is the error of a Put on a closed Bolt.
var ErrClosed = errors.New("respstore: closed")

// OpenBolt opens (creating) the store in the file path and its journal (path +
// "-journal"), applying the journal's records that bbolt lacks.
func OpenBolt(path string, o Options) (*Bolt, error) {
	return openBolt(path, o, commitEvery, commitIdle)
}

// openBolt is OpenBolt committing bbolt after every and idle (tests: only when they
// make it, with an hour).
func openBolt(path string, o Options, every, idle time.Duration) (*Bolt, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("respstore: %w", err)
	}
	s := &Bolt{db: db, o: o.withDefaults(), puts: make(chan *putOp), execs: make(chan *execOp),
		quit: make(chan struct{}), stopped: make(chan struct{}),
		recent: map[string][]byte{}, usage: map[string]Usage{}, every: every, idle: idle}
	if err := s.replay(path + "-journal"); err != nil {
		db.Close()
		return nil, fmt.Errorf("respstore: %w", err)
	}
	go s.commitLoop()
	return s, nil
}

// replay opens the journal, creates the buckets, applies (in one fsynced
// transaction) the Puts of the journal's records newer than the last one bbolt
// holds, and empties the journal. A bbolt file without the journal's bucket (new,
// or made again beside an old journal) replays nothing: the journal is emptied
// first.
func (s *Bolt) replay(path string) error {
	j, data, err := openJournal(path)
	if err != nil {
		return err
	}
	var fresh bool
	err = s.db.View(func(tx *bolt.Tx) error { fresh = tx.Bucket(bucketJournal) == nil; return nil })
	if err == nil && fresh {
		data, err = nil, j.reset()
	}
	if err != nil {
		j.close()
		return err
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketResponses, bucketExpiry, bucketUsage, bucketJournal} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketJournal)
		var applied uint64
		if v := meta.Get(keyApplied); len(v) == 8 {
			applied = binary.BigEndian.Uint64(v)
		}
		last, err := journalRecords(data, func(seq uint64, payload []byte) error {
			if seq <= applied {
				return nil
			}
			ops, err := journalPuts(payload)
			if err != nil {
				return err
			}
			for _, op := range ops {
				if err := putTx(tx, op); err != nil {
					return err
				}
				s.replayed++
			}
			return nil
		})
		if err != nil {
			return err
		}
		s.seq = max(applied, last)
		return meta.Put(keyApplied, binary.BigEndian.AppendUint64(nil, s.seq))
	})
	if err == nil && !fresh {
		err = j.reset()
	}
	if err != nil {
		j.close()
		return err
	}
	s.j = j
	return nil
}

// Close closes the database, after the group commit under way (a Put after it, or
// waiting to be taken, is ErrClosed) and a bbolt commit of the Puts in the journal.
func (s *Bolt) Close() error {
	s.once.Do(func() { close(s.quit) })
	<-s.stopped
	err := s.db.Close()
	if jerr := s.j.close(); err == nil {
		err = jerr
	}
	return err
}

// tkey is the key of a tenant's response (tenant ids have no '/').
func tkey(tenant, id string) []byte {
	k := make([]byte, 0, len(tenant)+1+len(id))
	k = append(k, tenant...)
	k = append(k, '/')
	return append(k, id...)
}

func expiryKey(tenant string, exp int64, id string) []byte {
	k := make([]byte, 0, len(tenant)+9+len(id))
	k = append(k, tenant...)
	k = append(k, '/')
	k = binary.BigEndian.AppendUint64(k, uint64(exp))
	return append(k, id...)
}

func getUsage(tx *bolt.Tx, tenant string) Usage {
	r := reader{b: tx.Bucket(bucketUsage).Get([]byte(tenant))}
	if len(r.b) == 0 {
		return Usage{}
	}
	u := Usage{Count: int64(r.uvarint()), Bytes: int64(r.uvarint())}
	if r.err != nil {
		return Usage{}
	}
	return u
}

func putUsage(tx *bolt.Tx, tenant string, u Usage) error {
	b := tx.Bucket(bucketUsage)
	if u.Count <= 0 {
		return b.Delete([]byte(tenant))
	}
	v := binary.AppendUvarint(nil, uint64(u.Count))
	return b.Put([]byte(tenant), binary.AppendUvarint(v, uint64(max(u.Bytes, 0))))
}

// removeTx removes the tenant's response id (its record v) and takes it off u.
func removeTx(tx *bolt.Tx, tenant, id string, v recordView, u *Usage) error {
	rec, err := v.record(tenant, id)
	if err != nil {
		return err
	}
	if err := tx.Bucket(bucketResponses).Delete(tkey(tenant, id)); err != nil {
		return err
	}
	if err := tx.Bucket(bucketExpiry).Delete(expiryKey(tenant, v.expires, id)); err != nil {
		return err
	}
	u.Count--
	u.Bytes -= rec.Size()
	return nil
}

// sweepTenantTx removes up to max of the tenant's responses expired at now (Unix
// ms) and says how many it removed.
func sweepTenantTx(tx *bolt.Tx, tenant string, now int64, max int) (int, error) {
	prefix := append([]byte(tenant), '/')
	var dead []string // deleting while iterating can skip keys in bbolt
	c := tx.Bucket(bucketExpiry).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && len(dead) < max; k, _ = c.Next() {
		rest := k[len(prefix):]
		if len(rest) < 8 || int64(binary.BigEndian.Uint64(rest)) > now {
			break
		}
		dead = append(dead, string(rest[8:]))
	}
	if len(dead) == 0 {
		return 0, nil
	}
	u := getUsage(tx, tenant)
	for _, id := range dead {
		v, err := viewRecord(tx.Bucket(bucketResponses).Get(tkey(tenant, id)))
		if err != nil {
			return 0, fmt.Errorf("respstore: %s/%s: %w", tenant, id, err)
		}
		if err := removeTx(tx, tenant, id, v, &u); err != nil {
			return 0, err
		}
	}
	return len(dead), putUsage(tx, tenant, u)
}

func (s *Bolt) Put(ctx context.Context, rec Record) error {
	return s.PutWithin(ctx, rec, s.o.limitsOf(rec.Tenant))
}

func (s *Bolt) PutWithin(ctx context.Context, rec Record, lim Limits) error {
	rec, err := s.o.prepare(rec)
	if err != nil {
		return err
	}
	op := &putOp{rec: rec, lim: lim, val: appendRecord(nil, &rec), size: rec.Size(), done: make(chan struct{})}
	select {
	case s.puts <- op:
	case <-s.quit:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	<-op.done // not on ctx: once handed over, the Put is committed or refused, and says which
	return op.err
}

// A putOp is one Put handed to the committer (commitLoop): its record, encoded, and
// its outcome once its group's journal record is written (or it was refused).
type putOp struct {
	rec  Record
	lim  Limits
	val  []byte // appendRecord(rec)
	size int64  // rec.Size()
	err  error  // the Put's outcome; set before done is closed
	done chan struct{}
}

// maxGroup bounds the Puts one group commit takes.
const maxGroup = 256

// An execOp is a write other than a Put (Delete, a sweep), run by commitLoop after
// it committed the Puts in its transaction, so that fn may db.Update.
type execOp struct {
	fn   func() error
	err  error
	done chan struct{}
}

// exec runs fn on the committer, after a bbolt commit of the acknowledged Puts.
func (s *Bolt) exec(ctx context.Context, fn func() error) error {
	e := &execOp{fn: fn, done: make(chan struct{})}
	select {
	case s.execs <- e:
	case <-s.quit:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	<-e.done
	return e.err
}

// commitLoop is the committer of Puts (group commit): it takes the Puts waiting when
// it is free (at most maxGroup), applies them one after the other in its open bbolt
// write transaction, writes them as one journal record and fdatasyncs it (one sync
// for all of them), and only then answers each. A Put alone waits for nothing but
// its own journal write; under load, the Puts that arrive while a sync runs share
// the next one. Each Put's limit check reads the usage the Puts before it left in
// the transaction, so the limits hold exactly as if they had run one by one. A Put
// refused by its limits changes nothing, is not journaled, and does not abort the
// group; any other error of the transaction (bbolt's: a corrupt record) fails that
// Put alone (the transaction is made again from the acknowledged Puts).
//
// The transaction is committed (bbolt's fsyncs) off the Puts' path: when it is
// commitEvery old, after commitIdle with nothing to do, when the journal's pass is
// full, before another write (exec) and at Close. A failed journal write stops the
// store taking Puts (it cannot know what reached the disk); a failed commit is tried
// again, the acknowledged Puts staying in the journal meanwhile.
func (s *Bolt) commitLoop() {
	defer close(s.stopped)
	group := make([]*putOp, 0, maxGroup)
	idle := time.NewTimer(time.Hour)
	idle.Stop()
	for {
		if s.tx != nil {
			idle.Reset(s.idle)
		}
		select {
		case op := <-s.puts:
			group = append(group[:0], op)
		case e := <-s.execs:
			e.err = s.commitPending()
			if e.err == nil {
				e.err = e.fn()
			}
			close(e.done)
			continue
		case <-idle.C:
			s.commitPending()
			continue
		case <-s.quit:
			idle.Stop()
			if !s.crashAtClose {
				s.commitPending()
			}
			if s.tx != nil {
				s.tx.Rollback() // the commit failed: the journal keeps the Puts
			}
			return
		}
		idle.Stop()
		// Let the goroutines that are ready run first: the Puts answered by the last
		// commit are often about to send their next one (readied by it, they queue
		// behind this goroutine, which would otherwise commit alone).
		runtime.Gosched()
	take:
		for len(group) < maxGroup {
			select {
			case op := <-s.puts:
				group = append(group, op)
			default:
				break take
			}
		}
		s.commits.Add(1)
		s.putGroup(group)
		for _, op := range group {
			close(op.done)
		}
		clear(group) // no record kept alive until the next group
		if s.tx != nil && time.Since(s.txStart) >= s.every {
			s.commitPending()
		}
	}
}

// putGroup applies group in the transaction and makes the Puts it stored durable
// (each op.err says how its Put ended).
func (s *Bolt) putGroup(group []*putOp) {
	fail := func(ops []*putOp, err error) {
		for _, op := range ops {
			op.err = err
		}
	}
	if s.broken != nil {
		fail(group, s.broken)
		return
	}
	if err := s.begin(nil); err != nil {
		fail(group, err)
		return
	}
	stored := make([]*putOp, 0, len(group))
	size := 0
	for _, op := range group {
		if err := putTx(s.tx, op); err != nil {
			op.err = wrapBolt(err)
			if err := s.rebuild(stored); err != nil { // without op
				fail(group, err)
				return
			}
			continue
		}
		if op.err == nil {
			stored = append(stored, op)
			size += len(op.val) + len(op.rec.Tenant) + len(op.rec.ID) + 30
		}
	}
	if len(stored) == 0 {
		return
	}
	if !s.j.fits(size) {
		// The journal's pass is full: commit bbolt instead (the group with it), and
		// start the journal again.
		if err := s.commitPending(); err != nil {
			fail(stored, err) // not acknowledged: rebuild left them out
		}
		return
	}
	payload := make([]byte, 0, size)
	for _, op := range stored {
		payload = appendJournalPut(payload, op)
	}
	if err := s.j.write(s.seq+1, payload); err != nil {
		s.broken = fmt.Errorf("respstore: the journal: %w", err)
		fail(stored, s.broken)
		s.rebuild(nil)
		return
	}
	s.seq++
	s.pending = append(s.pending, stored...)
	s.mu.Lock()
	for _, op := range stored {
		s.recent[string(tkey(op.rec.Tenant, op.rec.ID))] = op.val
		s.usage[op.rec.Tenant] = getUsage(s.tx, op.rec.Tenant)
	}
	s.mu.Unlock()
}

// begin opens the committer's transaction if none is open and applies ops in it
// again (acknowledged Puts, which the limits no longer refuse).
func (s *Bolt) begin(ops []*putOp) error {
	if s.tx != nil {
		return nil
	}
	tx, err := s.db.Begin(true)
	if err != nil {
		return wrapBolt(err)
	}
	for _, op := range ops {
		again := *op
		again.lim = Limits{}
		if err := putTx(tx, &again); err != nil {
			tx.Rollback()
			return wrapBolt(err)
		}
	}
	s.tx, s.txStart = tx, time.Now()
	return nil
}

// rebuild makes the transaction again from the acknowledged Puts and then extra
// (after an error left it in a state not known).
func (s *Bolt) rebuild(extra []*putOp) error {
	if s.tx != nil {
		s.tx.Rollback()
		s.tx = nil
	}
	return s.begin(append(s.pending[:len(s.pending):len(s.pending)], extra...))
}

// commitPending commits the transaction (with the seq of the last journal record
// it holds), empties the overlay, and starts the journal again.
func (s *Bolt) commitPending() error {
	if s.tx == nil {
		return nil
	}
	err := s.tx.Bucket(bucketJournal).Put(keyApplied, binary.BigEndian.AppendUint64(nil, s.seq))
	if err == nil {
		err = s.tx.Commit()
	} else {
		s.tx.Rollback()
	}
	s.tx = nil
	if err != nil {
		s.rebuild(nil) // the journal keeps the acknowledged Puts; the next commit tries again
		return wrapBolt(err)
	}
	s.mu.Lock()
	clear(s.recent)
	clear(s.usage)
	s.mu.Unlock()
	clear(s.pending)
	s.pending = s.pending[:0]
	s.j.rewind()
	return nil
}

// putTx applies one Put in tx: it sweeps the tenant's expired responses, checks the
// limits against the usage tx has (op.err: a LimitError, and nothing of the Put is
// written), then writes the record and the usage. Its error is the transaction's
// (not the Put's alone).
func putTx(tx *bolt.Tx, op *putOp) error {
	rec := &op.rec
	if _, err := sweepTenantTx(tx, rec.Tenant, rec.Created.UnixMilli(), sweepPerTx); err != nil {
		return err
	}
	u := getUsage(tx, rec.Tenant)
	next := u
	var old recordView
	replace := false
	if b := tx.Bucket(bucketResponses).Get(tkey(rec.Tenant, rec.ID)); b != nil {
		v, err := viewRecord(b)
		if err != nil {
			return fmt.Errorf("respstore: %s/%s: %w", rec.Tenant, rec.ID, err)
		}
		o, err := v.record(rec.Tenant, rec.ID)
		if err != nil {
			return err
		}
		old, replace = v, true
		next.Count--
		next.Bytes -= o.Size()
	}
	next.Count++
	next.Bytes += op.size
	if err := checkLimits(op.lim, u, next); err != nil {
		op.err = err
		return nil
	}
	if replace {
		cur := u
		if err := removeTx(tx, rec.Tenant, rec.ID, old, &cur); err != nil {
			return err
		}
	}
	if err := tx.Bucket(bucketResponses).Put(tkey(rec.Tenant, rec.ID), op.val); err != nil {
		return err
	}
	if err := tx.Bucket(bucketExpiry).Put(expiryKey(rec.Tenant, rec.Expires.UnixMilli(), rec.ID), nil); err != nil {
		return err
	}
	return putUsage(tx, rec.Tenant, next)
}

// checkLimits refuses a change of a tenant's usage from u to next that passes lim
// (a change that does not grow what passes is allowed: replacing a response with a
// smaller one).
func checkLimits(lim Limits, u, next Usage) error {
	if lim.MaxCount > 0 && next.Count > lim.MaxCount && next.Count > u.Count {
		return &LimitError{Limit: "responses_max_count", Max: lim.MaxCount}
	}
	if lim.MaxBytes > 0 && next.Bytes > lim.MaxBytes && next.Bytes > u.Bytes {
		return &LimitError{Limit: "responses_max_bytes", Max: lim.MaxBytes}
	}
	return nil
}

// wrapBolt gives a bbolt error the package's prefix, and lets the package's own
// errors through.
func wrapBolt(err error) error {
	if err == nil || isOwn(err) {
		return err
	}
	return fmt.Errorf("respstore: %w", err)
}

// lookup returns the view of the tenant's live response id in tx or in the overlay
// (ErrNotFound). The caller holds s.mu (read) from before tx began until it is done
// with the view: a Put bbolt commits meanwhile stays in the overlay until then.
func (s *Bolt) lookup(tx *bolt.Tx, tenant, id string, now time.Time) (recordView, error) {
	if !validID(tenant) || !validID(id) {
		return recordView{}, ErrNotFound
	}
	k := tkey(tenant, id)
	b := s.recent[string(k)]
	if b == nil {
		b = tx.Bucket(bucketResponses).Get(k)
	}
	if b == nil {
		return recordView{}, ErrNotFound
	}
	v, err := viewRecord(b)
	if err != nil {
		return v, fmt.Errorf("respstore: %s/%s: %w", tenant, id, err)
	}
	if expired(v.expires, now) {
		return v, ErrNotFound
	}
	return v, nil
}

func (s *Bolt) Get(ctx context.Context, tenant, id string, now time.Time) (Record, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var rec Record
	err := s.db.View(func(tx *bolt.Tx) error {
		v, err := s.lookup(tx, tenant, id, now)
		if err != nil {
			return err
		}
		rec, err = v.record(tenant, id)
		return err
	})
	return rec, wrapBolt(err)
}

func (s *Bolt) Delete(ctx context.Context, tenant, id string, now time.Time) error {
	return wrapBolt(s.exec(ctx, func() error {
		return s.db.Update(func(tx *bolt.Tx) error {
			v, err := s.lookup(tx, tenant, id, now) // the overlay is empty: exec committed it
			if err != nil {
				return err
			}
			u := getUsage(tx, tenant)
			if err := removeTx(tx, tenant, id, v, &u); err != nil {
				return err
			}
			return putUsage(tx, tenant, u)
		})
	}))
}

func (s *Bolt) InputItems(ctx context.Context, tenant, id string, p Page, now time.Time) ([]Item, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var items []Item
	err := s.db.View(func(tx *bolt.Tx) error {
		v, err := s.lookup(tx, tenant, id, now)
		if err != nil {
			return err
		}
		items, err = decodeItems(append([]byte(nil), v.input...))
		return err
	})
	if err != nil {
		return nil, false, wrapBolt(err)
	}
	return page(items, p)
}

func (s *Bolt) Conversation(ctx context.Context, tenant, id string, now time.Time) ([]Item, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var chain [][]Item // newest first: each response's input then output items
	err := s.db.View(func(tx *bolt.Tx) error {
		var total int64
		for at := id; ; {
			v, err := s.lookup(tx, tenant, at, now)
			if err != nil {
				if err == ErrNotFound && at != id {
					return missingError(at, id)
				}
				return err
			}
			if len(chain) == s.o.MaxDepth {
				return &ConversationError{Limit: "depth", Max: int64(s.o.MaxDepth)}
			}
			items, err := decodeItems(bytes.Clone(v.input))
			if err != nil {
				return err
			}
			out, err := decodeItems(bytes.Clone(v.output))
			if err != nil {
				return err
			}
			items = append(items, out...)
			for i := range items {
				total += int64(len(items[i].JSON))
			}
			if total > s.o.MaxConversationBytes {
				return &ConversationError{Limit: "bytes", Max: s.o.MaxConversationBytes}
			}
			chain = append(chain, items)
			if len(v.previous) == 0 {
				return nil
			}
			at = string(v.previous)
		}
	})
	if err != nil {
		return nil, wrapBolt(err)
	}
	return oldestFirst(chain), nil
}

func (s *Bolt) Sweep(ctx context.Context, now time.Time) (int, error) {
	// bbolt commits the acknowledged Puts first, so that their tenants are listed.
	if err := s.exec(ctx, func() error { return nil }); err != nil {
		return 0, err
	}
	var tenants []string
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketUsage).ForEach(func(k, _ []byte) error {
			tenants = append(tenants, string(k))
			return nil
		})
	})
	if err != nil {
		return 0, wrapBolt(err)
	}
	return sweepTenants(ctx, tenants, now, s.SweepTenant)
}

func (s *Bolt) SweepTenant(ctx context.Context, tenant string, now time.Time) (int, error) {
	if !validID(tenant) {
		return 0, nil
	}
	var removed int
	err := s.exec(ctx, func() error {
		var err error
		removed, err = s.sweepTenant(ctx, tenant, now)
		return err
	})
	return removed, err
}

// sweepTenant is SweepTenant on the committer (no Put in its transaction).
func (s *Bolt) sweepTenant(ctx context.Context, tenant string, now time.Time) (int, error) {
	// A read first: a write transaction is an fsync, and most calls find nothing.
	var due bool
	err := s.db.View(func(tx *bolt.Tx) error {
		prefix := append([]byte(tenant), '/')
		k, _ := tx.Bucket(bucketExpiry).Cursor().Seek(prefix)
		rest, ok := bytes.CutPrefix(k, prefix)
		due = ok && len(rest) >= 8 && int64(binary.BigEndian.Uint64(rest)) <= now.UnixMilli()
		return nil
	})
	if err != nil || !due {
		return 0, wrapBolt(err)
	}
	removed := 0
	for {
		if err := ctx.Err(); err != nil {
			return removed, err
		}
		var n int
		err := s.db.Update(func(tx *bolt.Tx) error {
			var err error
			n, err = sweepTenantTx(tx, tenant, now.UnixMilli(), sweepPerTx)
			return err
		})
		removed += n
		if err != nil {
			return removed, wrapBolt(err)
		}
		if n < sweepPerTx {
			return removed, nil
		}
	}
}

func (s *Bolt) Usage(ctx context.Context, tenant string) (Usage, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if u, ok := s.usage[tenant]; ok {
		return u, nil
	}
	var u Usage
	err := s.db.View(func(tx *bolt.Tx) error { u = getUsage(tx, tenant); return nil })
	return u, wrapBolt(err)
}
