package tenancy

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/lmlite/lmlite/ledger"
	"github.com/lmlite/lmlite/money"
	"github.com/lmlite/lmlite/usage"
)

// SyncMode says how durable a committed ledger group is before Settle returns
// (package ledger's).
type SyncMode = ledger.SyncMode

const (
	// SyncFsync fsyncs every group's log record: it survives power loss.
	SyncFsync = ledger.SyncFsync
	// SyncProcess writes every group's log record to the OS without fsync: it survives
	// the process being killed, not the machine losing power.
	SyncProcess = ledger.SyncProcess
)

// Options configure a Store. The zero value is SyncFsync with a 1s lock timeout.
type Options struct {
	Sync        SyncMode
	LockTimeout time.Duration // how long Open waits for another process's lock; 0: 1s
	// ApplyEvery is how often logged entries are applied to the database (and the log
	// emptied); 0: 200ms. ApplyEntries applies sooner when that many are waiting; 0: 4096.
	ApplyEvery   time.Duration
	ApplyEntries int
	// Side keeps the side records the ledger's writes carry (ledger.SideOwner:
	// respstore's Bolt in ledger mode, the stored responses; Ticket.SettleWith).
	Side ledger.SideOwner

	wrapSegment func(*os.File) ledger.SegmentFile // tests: a fault-injecting layer over each log segment
}

// ErrLocked is returned by Open when another process holds the store.
var ErrLocked = errors.New("tenancy: store is in use by another process")

// ErrClosed is returned after Close.
var ErrClosed = ledger.ErrClosed

var (
	bucketKeys   = []byte("keys")
	bucketLedger = []byte("ledger")
	bucketSpend  = []byte("spend")
	bucketMeta   = []byte("meta")
	bucketHolds  = []byte("holds")        // the open holds, by seq (Hold)
	keyApplied   = []byte("applied_seq")  // the last ledger seq applied to the database
	keyHoldSeq   = []byte("applied_hold") // the last hold seq applied to the database
	keyID        = []byte("id")           // the store's random id, made once (ID)
)

// Entry is one request's usage in the ledger.
type Entry struct {
	Seq  uint64    `json:"seq"` // assigned by the store, increasing
	Time time.Time `json:"time"`
	// RequestID is the server's id of the request, never a client's: "req_…" for an
	// interactive request, "<batch id>-<line>" (+ RerunSuffix) for a batch line's run.
	// (Entries written before client_request_id existed may hold a client's id here.)
	RequestID string `json:"request_id"`
	// ClientRequestID is the client's X-Request-Id, kept as it came (a label only:
	// nothing is ever matched by it).
	ClientRequestID string `json:"client_request_id,omitempty"`
	Tenant          string `json:"tenant"`
	// Line is set by Settle, from the ticket, on the entry of a batch line's run
	// (AdmitBatchLine): the line's id, "<batch id>-<line>". It is how a restart finds
	// the lines already charged (ChargedLines), with Tenant: never by RequestID.
	Line             string        `json:"batch_line,omitempty"`
	KeyID            string        `json:"key_id,omitempty"`
	Model            string        `json:"model,omitempty"`
	Adapter          string        `json:"adapter,omitempty"` // the LoRA adapter applied over Model (the request named it as its model); "": none
	Tier             string        `json:"tier,omitempty"`
	Status           int           `json:"status"`
	Finish           string        `json:"finish_reason,omitempty"`
	PromptTokens     int           `json:"prompt_tokens"`
	CompletionTokens int           `json:"completion_tokens"`
	Cost             money.Money   `json:"cost_nano_usd"`
	Latency          time.Duration `json:"latency_ns"`
	TTFT             time.Duration `json:"ttft_ns,omitempty"`
	CachedTokens     int           `json:"cached_tokens,omitempty"` // prompt tokens served from the prefix cache
	ColdStart        time.Duration `json:"cold_start_ns,omitempty"` // the wait for its model's load or worker start, if it had one
	GrammarTime      time.Duration `json:"grammar_ns,omitempty"`    // the time its output's grammar masks took to compute (engine.Usage.GrammarTime)
	Refused          string        `json:"refused,omitempty"`       // why it was refused: a usage.Reason's name
	// NotAdmitted marks the entry of a request refused before its admission (a rate,
	// concurrency or budget quota, a bad request): it counts as a refusal in the usage
	// rollups, not as a request. Its Status is the refusal's, its Cost 0.
	NotAdmitted bool `json:"not_admitted,omitempty"`
	// Count is how many refusals before admission a NotAdmitted entry stands for: they
	// are coalesced per tenant, key, model, tier, reason, status and minute, and one
	// entry per flush is written (refusals.go); its RequestID and Time are the first
	// one's. 0 means 1 (entries written before coalescing).
	Count int    `json:"count,omitempty"`
	Hold  uint64 `json:"hold,omitempty"` // the hold (Ticket.Hold) this entry settles; 0: none
	// Lease is the lease (LeaseShared) the entry's money was settled from, if any: how
	// a lease whose holder died is reconciled from its ledger (LeaseSums).
	Lease string `json:"lease,omitempty"`
	// User and SafetyIdentifier are the request's end-user identifiers (user,
	// safety_identifier), keyed hashes only (gateway/identifiers.go), never as given.
	User             string `json:"user_hash,omitempty"`
	SafetyIdentifier string `json:"safety_identifier_hash,omitempty"`
}

// Hold is a request's reservation made durable before it runs (Ticket.Hold): what
// the ledger needs to charge it if the process dies before its settlement. The entry
// that settles it names it (Entry.Hold); one left open when a store is opened is from
// a process that died mid-request (Store.Interrupted, Tenancy.SettleInterrupted).
type Hold struct {
	Seq             uint64      `json:"hold"` // assigned by the store, increasing (its own sequence, not the entries')
	Time            time.Time   `json:"time"`
	RequestID       string      `json:"request_id"`
	ClientRequestID string      `json:"client_request_id,omitempty"`
	Tenant          string      `json:"tenant"`
	KeyID           string      `json:"key_id,omitempty"`
	Model           string      `json:"model,omitempty"`
	Tier            string      `json:"tier,omitempty"`
	PromptTokens    int         `json:"prompt_tokens"`
	Reserved        money.Money `json:"reserved_nano_usd"` // the request's worst case, reserved
	Ticket          string      `json:"ticket,omitempty"`  // its ticket in the shared state (Redis), if any
}

// event is e as the usage rollups count it.
func (e *Entry) event() usage.Event {
	return usage.Event{
		Time: e.Time, RequestID: e.RequestID, Tenant: e.Tenant, Model: e.Model, Tier: e.Tier, Adapter: e.Adapter, Admitted: !e.NotAdmitted,
		Status: e.Status, Refused: usage.ParseReason(e.Refused), Count: e.Count, InputTokens: e.PromptTokens,
		OutputTokens: e.CompletionTokens, CachedTokens: e.CachedTokens, Cost: e.Cost, Latency: e.Latency, TTFT: e.TTFT,
		ColdStart: e.ColdStart, GrammarTime: e.GrammarTime,
	}
}

// Store is the embedded store of keys, the usage ledger and spend totals: a bbolt
// file and, beside it, the ledger's write-ahead log (segments path + ".wal.N"). It is
// safe for concurrent use.
//
// Ledger entries are acknowledged once their group's record is in the log (written,
// and fsynced with SyncFsync): one small append per group, however many entries it
// holds (ledger.go). A background goroutine applies logged entries to the database in
// large batches (one transaction, fsynced) and then deletes their log segments; Open
// replays segments left by a killed process, skipping entries the database already
// holds (by seq).
type Store struct {
	db   *bolt.DB
	path string
	opts Options
	id   string // ID

	keys Keys // the store's own (boltKeys, its keys bucket), or shared (ShareKeys)

	log *ledger.Log
	// seq and hseq are the last entry and hold seqs assigned; after Open, guarded by
	// the log's append lock (they are assigned in Log.Append's callbacks).
	seq, hseq uint64
	valBuf    []byte // scratch for the database values of a batch (under the log's apply lock)

	mu          sync.Mutex // guards interrupted
	interrupted []Hold     // the holds open at Open (Interrupted)

	// The usage events of the entries logged since a reader of UsageSince last asked
	// (kept once one asks, so that it follows the ledger without reading it back):
	// every entry logged with seq > tailFrom is in tail, in seq order.
	tailMu      sync.Mutex // guards what follows; taken inside the log's write lock
	tailOn      bool
	tail        []seqEvent
	tailFrom    uint64
	lastWritten uint64 // seq of the last entry of the last group written (or failed)

	// rollups are the in-memory rollups following the ledger (FollowRollups): Written
	// adds each group's events to them as it is written, before its writers return.
	rollups []*usage.Memory // guarded by tailMu

	// The refusals before admission counted but not yet in the ledger (refusals.go).
	refMu      sync.Mutex // guards what follows; taken inside tailMu and the log's append lock
	refPending map[refusalKey]*Entry
	refRollups int // len(rollups) when the last one was registered (followPendingLocked)
	refClosed  bool
	refStop    chan struct{} // the flusher's; nil: not started
	refDone    chan struct{}
	refOn      atomic.Bool // refPending may be non-empty
}

// Open opens (creating if needed) the store at path, replaying the ledger log.
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
	s := &Store{db: db, path: path, opts: opts}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketKeys, bucketLedger, bucketSpend, bucketMeta, bucketHolds} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		if v := tx.Bucket(bucketMeta).Get(keyApplied); len(v) == 8 {
			s.seq = binary.BigEndian.Uint64(v)
		}
		if v := tx.Bucket(bucketMeta).Get(keyHoldSeq); len(v) == 8 {
			s.hseq = binary.BigEndian.Uint64(v)
		}
		meta := tx.Bucket(bucketMeta)
		if v := meta.Get(keyID); len(v) > 0 {
			s.id = string(v)
		} else {
			var b [8]byte
			if _, err := rand.Read(b[:]); err != nil {
				return err
			}
			s.id = hex.EncodeToString(b[:])
			if err := meta.Put(keyID, []byte(s.id)); err != nil {
				return err
			}
		}
		if tx.Bucket(usage.BoltBucket) == nil {
			if err := migrateRollups(tx); err != nil {
				return err
			}
		}
		bk, err := loadBoltKeys(db, tx)
		s.keys = bk
		return err
	})
	if err == nil {
		s.log, err = ledger.Open(db, path, ledger.Options{Sync: opts.Sync, ApplyEvery: opts.ApplyEvery,
			ApplyEntries: opts.ApplyEntries, WrapSegment: opts.wrapSegment, Side: opts.Side}, &logOwner{s: s})
	}
	if err == nil { // every hold still open was left by a process that died mid-request
		err = db.View(func(tx *bolt.Tx) error {
			return tx.Bucket(bucketHolds).ForEach(func(_, v []byte) error {
				var h Hold
				if err := json.Unmarshal(v, &h); err != nil {
					return fmt.Errorf("hold: %w", err)
				}
				s.interrupted = append(s.interrupted, h)
				return nil
			})
		})
	}
	if err != nil {
		if s.log != nil {
			s.log.Close()
		}
		db.Close()
		return nil, fmt.Errorf("tenancy: open %s: %w", path, err)
	}
	s.tailMu.Lock()
	s.lastWritten = s.seq // what was logged before is in the database
	s.tailMu.Unlock()
	return s, nil
}

// Close logs what is queued, applies it, stops the log and closes the files.
func (s *Store) Close() error {
	err := s.closeRefusals()
	if e := s.log.Close(); err == nil || errors.Is(err, ledger.ErrClosed) {
		err = e
	}
	if e := s.db.Close(); err == nil {
		err = e
	}
	return err
}

// Interrupted returns the holds that were open when the store was opened: requests
// of a process that died after their Hold and before their settlement. They stay
// open until entries naming them are recorded (Tenancy.SettleInterrupted does).
func (s *Store) Interrupted() []Hold {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.interrupted)
}

// Commits is the number of ledger groups logged so far.
func (s *Store) Commits() int64 { return s.log.Commits() }

// Path is the store's file.
func (s *Store) Path() string { return s.db.Path() }

// windows returns the UTC day (yyyymmdd) and month (yyyymm) of t.
func windows(t time.Time) (day, month int) {
	y, m, d := t.UTC().Date()
	return y*10000 + int(m)*100 + d, y*100 + int(m)
}

func spendKey(tenant string, kind byte, window int) string {
	return tenant + "\x00" + string(kind) + strconv.Itoa(window)
}

// Spent returns the settled spend of tenant in the day and month windows of now.
func (s *Store) Spent(tenant string, now time.Time) (day, month money.Money, err error) {
	if err := s.sync(); err != nil {
		return 0, 0, fmt.Errorf("tenancy: %w", err)
	}
	d, m := windows(now)
	err = s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSpend)
		if v := b.Get([]byte(spendKey(tenant, 'd', d))); len(v) == 8 {
			day = money.Money(binary.BigEndian.Uint64(v))
		}
		if v := b.Get([]byte(spendKey(tenant, 'm', m))); len(v) == 8 {
			month = money.Money(binary.BigEndian.Uint64(v))
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
	if err := s.sync(); err != nil {
		return fmt.Errorf("tenancy: %w", err)
	}
	return s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketLedger).ForEach(func(_, v []byte) error {
			return ledgerValue(v, fn)
		})
	})
}

// ChargedLines returns the batch lines the ledger holds a settlement of, with what
// they were charged: every entry a batch line's ticket wrote (Entry.Line, which only
// AdmitBatchLine's tickets set), by its tenant and line, except those refused for load
// or money (429, 503), which charged nothing and leave the line to run again.
//
// Entries written before Line existed are not taken for a line's, whatever their
// request id: that id may be a client's X-Request-Id, which a tenant can make look like
// a line's. A line charged by such an older version and interrupted before its result
// was committed is charged again when it runs after the upgrade (at most the lines
// that were running when that version stopped), never run for free.
func (s *Store) ChargedLines() (map[LineKey]money.Money, error) {
	out := map[LineKey]money.Money{}
	err := s.Ledger(func(e Entry) error {
		if e.Line != "" && e.Status != 429 && e.Status != 503 {
			out[LineKey{e.Tenant, e.Line}] += e.Cost
		}
		return nil
	})
	return out, err
}

// migrateRollups makes the usage rollups of a store written before they were kept
// in it, from its ledger: once, in the transaction that creates their bucket.
func migrateRollups(tx *bolt.Tx) error {
	if _, err := tx.CreateBucket(usage.BoltBucket); err != nil {
		return err
	}
	var evs []usage.Event
	err := tx.Bucket(bucketLedger).ForEach(func(_, v []byte) error {
		return ledgerValue(v, func(e Entry) error {
			evs = append(evs, e.event())
			if len(evs) == 1<<16 {
				err := usage.PutBolt(tx, evs)
				evs = evs[:0]
				return err
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	return usage.PutBolt(tx, evs)
}

// LoadRollups adds the usage rollups of every ledger entry acknowledged so far to m
// (those past their retention at now left out) and returns the seq of the last entry
// they count: how a server starts its rollups without reading the ledger, then
// follows it from that seq (FollowRollups, or usage.Redis through UsageSince).
func (s *Store) LoadRollups(m *usage.Memory, now time.Time) (seq uint64, err error) {
	if err := s.sync(); err != nil {
		return 0, fmt.Errorf("tenancy: %w", err)
	}
	err = s.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketMeta).Get(keyApplied); len(v) == 8 {
			seq = binary.BigEndian.Uint64(v)
		}
		return usage.LoadBolt(tx, m, now)
	})
	return seq, err
}

// FollowRollups makes m the store's in-memory usage rollups: it loads those kept
// beside the ledger (LoadRollups), then counts every entry logged from then on as its
// group is written, before the entry's writer returns, so a caller sees its own
// requests and nothing waits in memory for a query. Each entry is counted once, in
// seq order: those up to the rollups loaded from the database, those logged between
// that load and following read back from the ledger, and the rest as they are
// written. Call it before serving (a server's rollups; several may follow).
func (s *Store) FollowRollups(m *usage.Memory, now time.Time) error {
	loaded, err := s.LoadRollups(m, now)
	if err != nil {
		return err
	}
	s.tailMu.Lock()
	s.rollups = append(s.rollups, m)
	s.followPendingLocked(m)
	upTo := s.lastWritten // Written counts every group after it
	s.tailMu.Unlock()
	if upTo <= loaded {
		return nil
	}
	err = s.usageFromLedger(loaded, func(seq uint64, e usage.Event) error {
		if seq > upTo {
			return errGapFilled
		}
		m.Add(e)
		return nil
	})
	if errors.Is(err, errGapFilled) {
		err = nil
	}
	return err
}

var errGapFilled = errors.New("gap filled")

// ID is the store's own id, random, made when the store was created: with a seq, it
// names a ledger entry among every process's ledgers.
func (s *Store) ID() string { return s.id }

// seqEvent is a logged entry's usage event.
type seqEvent struct {
	seq uint64
	ev  usage.Event
}

// tailMax is the most events kept for UsageSince: past it (the reader has fallen
// behind, e.g. Redis is down) they are dropped and the reader reads the ledger back.
const tailMax = 1 << 16

// tailLocked keeps g's events for UsageSince. s.tailMu is held; g was logged.
func (s *Store) tailLocked(g *group) {
	if !s.tailOn {
		return
	}
	if len(s.tail)+len(g.evs) > tailMax {
		s.tailOn, s.tail = false, nil
		return
	}
	for i := range g.evs { // a group's entries have consecutive seqs
		s.tail = append(s.tail, seqEvent{g.first + uint64(i), g.evs[i]})
	}
}

// UsageSince calls fn, in seq order, with the seq and usage event of every ledger
// entry acknowledged so far whose seq is after seq, until fn returns an error (which
// it returns). It is how usage.Redis follows the ledger: the events logged since its
// last call come from memory (the store keeps them from the first call on, and drops
// those at or before the seq it is asked for); otherwise it reads the ledger's chunks
// from the one holding seq+1 on.
func (s *Store) UsageSince(seq uint64, fn func(seq uint64, e usage.Event) error) error {
	s.tailMu.Lock()
	if s.tailOn && seq >= s.tailFrom {
		i, _ := slices.BinarySearchFunc(s.tail, seq+1, func(x seqEvent, seq uint64) int { return cmp.Compare(x.seq, seq) })
		// The caller has the first i: move the rest to the front, keeping the slice's
		// capacity, so that a reader that keeps up (usage.Redis) lets the
		// writers append into the same memory.
		n := copy(s.tail, s.tail[i:])
		clear(s.tail[n:])
		s.tail, s.tailFrom = s.tail[:n], seq
		var chunk [256]seqEvent // copied out in chunks: fn runs without the lock
		for {
			i, _ := slices.BinarySearchFunc(s.tail, seq+1, func(x seqEvent, seq uint64) int { return cmp.Compare(x.seq, seq) })
			n := copy(chunk[:], s.tail[i:])
			s.tailMu.Unlock()
			for _, x := range chunk[:n] {
				if err := fn(x.seq, x.ev); err != nil {
					return err
				}
				seq = x.seq
			}
			if n < len(chunk) {
				return nil
			}
			s.tailMu.Lock()
			if !s.tailOn || seq < s.tailFrom { // dropped meanwhile: read the rest back
				s.tailMu.Unlock()
				return s.usageFromLedger(seq, fn)
			}
		}
	}
	if !s.tailOn { // from now on keep the events logged after the last group written
		s.tailOn, s.tail, s.tailFrom = true, nil, s.lastWritten
	}
	s.tailMu.Unlock()
	return s.usageFromLedger(seq, fn)
}

// usageFromLedger is UsageSince reading the ledger back.
func (s *Store) usageFromLedger(seq uint64, fn func(seq uint64, e usage.Event) error) error {
	if err := s.sync(); err != nil {
		return fmt.Errorf("tenancy: %w", err)
	}
	return s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketLedger).Cursor()
		var kb [8]byte
		binary.BigEndian.PutUint64(kb[:], seq+1)
		k, v := c.Seek(kb[:])
		if k == nil {
			k, v = c.Last() // seq+1 may be inside the last chunk
		} else if !bytes.Equal(k, kb[:]) { // or inside the chunk before
			if pk, pv := c.Prev(); pk != nil {
				k, v = pk, pv
			} else {
				k, v = c.First()
			}
		}
		for ; k != nil; k, v = c.Next() {
			err := ledgerValue(v, func(e Entry) error {
				if e.Seq <= seq {
					return nil
				}
				return fn(e.Seq, e.event())
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// ShareKeys makes the store's key methods use k (RedisKeys: the keys every process
// shares) instead of its own keys bucket; call it before serving.
func (s *Store) ShareKeys(k Keys) { s.keys = k }

// CreateKey makes and stores a new key for tenant and returns it (the only time the
// key is visible) with its record.
func (s *Store) CreateKey(tenant string, now time.Time) (string, KeyInfo, error) {
	return s.keys.CreateKey(tenant, now)
}

// RevokeKey revokes the key with the given id (or a whole key: its id is taken).
func (s *Store) RevokeKey(id string, now time.Time) (KeyInfo, error) {
	return s.keys.RevokeKey(id, now)
}

// Keys lists the stored keys, sorted by tenant then creation.
func (s *Store) Keys() []KeyInfo { return s.keys.Keys() }

// Authenticate returns the tenant and key id of an API key. Any failure is ErrBadKey
// (or ErrRevoked wrapping it), never saying which part was wrong.
func (s *Store) Authenticate(key string) (tenant, keyID string, err error) {
	return s.keys.Authenticate(key)
}
