package tenancy

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/lmlite/lmlite/tiers"
)

// SyncMode says how durable a committed ledger group is before Settle returns.
type SyncMode int

const (
	// SyncFsync fsyncs every group: it survives power loss.
	SyncFsync SyncMode = iota
	// SyncProcess writes every group to the OS and fsyncs in the background every
	// second: it survives the process being killed, not the machine losing power.
	SyncProcess
)

// Options configure a Store. The zero value is SyncFsync with a 1s lock timeout.
type Options struct {
	Sync        SyncMode
	LockTimeout time.Duration // how long Open waits for another process's lock; 0: 1s
}

// ErrLocked is returned by Open when another process holds the store.
var ErrLocked = errors.New("tenancy: store is in use by another process")

// ErrClosed is returned after Close.
var ErrClosed = errors.New("tenancy: store closed")

var (
	bucketKeys   = []byte("keys")
	bucketLedger = []byte("ledger")
	bucketSpend  = []byte("spend")
)

// Entry is one request's usage in the ledger.
type Entry struct {
	Time             time.Time     `json:"time"`
	RequestID        string        `json:"request_id"`
	Tenant           string        `json:"tenant"`
	KeyID            string        `json:"key_id,omitempty"`
	Model            string        `json:"model,omitempty"`
	Tier             string        `json:"tier,omitempty"`
	Status           int           `json:"status"`
	Finish           string        `json:"finish_reason,omitempty"`
	PromptTokens     int           `json:"prompt_tokens"`
	CompletionTokens int           `json:"completion_tokens"`
	Cost             tiers.Money   `json:"cost_nano_usd"`
	Latency          time.Duration `json:"latency_ns"`
	TTFT             time.Duration `json:"ttft_ns,omitempty"`
}

// Store is the embedded store of keys, the usage ledger and spend totals: one bbolt
// file. It is safe for concurrent use.
type Store struct {
	db   *bolt.DB
	opts Options

	keysMu sync.RWMutex        // guards keys
	keys   map[string]*KeyInfo // by id; a cache of the keys bucket

	commits atomic.Int64 // ledger transactions committed (for tests and metrics)

	mu      sync.Mutex // guards cur and closed
	cur     *group     // the group that Record appends to
	closed  bool
	kick    chan struct{} // cap 1: wakes the writer
	stop    chan struct{}
	stopped chan struct{}
}

// group is the entries committed by one transaction.
type group struct {
	entries []Entry
	done    chan struct{} // closed when committed
	err     error         // set before done is closed
}

// Open opens (creating if needed) the store at path.
func Open(path string, opts Options) (*Store, error) {
	if opts.LockTimeout == 0 {
		opts.LockTimeout = time.Second
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("tenancy: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:        opts.LockTimeout,
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
	})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, path)
		}
		return nil, fmt.Errorf("tenancy: open %s: %w", path, err)
	}
	db.NoSync = opts.Sync == SyncProcess
	s := &Store{
		db: db, opts: opts, keys: map[string]*KeyInfo{},
		cur:  &group{done: make(chan struct{})},
		kick: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{}),
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketKeys, bucketLedger, bucketSpend} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketKeys).ForEach(func(k, v []byte) error {
			var ki KeyInfo
			if err := json.Unmarshal(v, &ki); err != nil {
				return fmt.Errorf("key %q: %w", k, err)
			}
			s.keys[ki.ID] = &ki
			return nil
		})
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("tenancy: open %s: %w", path, err)
	}
	go s.writer()
	return s, nil
}

// Close commits what is queued, stops the writer and closes the file.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	<-s.stopped
	if s.db.NoSync {
		_ = s.db.Sync()
	}
	return s.db.Close()
}

// Commits is the number of ledger groups committed so far.
func (s *Store) Commits() int64 { return s.commits.Load() }

// Path is the store's file.
func (s *Store) Path() string { return s.db.Path() }

// writer is the one goroutine that commits ledger groups; it owns nothing but the
// swap of s.cur. Entries queued while a transaction runs form the next group.
func (s *Store) writer() {
	defer close(s.stopped)
	var tick <-chan time.Time
	if s.db.NoSync {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-s.kick:
			s.commitCurrent()
		case <-tick:
			_ = s.db.Sync()
		case <-s.stop:
			s.commitCurrent()
			return
		}
	}
}

func (s *Store) commitCurrent() {
	s.mu.Lock()
	g := s.cur
	if len(g.entries) == 0 {
		s.mu.Unlock()
		return
	}
	s.cur = &group{done: make(chan struct{}), entries: make([]Entry, 0, cap(g.entries))}
	s.mu.Unlock()
	g.err = s.db.Update(func(tx *bolt.Tx) error { return writeEntries(tx, g.entries) })
	s.commits.Add(1)
	if g.err != nil {
		g.err = fmt.Errorf("tenancy: ledger: %w", g.err)
	}
	close(g.done)
}

func writeEntries(tx *bolt.Tx, entries []Entry) error {
	led, spend := tx.Bucket(bucketLedger), tx.Bucket(bucketSpend)
	totals := map[string]tiers.Money{}
	var kb [8]byte
	for i := range entries {
		e := &entries[i]
		seq, err := led.NextSequence()
		if err != nil {
			return err
		}
		v, err := json.Marshal(e)
		if err != nil {
			return err
		}
		binary.BigEndian.PutUint64(kb[:], seq)
		if err := led.Put(kb[:], v); err != nil {
			return err
		}
		if e.Cost != 0 {
			d, m := windows(e.Time)
			totals[spendKey(e.Tenant, 'd', d)] += e.Cost
			totals[spendKey(e.Tenant, 'm', m)] += e.Cost
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

// windows returns the UTC day (yyyymmdd) and month (yyyymm) of t.
func windows(t time.Time) (day, month int) {
	y, m, d := t.UTC().Date()
	return y*10000 + int(m)*100 + d, y*100 + int(m)
}

func spendKey(tenant string, kind byte, window int) string {
	return tenant + "\x00" + string(kind) + strconv.Itoa(window)
}

// Record appends e to the ledger and returns when the group holding it is committed
// (see SyncMode for how durable that is).
func (s *Store) Record(e Entry) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	g := s.cur
	g.entries = append(g.entries, e)
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default: // the writer is already due to run
	}
	<-g.done
	return g.err
}

// Spent returns the settled spend of tenant in the day and month windows of now.
func (s *Store) Spent(tenant string, now time.Time) (day, month tiers.Money, err error) {
	d, m := windows(now)
	err = s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSpend)
		if v := b.Get([]byte(spendKey(tenant, 'd', d))); len(v) == 8 {
			day = tiers.Money(binary.BigEndian.Uint64(v))
		}
		if v := b.Get([]byte(spendKey(tenant, 'm', m))); len(v) == 8 {
			month = tiers.Money(binary.BigEndian.Uint64(v))
		}
		return nil
	})
	if err != nil {
		err = fmt.Errorf("tenancy: %w", err)
	}
	return day, month, err
}

// Ledger calls fn for each ledger entry in order, until fn returns an error.
func (s *Store) Ledger(fn func(Entry) error) error {
	return s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketLedger).ForEach(func(_, v []byte) error {
			var e Entry
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("tenancy: ledger entry: %w", err)
			}
			return fn(e)
		})
	})
}

// CreateKey makes and stores a new key for tenant and returns it (the only time the
// key is visible) with its record.
func (s *Store) CreateKey(tenant string, now time.Time) (string, KeyInfo, error) {
	if tenant == "" {
		return "", KeyInfo{}, errors.New("tenancy: empty tenant")
	}
	key, ki := NewKey(tenant, now)
	if err := s.putKey(&ki); err != nil {
		return "", KeyInfo{}, err
	}
	return key, ki, nil
}

func (s *Store) putKey(ki *KeyInfo) error {
	v, err := json.Marshal(ki)
	if err != nil {
		return fmt.Errorf("tenancy: %w", err)
	}
	err = s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketKeys).Put([]byte(ki.ID), v) })
	if err != nil {
		return fmt.Errorf("tenancy: store key: %w", err)
	}
	s.keysMu.Lock()
	c := *ki
	s.keys[ki.ID] = &c
	s.keysMu.Unlock()
	return nil
}

// RevokeKey revokes the key with the given id (or a whole key: its id is taken).
func (s *Store) RevokeKey(id string, now time.Time) (KeyInfo, error) {
	if kid, _, err := ParseKey(id); err == nil {
		id = kid
	}
	s.keysMu.RLock()
	k, ok := s.keys[id]
	var ki KeyInfo
	if ok {
		ki = *k
	}
	s.keysMu.RUnlock()
	if !ok {
		return KeyInfo{}, fmt.Errorf("%w: %q", ErrNoKey, id)
	}
	if ki.Revoked.IsZero() {
		ki.Revoked = now.UTC()
		if err := s.putKey(&ki); err != nil {
			return KeyInfo{}, err
		}
	}
	return ki, nil
}

// Keys lists the stored keys, sorted by tenant then creation.
func (s *Store) Keys() []KeyInfo {
	s.keysMu.RLock()
	out := make([]KeyInfo, 0, len(s.keys))
	for _, k := range s.keys {
		c := *k
		c.Hash = nil
		out = append(out, c)
	}
	s.keysMu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Tenant != out[j].Tenant {
			return out[i].Tenant < out[j].Tenant
		}
		return out[i].Created.Before(out[j].Created)
	})
	return out
}

// Authenticate returns the tenant and key id of an API key. Any failure is ErrBadKey
// (or ErrRevoked wrapping it), never saying which part was wrong.
func (s *Store) Authenticate(key string) (tenant, keyID string, err error) {
	id, secret, err := ParseKey(key)
	if err != nil {
		return "", "", err
	}
	s.keysMu.RLock()
	k, ok := s.keys[id]
	s.keysMu.RUnlock()
	if !ok {
		var dummy KeyInfo // same work as a real comparison
		dummy.ID = id
		dummy.check(secret)
		return "", "", ErrBadKey
	}
	if !k.check(secret) {
		return "", "", ErrBadKey
	}
	if !k.Revoked.IsZero() {
		return "", "", fmt.Errorf("%w (%w)", ErrBadKey, ErrRevoked)
	}
	return k.Tenant, k.ID, nil
}
