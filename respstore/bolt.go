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
)

// sweepPerTx bounds the responses one transaction of Sweep (or of a Put) removes.
const sweepPerTx = 1000

// Bolt is the Store of one process: an embedded bbolt database (a file in the data
// directory, e.g. data_dir/responses.db). Every write is a transaction fsynced
// before it returns (bbolt's default, as batch.Store's), so a stored response
// survives a crash once Put returned. Puts are group-committed (commitLoop): the
// Puts waiting while one transaction commits share the next transaction and its
// fsync, and each returns only after that commit.
type Bolt struct {
	db      *bolt.DB
	o       Options
	puts    chan *putOp   // to commitLoop; unbuffered, so no Put is left behind at Close
	quit    chan struct{} // closed by Close
	stopped chan struct{} // closed when commitLoop returned
	once    sync.Once
	commits atomic.Int64 // group commits made (tests read it)
}

// ErrClosed is the error of a Put on a closed Bolt.
var ErrClosed = errors.New("respstore: closed")

// OpenBolt opens (creating) the store in the file path.
func OpenBolt(path string, o Options) (*Bolt, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("respstore: %w", err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketResponses, bucketExpiry, bucketUsage} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("respstore: %w", err)
	}
	s := &Bolt{db: db, o: o.withDefaults(), puts: make(chan *putOp), quit: make(chan struct{}), stopped: make(chan struct{})}
	go s.commitLoop()
	return s, nil
}

// Close closes the database, after the group commit under way (a Put after it, or
// waiting to be taken, is ErrClosed).
func (s *Bolt) Close() error {
	s.once.Do(func() { close(s.quit) })
	<-s.stopped
	return s.db.Close()
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
// its outcome once its transaction committed (or was refused).
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

// commitLoop is the committer of Puts (group commit): it takes the Puts waiting when
// it is free (at most maxGroup), applies them one after the other in one write
// transaction, commits it (one fsync for all of them), and only then answers each.
// A Put alone waits for nothing but its own commit, as with a db.Update of its own;
// under load, the Puts that arrive while a commit's fsync runs share the next one.
// Each Put's limit check reads the usage the Puts before it in the group left, so
// the limits hold exactly as if they had run one by one. A Put refused by its limits
// changes nothing and does not abort the group; any other error of the transaction
// (bbolt's: a full disk, a corrupt record) rolls the group back, and its Puts run
// again one transaction each, so one bad Put fails alone.
func (s *Bolt) commitLoop() {
	defer close(s.stopped)
	group := make([]*putOp, 0, maxGroup)
	for {
		select {
		case op := <-s.puts:
			group = append(group[:0], op)
		case <-s.quit:
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
		s.commits.Add(1)
		err := s.db.Update(func(tx *bolt.Tx) error {
			for _, op := range group {
				if err := putTx(tx, op); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil && len(group) > 1 {
			for _, op := range group { // one by one: the failing one fails alone
				op.err = nil
				op.err = wrapBolt(s.db.Update(func(tx *bolt.Tx) error { return putTx(tx, op) }))
				close(op.done)
			}
			continue
		}
		for _, op := range group {
			if err != nil {
				op.err = wrapBolt(err)
			}
			close(op.done)
		}
		clear(group) // no record kept alive until the next group
	}
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

// lookup returns the view of the tenant's live response id in tx (ErrNotFound).
func lookup(tx *bolt.Tx, tenant, id string, now time.Time) (recordView, error) {
	if !validID(tenant) || !validID(id) {
		return recordView{}, ErrNotFound
	}
	b := tx.Bucket(bucketResponses).Get(tkey(tenant, id))
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
	var rec Record
	err := s.db.View(func(tx *bolt.Tx) error {
		v, err := lookup(tx, tenant, id, now)
		if err != nil {
			return err
		}
		rec, err = v.record(tenant, id)
		return err
	})
	return rec, wrapBolt(err)
}

func (s *Bolt) Delete(ctx context.Context, tenant, id string, now time.Time) error {
	return wrapBolt(s.db.Update(func(tx *bolt.Tx) error {
		v, err := lookup(tx, tenant, id, now)
		if err != nil {
			return err
		}
		u := getUsage(tx, tenant)
		if err := removeTx(tx, tenant, id, v, &u); err != nil {
			return err
		}
		return putUsage(tx, tenant, u)
	}))
}

func (s *Bolt) InputItems(ctx context.Context, tenant, id string, p Page, now time.Time) ([]Item, bool, error) {
	var items []Item
	err := s.db.View(func(tx *bolt.Tx) error {
		v, err := lookup(tx, tenant, id, now)
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
	var chain [][]Item // newest first: each response's input then output items
	err := s.db.View(func(tx *bolt.Tx) error {
		var total int64
		for at := id; ; {
			v, err := lookup(tx, tenant, at, now)
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
	var u Usage
	err := s.db.View(func(tx *bolt.Tx) error { u = getUsage(tx, tenant); return nil })
	return u, wrapBolt(err)
}
