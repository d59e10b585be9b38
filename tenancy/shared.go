package tenancy

import (
	"errors"
	"time"

	"github.com/lmlite/lmlite/money"
)

// ErrUnavailable is returned by Admit, Reserve and Settle when the shared state (Redis)
// does not answer and the resource fails closed: money is never spent unbudgeted. The
// gateway answers it with 503.
var ErrUnavailable = errors.New("tenancy: shared quota state unavailable")

// Shared keeps the tenants' rate and concurrency quotas and budgets where several
// processes share them (RedisShared). Every method takes the ticket's id, unique per
// request across processes, and is idempotent per id, so a retried command never
// counts twice. The Tenancy still writes its own ledger of what it settled.
type Shared interface {
	// Admit admits a request, all or nothing: it checks q's rate quotas (tokens/min
	// against promptTokens), takes a concurrency slot for id and reserves total (the
	// request's worst case; 0: nothing) against the day and month budgets of now. It
	// returns the money left (-1: no budget, or unknown). A rejection by a quota is a
	// *LimitError, by a budget ErrInsufficientQuota (with the money left); either way
	// nothing was taken.
	Admit(q *Quota, id string, now time.Time, promptTokens int, total money.Money) (room money.Money, err error)
	// Room is the tenant's money left as last known, before an admission (the choice
	// of a tier); -1: no budget, or unknown.
	Room(q *Quota) money.Money
	// Reserve sets id's reservation to total (0 releases it) against the day and month
	// budgets of now, or returns ErrInsufficientQuota and changes nothing. It returns
	// the money left after it.
	Reserve(q *Quota, id string, now time.Time, total money.Money) (room money.Money, err error)
	// Settle replaces id's reservation by actual, charged to the windows of now, frees
	// its slot and charges tokens to tokens/min. A batch line's ticket (LinePrefix)
	// already settled by another settlement (the line run twice at once) charges
	// nothing: again reports it, and prior is what that settlement charged; a retry of
	// this settlement's own command is not again. A settlement that cannot reach the
	// shared state is retried in the background (the error says so); it cannot tell
	// again yet.
	Settle(q *Quota, id string, now time.Time, actual money.Money, tokens int) (prior money.Money, again bool, err error)
}

// UseShared makes t keep quotas and budgets in sh instead of in-process; call it
// before the first Admit.
func (t *Tenancy) UseShared(sh Shared) { t.shared = sh }

// SharedState is what UseShared set; nil: the state is this process's.
func (t *Tenancy) SharedState() Shared { return t.shared }

// admitShared is AdmitReserve on the shared state: one round trip.
func (t *Tenancy) admitShared(q *Quota, now time.Time, promptTokens int, amount money.Money) (*Ticket, error) {
	id := t.ticketID()
	room, err := t.shared.Admit(q, id, now, promptTokens, amount)
	if err != nil {
		return nil, err
	}
	return &Ticket{sh: t.shared, q: *q, id: id, room: room, reserved: amount, ts: &tenantState{id: q.Tenant, store: t.store}}, nil
}

// ID is the ticket's id: unique per request across the processes sharing a Redis.
func (tk *Ticket) ID() string { return tk.id }

// Rerun reports whether the ticket's settlement found its batch line (AdmitBatchLine)
// charged by another run of the line, in the shared state: Settle then charged
// nothing and wrote its ledger entry as RequestID+RerunSuffix at cost 0. prior is
// what the other run was charged.
func (tk *Ticket) Rerun() (prior money.Money, ok bool) { return tk.prior, tk.rerun }

func (tk *Ticket) reserveShared(now time.Time, amount money.Money) error {
	room, err := tk.sh.Reserve(&tk.q, tk.id, now, tk.reserved+amount)
	if err != nil {
		return err
	}
	tk.reserved += amount
	tk.room = room
	return nil
}

func (tk *Ticket) releaseShared() {
	if tk.reserved == 0 {
		return
	}
	if room, err := tk.sh.Reserve(&tk.q, tk.id, time.Now(), 0); err == nil {
		tk.room = room
		tk.reserved = 0
	}
	// On failure the reservation stays counted: Settle replaces it, or it expires.
}

func (tk *Ticket) settleShared(e Entry) (money.Money, error) {
	if tk.settled {
		return 0, nil
	}
	tk.settled = true
	if (tk.q.DailyBudget > 0 || tk.q.MonthlyBudget > 0) && e.Cost > tk.reserved {
		e.Cost = tk.reserved
	}
	tk.reserved = 0
	tokens := e.PromptTokens + e.CompletionTokens
	if tk.batch { // not charged to the interactive tokens/min (AdmitBatch)
		tokens = 0
	}
	var prior money.Money
	var again bool
	var err error
	if ls, ok := tk.sh.(leaseSettler); ok {
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
	if tk.ts.store != nil {
		if lerr := tk.ts.store.Record(e); lerr != nil {
			return e.Cost, lerr
		}
	}
	return e.Cost, err
}

// leaseSettler is an optional ability of a Shared: Settle that names the lease the
// money came from, for the ledger entry (LeaseShared has it).
type leaseSettler interface {
	SettleLease(q *Quota, id string, now time.Time, actual money.Money, tokens int) (prior money.Money, again bool, lease string, err error)
}

// spentReader is an optional ability of a Shared: the settled spend of every process
// (RedisShared has it).
type spentReader interface {
	Spent(tenant string, now time.Time) (day, month money.Money, err error)
}

// Spent returns the tenant's settled spend in the day and month windows of now: the
// shared state's (every process's) when it keeps budgets and can say, otherwise this
// process's ledger's. With Redis down it returns an error wrapping ErrUnavailable.
func (t *Tenancy) Spent(tenant string, now time.Time) (day, month money.Money, err error) {
	if sr, ok := t.shared.(spentReader); ok {
		return sr.Spent(tenant, now)
	}
	return t.store.Spent(tenant, now)
}
