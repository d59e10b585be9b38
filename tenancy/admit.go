package tenancy

import (
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/lmlite/lmlite/ledger"
	"github.com/lmlite/lmlite/money"
)

// ErrInsufficientQuota is returned by Reserve when a budget has no room for the
// request's worst-case cost.
var ErrInsufficientQuota = errors.New("tenancy: budget exhausted")

// ErrLimited is wrapped by every *LimitError.
var ErrLimited = errors.New("tenancy: rate limited")

// LimitError is a rejection by a rate or concurrency quota.
type LimitError struct {
	Reason     string        // "requests", "tokens" or "concurrency"
	RetryAfter time.Duration // when a retry may succeed
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("tenancy: %s limit reached; retry after %s", e.Reason, e.RetryAfter)
}

func (e *LimitError) Unwrap() error { return ErrLimited }

// Quota is what the tenancy enforces for one tenant: its rate and concurrency limits
// and its budgets, as its effective policy sets them (the gateway copies them from
// policies.Policy). Zero fields mean no limit. Quotas are compared by value: a tenant
// whose quota changes gets fresh rate limiters.
type Quota struct {
	Tenant            string
	RequestsPerSecond float64 // 0: unlimited
	Burst             int     // requests allowed at once above the rate
	TokensPerMinute   int     // prompt + completion tokens; 0: unlimited
	MaxConcurrency    int     // requests in flight; 0: unlimited
	DailyBudget       money.Money
	MonthlyBudget     money.Money
}

// Tenancy admits requests against each tenant's quotas and budgets and records their
// usage. It is safe for concurrent use.
type Tenancy struct {
	store *Store

	shared  Shared // the quotas and budgets: in-process (localQuotas) unless UseShared
	idBase  string // of ticket ids: unique per process start
	tickets atomic.Uint64

	linesMu sync.Mutex              // guards lines
	lines   map[LineKey]money.Money // LoadChargedLines
}

// New returns a Tenancy whose ledger and spend totals live in store.
func New(store *Store) *Tenancy {
	var b [6]byte
	_, _ = rand.Read(b[:])
	base := keyEnc.EncodeToString(b[:]) + "-"
	if store != nil {
		base = TicketPrefix(store.ID()) + base
	}
	return &Tenancy{store: store, shared: newLocalQuotas(store), idBase: base}
}

// TicketPrefix is how the ticket ids of every run of the ledger owner (a store's ID)
// begin, so that its restart finds in Redis the tickets an earlier run left there
// (ReconcileOwner).
func TicketPrefix(owner string) string { return owner + "." }

// newTicket returns a ticket with a new id, unique across processes (its ledger's
// ID, then random per Tenancy, then a count), written in the ticket's own idBuf: one
// allocation for both (the in-process admission's path allocates the ticket and its
// requests/s reservation only).
func (t *Tenancy) newTicket() *Ticket {
	tk := &Ticket{}
	b := append(tk.idBuf[:0], t.idBase...) // (a longer base goes to its own memory)
	b = strconv.AppendUint(b, t.tickets.Add(1), 36)
	tk.id = unsafe.String(unsafe.SliceData(b), len(b)) // b is never written again
	return tk
}

// Store returns the store.
func (t *Tenancy) Store() *Store { return t.store }

// Ticket is one admitted request: it holds a concurrency slot and its reservation
// until Settle.
type Ticket struct {
	sh       Shared       // the Tenancy's quotas and budgets
	local    *tenantState // in-process (localQuotas): the tenant's state, where the ticket counts what it holds (reserved, its slot unless batch)
	q        Quota
	id       string // unique per request across processes; its reservation's name in sh
	store    *Store // the ledger; nil: none
	reserved money.Money
	room     money.Money // the money left at sh's last answer

	settled bool
	batch   bool // AdmitBatch: no slot, no rate token, no tokens/min charge
	refused bool // NotAdmitted: holds nothing; Settle writes the ledger only

	rerun bool        // settled: another run of its batch line was charged (Rerun)
	prior money.Money // with rerun: what that run was charged

	line string // AdmitBatchLine's line: Settle writes it as the entry's Line
	hold uint64 // Hold's seq: Settle's entry settles it

	idBuf [40]byte // id's bytes (newTicket): a store's ID (17), 9 random, a count (base 36, 13 at most: it fits; a longer store ID allocates)
}

// Admit checks the tenant's concurrency, tokens/min (against promptTokens) and
// requests/s quotas at now and takes a concurrency slot. A rejection is a *LimitError.
func (t *Tenancy) Admit(q *Quota, now time.Time, promptTokens int) (*Ticket, error) {
	return t.AdmitReserve(q, now, promptTokens, 0)
}

// AdmitReserve is Admit and Reserve(amount) in one step, all or nothing: a request
// refused by a quota (*LimitError) or a budget (ErrInsufficientQuota) has taken no
// slot, no rate token and no money. With shared state (Redis) it is one round trip.
// The quotas are checked before the money: a request both rate-limited and over
// budget is rate-limited.
func (t *Tenancy) AdmitReserve(q *Quota, now time.Time, promptTokens int, amount money.Money) (*Ticket, error) {
	tk := t.newTicket()
	var room money.Money
	var err error
	if l, ok := t.shared.(*localQuotas); ok {
		tk.local, room, err = l.admit(q, now, promptTokens, amount)
	} else {
		room, err = t.shared.Admit(q, tk.id, now, promptTokens, amount)
	}
	if err != nil {
		return nil, err
	}
	tk.sh, tk.q, tk.store, tk.room, tk.reserved = t.shared, *q, t.store, room, amount
	return tk, nil
}

// Remaining is the tenant's money left for new reservations at now, before an
// admission (to choose what to reserve): the smaller of the day and month rooms; -1
// when it has no budget. With shared state it is the money left at the shared state's
// last answer to this process (-1 before the first); AdmitReserve has the final word.
func (t *Tenancy) Remaining(q *Quota, now time.Time) money.Money {
	if r, ok := t.shared.(roomAt); ok {
		return r.RoomAt(q, now)
	}
	return t.shared.Room(q)
}

// roomAt is an optional ability of a Shared: the money left computed at now, live
// (localQuotas has it), rather than as last known.
type roomAt interface {
	RoomAt(q *Quota, now time.Time) money.Money
}

// NotAdmitted returns a ticket for a request refused before its admission (by a
// quota, a budget or its routing): it holds nothing, and its Settle only writes the
// ledger entry.
func (t *Tenancy) NotAdmitted(q *Quota) *Ticket {
	return &Ticket{sh: t.shared, q: *q, store: t.store, batch: true, refused: true}
}

// AdmitBatch admits a batch line: the tenant's budgets apply to it as to any request
// (Reserve, Settle), but not its requests/s, tokens/min and concurrency quotas, which
// stay the interactive traffic's: a batch line takes no slot and no rate token, and
// its tokens are not charged to tokens/min. Batch lines are bounded instead by their
// job's and the process's batch concurrency (package batch).
func (t *Tenancy) AdmitBatch(q *Quota, now time.Time) (*Ticket, error) {
	return t.AdmitBatchLine(q, now, "")
}

// LinePrefix begins the shared-state ticket id of a batch line (AdmitBatchLine).
const LinePrefix = "line:"

// RerunSuffix ends the request id of the ledger entry of a batch line's run that is
// charged nothing because another run of the line was (Ticket.Rerun).
const RerunSuffix = "-rerun"

// AsRerun is e as the ledger records a run of a batch line that is charged nothing
// because another run of the line was: its request id + RerunSuffix, at cost 0.
func AsRerun(e Entry) Entry {
	e.RequestID += RerunSuffix
	e.Cost = 0
	return e
}

// AdmitBatchLine is AdmitBatch for the batch line with request id line (stable over
// the line's runs): with shared state (Redis) its ticket is LinePrefix + line, so
// the line is settled once however many times it runs (a worker that died after
// settling, and the line reclaimed by another process): a later settlement of it
// charges nothing and gives its reservation back, and its ledger entry is
// RequestID+RerunSuffix at 0 (Ticket.Rerun). LineSettled tells a run before it starts
// whether that happened. line "" is AdmitBatch.
func (t *Tenancy) AdmitBatchLine(q *Quota, now time.Time, line string) (*Ticket, error) {
	bq := *q
	bq.RequestsPerSecond, bq.Burst, bq.TokensPerMinute, bq.MaxConcurrency = 0, 0, 0, 0
	var tk *Ticket
	if line == "" {
		tk = t.newTicket()
	} else {
		tk = &Ticket{id: LinePrefix + line}
	}
	id := tk.id
	tk.sh, tk.q, tk.store, tk.room, tk.batch, tk.line = t.shared, bq, t.store, -1, true, line
	if l, ok := t.shared.(*localQuotas); ok {
		tk.local = l.tenant(bq.Tenant)
	}
	if bq.DailyBudget > 0 || bq.MonthlyBudget > 0 {
		var room money.Money
		var err error
		if tk.local != nil {
			room, err = tk.local.reserve(&bq, now, 0, 0) // the money left, for tier selection
		} else {
			room, err = t.shared.Reserve(&bq, id, now, 0)
		}
		if err != nil {
			return nil, err
		}
		tk.room = room
	}
	return tk, nil
}

// settledReader is an optional ability of a Shared: what a ticket's settlement
// charged (RedisShared has it).
type settledReader interface {
	Settled(tenant, id string) (money.Money, bool, error)
}

// LineKey names a batch line: its tenant and its id ("<batch id>-<line>").
type LineKey struct{ Tenant, Line string }

// LoadChargedLines reads the ledger once, at start, for the batch lines it holds a
// settlement of (Store.ChargedLines), for LineCharged. Call it before lines run.
func (t *Tenancy) LoadChargedLines() error {
	if t.store == nil {
		return nil
	}
	m, err := t.store.ChargedLines()
	if err != nil {
		return err
	}
	t.linesMu.Lock()
	t.lines = m
	t.linesMu.Unlock()
	return nil
}

// LineCharged reports whether the batch line of tenant was charged before, and what:
// by an entry of the ledger read by LoadChargedLines (a run before the restart), or
// in the shared state by any process (LineSettled). Only entries a batch line's
// ticket settled count (their Line, with their Tenant): a request id, which a client
// may have chosen in an older version, is never taken for a line's.
func (t *Tenancy) LineCharged(tenant, line string) (money.Money, bool, error) {
	t.linesMu.Lock()
	c, ok := t.lines[LineKey{tenant, line}]
	t.linesMu.Unlock()
	if ok {
		return c, true, nil
	}
	return t.LineSettled(tenant, line)
}

// LineSettled reports whether the batch line with request id line was settled in
// the shared state (by any process, AdmitBatchLine) and what it was charged. Without
// shared state it reports false: a process's own ledger says what it charged.
func (t *Tenancy) LineSettled(tenant, line string) (money.Money, bool, error) {
	if sr, ok := t.shared.(settledReader); ok {
		return sr.Settled(tenant, LinePrefix+line)
	}
	return 0, false, nil
}

// tokenChecker is an optional ability of a Shared: the tokens/min check of
// Ticket.CheckTokens.
type tokenChecker interface {
	CheckTokens(q *Quota, now time.Time, promptTokens int) error
}

// CheckTokens checks the tokens/min quota against promptTokens for a ticket already
// admitted (Admit with promptTokens 0: its slot and requests/s token were taken
// before the request's body was read, so that a refused request is not parsed). It
// takes nothing; a refusal is a *LimitError, and the caller settles the ticket, which
// frees the slot (the requests/s token stays spent, as for any refusal after
// admission). With shared state it is checked there when the Shared can
// (tokenChecker); otherwise the tokens/min quota is enforced by Admit's check and the
// settlements' charges alone.
func (tk *Ticket) CheckTokens(now time.Time, promptTokens int) error {
	if tk.batch || tk.refused {
		return nil
	}
	if tk.local != nil { // in-process: the tenant's state without the tenants map's lookup
		return tk.local.checkTokens(&tk.q, now, promptTokens)
	}
	if tc, ok := tk.sh.(tokenChecker); ok {
		return tc.CheckTokens(&tk.q, now, promptTokens)
	}
	return nil
}

// Tenant is the ticket's tenant.
func (tk *Ticket) Tenant() string { return tk.q.Tenant }

// Remaining is the tenant's money left for new reservations at now: the smaller of the
// day and month rooms; -1 when it has no budget. It is computed at now where the
// quotas can (roomAt: in-process), else the shared state's last answer to this
// ticket (Admit or Reserve).
func (tk *Ticket) Remaining(now time.Time) money.Money {
	if tk.local != nil { // in-process: the tenant's state without the tenants map's lookup
		return tk.local.roomAt(&tk.q, now)
	}
	if r, ok := tk.sh.(roomAt); ok {
		return r.RoomAt(&tk.q, now)
	}
	return tk.room
}

// Reserve reserves amount (the request's worst-case cost) against every budget, or
// returns ErrInsufficientQuota and reserves nothing. A ticket may reserve more than
// once (the sum is settled).
func (tk *Ticket) Reserve(now time.Time, amount money.Money) error {
	room, err := tk.reserve(now, tk.reserved+amount)
	if err != nil {
		return err
	}
	tk.reserved += amount
	tk.room = room
	return nil
}

// Release returns the ticket's reservation to the budgets (an attempt the engine
// refused, before the request tries another model); the ticket stays admitted and may
// reserve again.
func (tk *Ticket) Release() {
	if tk.reserved == 0 {
		return
	}
	if room, err := tk.reserve(time.Now(), 0); err == nil {
		tk.room = room
		tk.reserved = 0
	}
	// On failure the reservation stays counted: Settle replaces it, or it expires.
}

// reserve sets the ticket's reservation to total: in the tenant's state it holds
// in-process (Ticket.local), else in the Shared by its id.
func (tk *Ticket) reserve(now time.Time, total money.Money) (money.Money, error) {
	if tk.local != nil {
		return tk.local.reserve(&tk.q, now, tk.reserved, total)
	}
	return tk.sh.Reserve(&tk.q, tk.id, now, total)
}

// Hold makes the ticket's reservation durable as its request starts running: the
// store logs it (Store.HoldAsync: it returns at once, and a group commit writes it
// beside the request's first steps, so the request never waits for it) with what e
// says of the request (RequestID, ClientRequestID, KeyID, Model, Tier, PromptTokens)
// and the money reserved, and Settle's entry settles it. If the process dies in between (kill -9 mid-generation), the next start charges
// the request its reservation (SettleInterrupted). Call it once, when the request
// starts running (a later call does nothing). A batch line's ticket is not held: a
// line interrupted by a crash runs again after the restart, and that run is charged.
// It costs one ledger group commit (shared with concurrent writers; fsynced with
// SyncFsync, as every group is), off the request's path.
func (tk *Ticket) Hold(now time.Time, e Entry) error {
	if tk.hold != 0 || tk.line != "" || tk.refused || tk.store == nil {
		return nil
	}
	h := Hold{Time: now, RequestID: e.RequestID, ClientRequestID: e.ClientRequestID, Tenant: tk.q.Tenant, KeyID: e.KeyID,
		Model: e.Model, Tier: e.Tier, PromptTokens: e.PromptTokens, Reserved: tk.reserved}
	if _, local := tk.sh.(*localQuotas); !local {
		h.Ticket = tk.id // in-process, the reservation died with the process
	}
	seq, err := tk.store.HoldAsync(h)
	if err != nil {
		return err
	}
	tk.hold = seq
	return nil
}

// FinishInterrupted is the finish reason of the entry that charges a request
// interrupted by the death of its process (SettleInterrupted).
const FinishInterrupted = "interrupted"

// SettleInterrupted charges the requests a dead process left held (Store.Interrupted:
// a Hold without its settlement, e.g. kill -9 during a stream) and returns how many.
// Each is charged its reservation, its worst case: the process recorded no progress,
// and the worst case is at least the prompt and every token it produced. Its ledger
// entry (status 500, finish reason FinishInterrupted) is dated at its hold, in that
// day's and month's spend; with shared state the ticket is settled there too
// (idempotent per ticket, so a settlement that reached Redis before the death is not
// charged twice), quota giving each tenant's Quota. Call it at start, before serving.
func (t *Tenancy) SettleInterrupted(quota func(tenant string) *Quota) (int, error) {
	if t.store == nil {
		return 0, nil
	}
	hs := t.store.Interrupted()
	for _, h := range hs {
		e := Entry{Time: h.Time, RequestID: h.RequestID, ClientRequestID: h.ClientRequestID, Tenant: h.Tenant, KeyID: h.KeyID,
			Model: h.Model, Tier: h.Tier, Status: 500, Finish: FinishInterrupted, PromptTokens: h.PromptTokens,
			Cost: h.Reserved, Hold: h.Seq}
		if h.Ticket != "" {
			q := quota(h.Tenant)
			if q == nil {
				q = &Quota{Tenant: h.Tenant}
			}
			if _, again, err := t.shared.Settle(q, h.Ticket, h.Time, h.Reserved, 0); err == nil && again {
				e = AsRerun(e)
			}
			// An error: the settlement is queued for retry (RedisShared), as Settle's.
		}
		if err := t.store.Record(e); err != nil {
			return 0, err
		}
	}
	t.store.mu.Lock()
	t.store.interrupted = nil
	t.store.mu.Unlock()
	return len(hs), nil
}

// Reserved is what the ticket holds reserved.
func (tk *Ticket) Reserved() money.Money { return tk.reserved }

// Settle ends the request: it replaces the reservation by e.Cost (capped at the
// reservation when the tenant has a budget, so a ceiling is never overrun), charges
// the tokens to the tokens/min quota, frees the concurrency slot, and writes e to the
// ledger, returning when it is committed. It returns the cost charged. Settle more
// than once is a no-op.
func (tk *Ticket) Settle(e Entry) (money.Money, error) { return tk.SettleWith(e, nil) }

// SettleWith is Settle whose ledger write also carries side (ledger.Side: a stored
// response, one write and one sync for both). side is not written when the ticket
// writes no entry (refused before admission, settled before, no store): its owner
// sees no SideWritten and writes it alone.
func (tk *Ticket) SettleWith(e Entry, side ledger.Side) (money.Money, error) {
	e.Line = tk.line // only a batch line's ticket marks its entry as the line's
	e.Hold = tk.hold
	if tk.refused {
		return tk.settleRefused(e)
	}
	if tk.settled {
		return 0, nil
	}
	tk.settled = true
	if (tk.q.DailyBudget > 0 || tk.q.MonthlyBudget > 0) && e.Cost > tk.reserved {
		e.Cost = tk.reserved
	}
	held := tk.reserved
	tk.reserved = 0
	tokens := e.PromptTokens + e.CompletionTokens
	if tk.batch { // not charged to the interactive tokens/min (AdmitBatch)
		tokens = 0
	}
	var prior money.Money
	var again bool
	var err error
	if tk.local != nil { // in-process: no other settlement of a batch line to find
		tk.local.settle(e.Time, held, !tk.batch, e.Cost, tokens)
	} else if ls, ok := tk.sh.(leaseSettler); ok {
		prior, again, e.Lease, err = ls.SettleLease(&tk.q, tk.id, e.Time, e.Cost, tokens)
	} else {
		prior, again, err = tk.sh.Settle(&tk.q, tk.id, e.Time, e.Cost, tokens)
	}
	if again && e.Cost > 0 {
		// Another run of the batch line was charged for it: this run's entry charges
		// nothing (the gateway's convention for a line run again). A settlement queued
		// for retry (err) cannot know yet and is recorded at e.Cost, as one that
		// charged; lmlite ledger verify reconciles the ledgers with Redis then.
		e = AsRerun(e)
		tk.rerun, tk.prior = true, prior
	}
	if e.Tenant == "" {
		e.Tenant = tk.q.Tenant
	}
	if tk.store != nil {
		if lerr := tk.store.record(e, side); lerr != nil {
			return e.Cost, lerr
		}
	}
	return e.Cost, err
}

// settleRefused writes the ledger entry of a request refused before its admission.
func (tk *Ticket) settleRefused(e Entry) (money.Money, error) {
	if tk.settled {
		return 0, nil
	}
	tk.settled = true
	e.Cost = 0
	if e.Tenant == "" {
		e.Tenant = tk.q.Tenant
	}
	if tk.store == nil {
		return 0, nil
	}
	return 0, tk.store.RecordRefusal(e)
}

// RetryAfterSeconds rounds a wait up to whole seconds for a Retry-After header (≥ 1).
func RetryAfterSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

// InFlight is the number of the tenant's admitted requests not yet settled, as this
// process counts them (in-process quotas); 0 when the quotas cannot say.
func (t *Tenancy) InFlight(tenant string) int {
	if f, ok := t.shared.(inFlighter); ok {
		return f.InFlight(tenant)
	}
	return 0
}

// inFlighter is an optional ability of a Shared: the tenant's requests in flight.
type inFlighter interface {
	InFlight(tenant string) int
}
