package respstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/lmlite/lmlite/ledger"
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

// appendFill is the fill percent of the pages bbolt splits in the buckets of the
// responses and their expiries. Their keys come in time order (an expiry key has
// its time first; the gateway's response ids start with their request's time:
// openai.ResponseID), so a commit appends to the last pages of each tenant's keys:
// bbolt's default (0.5) would leave every page it splits there half empty for good,
// and a commit would write twice the pages.
const appendFill = 0.9

// commitEvery bounds how long acknowledged Puts stay in the journal only: the
// applier commits them to bbolt when the oldest is this old, when no Put came for
// commitIdle, when the journal's pass is full, and before any other write (Delete,
// a sweep) and Close. commitIdle is long enough that a server under load, whose
// Puts come in bursts (an engine step finishes several requests), is not taken
// for idle between them: at 5 ms, 16 closed-loop connections on 2 cores made a
// commit every 50 ms, not 100, each bbolt commit's own work (two fdatasyncs, the
// meta, freelist and branch pages) shared by half as many Puts.
const (
	commitEvery = 100 * time.Millisecond
	commitIdle  = 25 * time.Millisecond
)

// initialMmap is the size bbolt maps the file at first (address space, not memory
// or disk): until the file passes it, bbolt never maps it again as it grows. A
// remap happens in the applier's transaction and copies every node it changed out
// of the old map (node.dereference) first; growing from nothing, a store remapped at
// each doubling up to here.
const initialMmap = 256 << 20

// pageSize is the page size of a new bbolt file (a file made before keeps its own:
// bbolt reads it from the file). bbolt writes each dirty page of a commit with a
// pwrite of its own, and on ext4 each write also dirties the inode (a journal
// handle): with the OS's 4 KiB pages a commit of 200 ms of stored responses (~1.3
// KiB each, in time order) made ~150 of them, the biggest part of a stored
// response's CPU beyond a chat request's settlement under the ledger's sync: fsync.
// 16 KiB pages make a quarter as many writes of the same bytes (BenchmarkLedgerClosedLoop,
// docs/PERFORMANCE.md), and a Delete or a replaced response still rewrites only
// 16 KiB of leaf. Tests may set it (0: the OS's page size).
var pageSize = 16 << 10

// Bolt is the Store of one process: an embedded bbolt database (a file in the data
// directory, e.g. data_dir/responses.db) and its journal (responses.db-journal).
// A Put returns once it is durable: its group's journal record is fdatasynced (one
// fdatasync per group of concurrent Puts; commitLoop, the writer). Another
// goroutine, the applier (applyLoop), commits the acknowledged Puts to bbolt
// later, fsynced as always, while the writer goes on journaling the next groups;
// at open the journal's records bbolt lacks (a crash came first) are applied again.
// Until bbolt commits them, readers and the writer's limit checks find the
// acknowledged Puts in an overlay (recent, usage).
type Bolt struct {
	db      *bolt.DB
	o       Options
	j       *journal
	puts    chan *putOp   // to commitLoop; unbuffered, so no Put is left behind at Close
	execs   chan *execOp  // other writes, run by commitLoop after bbolt committed every Put
	quit    chan struct{} // closed by Close
	stopped chan struct{} // closed when commitLoop and applyLoop returned
	once    sync.Once
	commits atomic.Int64  // group commits made: journal records (tests read it)
	every   time.Duration // commitEvery
	idle    time.Duration // commitIdle

	// The writer's state (commitLoop's goroutine only).
	seq    uint64 // the last journal record's seq
	broken error  // a journal write failed: every Put fails with it

	// From the writer to the applier.
	qmu      sync.Mutex
	queue    []*putOp      // acknowledged Puts bbolt has not committed, in order (under qmu)
	queued   time.Time     // when the oldest of queue was queued (under qmu)
	lastQ    time.Time     // when the writer last queued Puts (under qmu)
	kick     chan struct{} // the queue grew (buffered: one is enough)
	flushes  chan flushReq // the writer waits until bbolt holds every Put queued (or those up to a seq)
	applied  atomic.Uint64 // the seq of the last journal record bbolt holds
	stopAppl chan struct{} // closed by the writer at Close
	applDone chan struct{} // closed when applyLoop returned

	// The overlay: the acknowledged Puts bbolt has not committed (under mu; the
	// writer adds to it, the applier takes out what it committed).
	mu       sync.RWMutex
	recent   map[string]*putOp        // tkey → the last acknowledged Put of it not in bbolt
	usage    map[string]*pendingUsage // tenant → its usage with its Puts not in bbolt, for tenants that have some
	replayed int                      // Puts applied again from the journal at open (tests read it)

	// Ledger mode (ledger.go): the Puts are the ledger's side records.
	led        bool
	log        atomic.Pointer[ledger.Log] // writes lone Puts (SideLog)
	sideSeq    uint64                     // the last side record's seq (AppendSide, under the ledger's write lock; ReplaySide)
	sideFound  []*putOp                   // ReplaySide's, for ReplayedSides
	holding    map[string]*putOp          // under mu: the Puts decided (held) and not yet published or failed, by key
	held       int                        // under mu: len(holding)
	wake       chan struct{}              // cap 1: a held Put was published or failed (when wakeWanted)
	wakeWanted bool                       // under mu: the owner waits for wake
	parked     []*putOp                   // the owner's: Puts waiting for a held Put of their key
	written    atomic.Uint64              // the seq of the last side record written
	excl       bool                       // under mu: the owner runs a write that no Put decided meanwhile may pass (exclusive), or closes
	closing    bool                       // under mu: Close began (excl stays set)

	ownerDecided atomic.Int64 // tests: Puts the owner held (not decided in their own goroutine)
	kicks        atomic.Int64 // tests: ledger mode's wakes of the applier by SideWritten

	commitHook   func() // tests: runs in the applier's bbolt transaction, before it commits
	crashAtClose bool   // tests: Close leaves bbolt without the journal's Puts, as a crash would
}

// pendingUsage is a tenant's part of the overlay.
type pendingUsage struct {
	u      Usage // the tenant's usage with every acknowledged Put
	hold   Usage // ledger mode: the growth of its held Puts, at most (u + hold: what a Put is checked against)
	n      int   // the tenant's acknowledged Puts bbolt has not committed
	minExp int64 // the earliest expiry (Unix ms) of those (a bound: may be one committed since)
}

// ErrClosed is the error of a Put on a closed Bolt.
var ErrClosed = errors.New("respstore: closed")

// OpenBolt opens (creating) the store in the file path and its journal (path +
// "-journal"), applying the journal's records that bbolt lacks.
func OpenBolt(path string, o Options) (*Bolt, error) {
	return openBolt(path, o, commitEvery, commitIdle, false)
}

// openBolt is OpenBolt committing bbolt after every and idle (tests: only when they
// make it, with an hour).
func openBolt(path string, o Options, every, idle time.Duration, led bool) (*Bolt, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, InitialMmapSize: initialMmap, PageSize: pageSize})
	if err != nil {
		return nil, fmt.Errorf("respstore: %w", err)
	}
	s := &Bolt{db: db, o: o.withDefaults(), puts: make(chan *putOp), execs: make(chan *execOp),
		quit: make(chan struct{}), stopped: make(chan struct{}),
		kick: make(chan struct{}, 1), flushes: make(chan flushReq), stopAppl: make(chan struct{}), applDone: make(chan struct{}),
		recent: map[string]*putOp{}, usage: map[string]*pendingUsage{}, every: every, idle: idle,
		led: led, holding: map[string]*putOp{}, wake: make(chan struct{}, 1)}
	if err := s.replay(path + "-journal"); err != nil {
		db.Close()
		return nil, fmt.Errorf("respstore: %w", err)
	}
	go s.applyLoop()
	if led {
		go s.ownerLoop()
	} else {
		go s.commitLoop()
	}
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
		data, err = nil, j.reset(s.journalSize())
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
				if err := applyTx(tx, op); err != nil {
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
		s.applied.Store(s.seq)
		if v := meta.Get(keySide); len(v) == 8 {
			s.sideSeq = binary.BigEndian.Uint64(v)
		}
		return meta.Put(keyApplied, binary.BigEndian.AppendUint64(nil, s.seq))
	})
	if err == nil && !fresh {
		err = j.reset(s.journalSize())
	}
	if err != nil {
		j.close()
		return err
	}
	s.j = j
	return nil
}

// journalSize is the size of the journal's pass: none in ledger mode.
func (s *Bolt) journalSize() int {
	if s.led {
		return 0
	}
	return journalSize
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
	if s.led {
		return s.PutCarried(ctx, rec, lim, nil)
	}
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

// A putOp is one Put handed to the writer (commitLoop): its record, encoded, and
// its outcome once its group's journal record is written (or it was refused).
type putOp struct {
	rec  Record
	lim  Limits
	val  []byte // appendRecord(rec)
	size int64  // rec.Size()
	err  error  // the Put's outcome; set before done is closed
	done chan struct{}
	key  string // tkey(rec.Tenant, rec.ID) (the writer sets it)
	seq  uint64 // the journal record it is in, once acknowledged (ledger mode: its side record's)

	// Ledger mode (ledger.go).
	st        *Bolt
	delta     Usage // what it changes of its tenant's usage (the owner's decision)
	written   bool  // its ledger write ended (SideWritten, under the ledger's write lock)
	werr      error // … with this error
	published bool  // under Bolt.mu: published or failed (no longer held)
}

// maxGroup bounds the Puts one group commit takes.
const maxGroup = 256

// An execOp is a write other than a Put (Delete, a sweep), run by commitLoop once
// bbolt holds every acknowledged Put, so that fn may db.Update.
type execOp struct {
	fn   func() error
	err  error
	done chan struct{}
}

// exec runs fn on the writer, after bbolt committed every acknowledged Put.
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

// commitLoop is the writer (group commit): it takes the Puts waiting when it is
// free (at most maxGroup), checks each one's limits against the usage the Puts
// before it left (bbolt's, the overlay's and its group's), writes the ones stored
// as one journal record and fdatasyncs it (one sync for all of them), adds them to
// the overlay and the applier's queue, and only then answers each. A Put alone
// waits for nothing but its own journal write; under load, the Puts that arrive
// while a sync runs share the next one. The limits hold exactly as if the Puts had
// run one by one: only the writer decides what is stored. A Put refused by its
// limits changes nothing, is not journaled, and does not abort the group.
//
// The writer never waits for bbolt's commits (applyLoop makes them), except before
// another write (exec), when the journal's pass is full, and for a Put of a tenant
// with a response expired by the Put's time (it is swept first, in bbolt, as a Put
// always did). A failed journal write stops the store taking Puts (it cannot know
// what reached the disk).
func (s *Bolt) commitLoop() {
	defer close(s.stopped)
	group := make([]*putOp, 0, maxGroup)
	for {
		select {
		case op := <-s.puts:
			group = append(group[:0], op)
		case e := <-s.execs:
			e.err = s.flush()
			if e.err == nil {
				e.err = e.fn()
			}
			close(e.done)
			continue
		case <-s.quit:
			close(s.stopAppl)
			<-s.applDone
			return
		}
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
		s.putGroup(group)
		for _, op := range group {
			close(op.done)
		}
		clear(group) // no record kept alive until the next group
	}
}

// A batch is the Puts of a group the writer has accepted and not yet journaled,
// with what they change: each tenant's usage, the keys they store.
type batch struct {
	ops    []*putOp
	usage  map[string]*pendingUsage // n and minExp: of the batch's Puts only
	keys   map[string]*putOp
	length int // the journal payload's bytes, about
}

func (b *batch) reset() {
	b.ops = b.ops[:0]
	clear(b.usage)
	clear(b.keys)
	b.length = 0
}

// putGroup decides each Put of group (each op.err says how it ended) and makes the
// ones stored durable.
func (s *Bolt) putGroup(group []*putOp) {
	if s.broken != nil {
		for _, op := range group {
			op.err = s.broken
		}
		return
	}
	b := &batch{usage: map[string]*pendingUsage{}, keys: map[string]*putOp{}}
	for _, op := range group {
		rec := &op.rec
		op.key = string(tkey(rec.Tenant, rec.ID))
		now := rec.Created.UnixMilli()
		st, err := s.stateOf(b, op, now)
		if err == nil && st.expired {
			// Sweep the tenant's expired responses first, in bbolt: journal what is
			// decided so far, wait for bbolt to hold it all, sweep, and look again.
			s.writeBatch(b)
			if err = s.flush(); err == nil {
				err = wrapBolt(s.db.Update(func(tx *bolt.Tx) error {
					_, err := sweepTenantTx(tx, rec.Tenant, now, sweepPerTx)
					return err
				}))
			}
			if err == nil {
				st, err = s.stateOf(b, op, now)
			}
		}
		if err != nil {
			op.err = err
			continue
		}
		next := st.u
		next.Count++
		next.Bytes += op.size
		if st.replace {
			next.Count--
			next.Bytes -= st.oldSize
		}
		if err := checkLimits(op.lim, st.u, next); err != nil {
			op.err = err
			continue
		}
		p := b.usage[rec.Tenant]
		if p == nil {
			p = &pendingUsage{minExp: math.MaxInt64}
			b.usage[rec.Tenant] = p
		}
		p.u = next
		p.n++
		p.minExp = min(p.minExp, rec.Expires.UnixMilli())
		b.keys[op.key] = op
		b.ops = append(b.ops, op)
		b.length += len(op.val) + len(rec.Tenant) + len(rec.ID) + 30
	}
	s.writeBatch(b)
}

// putState is what a Put finds before it: its tenant's usage, the response it
// replaces (and its size), whether one of the tenant's responses has expired.
type putState struct {
	u       Usage
	replace bool
	oldSize int64
	expired bool
}

// stateOf reads op's state: from the batch (the group's Puts before it), else the
// overlay (acknowledged Puts bbolt does not hold yet), else bbolt. What the
// overlay lacks, bbolt holds for good: only the writer adds to it, and the applier
// takes a Put out only after its commit.
func (s *Bolt) stateOf(b *batch, op *putOp, now int64) (putState, error) {
	rec := &op.rec
	var st putState
	haveUsage, haveOld := false, false
	if p := b.usage[rec.Tenant]; p != nil {
		st.u, haveUsage = p.u, true
		st.expired = p.minExp <= now
	}
	if old := b.keys[op.key]; old != nil {
		st.replace, st.oldSize, haveOld = true, old.size, true
	}
	s.mu.RLock()
	if p := s.usage[rec.Tenant]; p != nil {
		if !haveUsage {
			st.u, haveUsage = p.u, true
		}
		st.expired = st.expired || p.minExp <= now
	}
	if old := s.recent[op.key]; old != nil && !haveOld {
		st.replace, st.oldSize, haveOld = true, old.size, true
	}
	s.mu.RUnlock()
	err := s.db.View(func(tx *bolt.Tx) error {
		if !haveUsage {
			st.u = getUsage(tx, rec.Tenant)
		}
		return boltState(tx, rec, op.key, now, haveOld, &st)
	})
	return st, wrapBolt(err)
}

// writeBatch journals the batch's Puts as one record (fdatasynced), then adds them
// to the overlay and to the applier's queue; on an error each fails with it. The
// batch is empty afterwards.
func (s *Bolt) writeBatch(b *batch) {
	defer b.reset()
	if len(b.ops) == 0 {
		return
	}
	fail := func(err error) {
		for _, op := range b.ops {
			op.err = err
		}
	}
	if s.broken != nil {
		fail(s.broken)
		return
	}
	if s.j.off > 0 && s.applied.Load() == s.seq {
		s.j.rewind() // bbolt holds every record: start the pass again
	}
	if !s.j.fits(b.length) {
		// The journal's pass is full: wait for bbolt to hold every record, and start
		// the journal again.
		if err := s.flush(); err != nil {
			fail(err)
			return
		}
		s.j.rewind()
	}
	payload := make([]byte, 0, b.length)
	for _, op := range b.ops {
		payload = appendJournalPut(payload, op)
	}
	if err := s.j.write(s.seq+1, payload, !s.o.ProcessSync); err != nil {
		s.broken = fmt.Errorf("respstore: the journal: %w", err)
		fail(s.broken)
		return
	}
	s.seq++
	s.commits.Add(1)
	for _, op := range b.ops {
		op.seq = s.seq
	}
	s.mu.Lock()
	for _, op := range b.ops {
		s.recent[op.key] = op
	}
	for tenant, bp := range b.usage {
		p := s.usage[tenant]
		if p == nil {
			p = &pendingUsage{minExp: math.MaxInt64}
			s.usage[tenant] = p
		}
		p.u = bp.u
		p.n += bp.n
		p.minExp = min(p.minExp, bp.minExp)
	}
	s.mu.Unlock()
	s.qmu.Lock()
	if len(s.queue) == 0 {
		s.queued = time.Now()
	}
	s.queue = append(s.queue, b.ops...)
	s.lastQ = time.Now()
	s.qmu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// flush waits until bbolt holds every journal record written (the writer's).
func (s *Bolt) flush() error {
	if s.applied.Load() == s.seq {
		return nil
	}
	c := make(chan error, 1)
	s.flushes <- flushReq{c: c}
	return <-c
}

// flushReq asks the applier to answer c once bbolt holds every Put queued, or (upTo
// not 0) every Put of seq upTo or less.
type flushReq struct {
	upTo uint64
	c    chan error
}

// applyLoop is the applier: it commits the acknowledged Puts of the queue to bbolt
// in one transaction (with the seq of the last journal record they came in) when
// the oldest has waited commitEvery, when no Put came for commitIdle, when the
// writer waits (flush), and at Close, then takes them out of the overlay. A failed
// commit is tried again (the journal keeps the Puts meanwhile); a flush waiting
// gets its error.
func (s *Bolt) applyLoop() {
	defer close(s.applDone)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var waiting []flushReq
	var retryAt time.Time
	answer := func(err error) {
		for _, w := range waiting {
			w.c <- err
		}
		waiting = nil
	}
	answerUpTo := func(applied uint64) { // the flushes of a seq bbolt now holds
		rest := waiting[:0]
		for _, w := range waiting {
			if w.upTo != 0 && w.upTo <= applied {
				w.c <- nil
				continue
			}
			rest = append(rest, w)
		}
		clear(waiting[len(rest):])
		waiting = rest
	}
	for {
		s.qmu.Lock()
		n, oldest, lastQ := len(s.queue), s.queued, s.lastQ
		s.qmu.Unlock()
		if n == 0 {
			answer(nil)
		}
		now := time.Now()
		if n > 0 && (len(waiting) > 0 || !now.Before(retryAt) && (now.Sub(oldest) >= s.every || now.Sub(lastQ) >= s.idle)) {
			err := s.applyQueued()
			if err != nil {
				retryAt = time.Now().Add(s.idle)
				answer(err)
			} else {
				answerUpTo(s.applied.Load())
			}
			continue
		}
		var wake <-chan time.Time
		if n > 0 {
			d := min(s.every-now.Sub(oldest), s.idle-now.Sub(lastQ))
			d = max(d, retryAt.Sub(now), 0)
			timer.Reset(d)
			wake = timer.C
		}
		select {
		case <-s.kick:
		case c := <-s.flushes:
			waiting = append(waiting, c)
		case <-wake:
		case <-s.stopAppl:
			timer.Stop()
			if n > 0 && !s.crashAtClose {
				s.applyQueued() // a failure leaves the Puts to the journal
			}
			return
		}
		timer.Stop()
	}
}

// applyQueued commits the queue's Puts to bbolt and takes them out of the queue and
// the overlay.
func (s *Bolt) applyQueued() error {
	s.qmu.Lock()
	ops := s.queue[:len(s.queue):len(s.queue)] // the writer only appends
	s.qmu.Unlock()
	last := ops[len(ops)-1].seq
	err := s.db.Update(func(tx *bolt.Tx) error {
		if err := applyOps(tx, ops); err != nil {
			return err
		}
		if s.commitHook != nil {
			s.commitHook()
		}
		key := keyApplied
		if s.led {
			key = keySide
		}
		return tx.Bucket(bucketJournal).Put(key, binary.BigEndian.AppendUint64(nil, last))
	})
	if err != nil {
		return wrapBolt(err)
	}
	s.applied.Store(last)
	s.qmu.Lock()
	rest := s.queue[len(ops):]
	s.queue = append(make([]*putOp, 0, max(len(rest), 64)), rest...)
	s.queued = time.Now()
	s.qmu.Unlock()
	s.mu.Lock()
	for _, op := range ops {
		if s.led && !op.published { // written, its Put not back from the ledger yet
			s.publishLocked(op)
		}
		if s.recent[op.key] == op {
			delete(s.recent, op.key)
		}
		if p := s.usage[op.rec.Tenant]; p != nil {
			if p.n--; p.n <= 0 {
				delete(s.usage, op.rec.Tenant)
			}
		}
	}
	s.mu.Unlock()
	return nil
}

// applyTx writes one acknowledged Put in tx: its record (replacing the tenant's
// response of the same id), its expiry key and the tenant's usage. Its error is the
// transaction's.
func applyTx(tx *bolt.Tx, op *putOp) error {
	return applyOps(tx, []*putOp{op})
}

// applyOps writes acknowledged Puts in tx, in order, as applyTx each: the usage of
// each tenant among them is read once and written once, after its last Put.
func applyOps(tx *bolt.Tx, ops []*putOp) error {
	responses, expiry := tx.Bucket(bucketResponses), tx.Bucket(bucketExpiry)
	responses.FillPercent, expiry.FillPercent = appendFill, appendFill
	var (
		last    string // the tenant of the Put before, whose usage is u
		u       Usage
		tenants map[string]Usage // the others' so far, when the Puts have several tenants
	)
	for i, op := range ops {
		rec := &op.rec
		if i == 0 || rec.Tenant != last {
			if i > 0 {
				if tenants == nil {
					tenants = map[string]Usage{}
				}
				tenants[last] = u
			}
			var ok bool
			if u, ok = tenants[rec.Tenant]; !ok {
				u = getUsage(tx, rec.Tenant)
			}
			last = rec.Tenant
		}
		k := tkey(rec.Tenant, rec.ID) // bbolt keeps it until the commit
		if b := responses.Get(k); b != nil {
			v, err := viewRecord(b)
			if err != nil {
				return fmt.Errorf("respstore: %s/%s: %w", rec.Tenant, rec.ID, err)
			}
			if err := removeTx(tx, rec.Tenant, rec.ID, v, &u); err != nil {
				return err
			}
		}
		if err := responses.Put(k, op.val); err != nil {
			return err
		}
		if err := expiry.Put(expiryKey(rec.Tenant, rec.Expires.UnixMilli(), rec.ID), nil); err != nil {
			return err
		}
		u.Count++
		u.Bytes += op.size
	}
	if len(ops) == 0 {
		return nil
	}
	for t, tu := range tenants {
		if t != last {
			if err := putUsage(tx, t, tu); err != nil {
				return err
			}
		}
	}
	return putUsage(tx, last, u)
}

// putTx is one Put in tx as one transaction decides it alone (the benchmarks'
// "update", the store before the group commit): it sweeps the tenant's expired
// responses, checks the limits against the usage tx has (op.err: a LimitError, and
// nothing of the Put is written), then applies it.
func putTx(tx *bolt.Tx, op *putOp) error {
	rec := &op.rec
	if _, err := sweepTenantTx(tx, rec.Tenant, rec.Created.UnixMilli(), sweepPerTx); err != nil {
		return err
	}
	u := getUsage(tx, rec.Tenant)
	next := u
	if b := tx.Bucket(bucketResponses).Get(tkey(rec.Tenant, rec.ID)); b != nil {
		v, err := viewRecord(b)
		if err != nil {
			return fmt.Errorf("respstore: %s/%s: %w", rec.Tenant, rec.ID, err)
		}
		o, err := v.record(rec.Tenant, rec.ID)
		if err != nil {
			return err
		}
		next.Count--
		next.Bytes -= o.Size()
	}
	next.Count++
	next.Bytes += op.size
	if err := checkLimits(op.lim, u, next); err != nil {
		op.err = err
		return nil
	}
	return applyTx(tx, op)
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
	var b []byte
	if op := s.recent[string(k)]; op != nil {
		b = op.val
	}
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
			// exec committed the overlay, but the applier may still be taking its
			// Puts off s.recent: lookup reads it under s.mu, as its callers must.
			s.mu.RLock()
			v, err := s.lookup(tx, tenant, id, now)
			s.mu.RUnlock()
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

// sweepTenant is SweepTenant on the writer (bbolt holds every acknowledged Put).
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
	if p, ok := s.usage[tenant]; ok {
		return p.u, nil
	}
	var u Usage
	err := s.db.View(func(tx *bolt.Tx) error { u = getUsage(tx, tenant); return nil })
	return u, wrapBolt(err)
}
