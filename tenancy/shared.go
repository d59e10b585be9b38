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

// Shared keeps the tenants' rate and concurrency quotas and budgets: in-process
// (localQuotas, the default), or where several processes share them (RedisShared, or
// LeaseShared over it). Every method takes the ticket's id, unique per request across
// processes; the Redis ones are idempotent per id, so a retried command never counts
// twice. The Tenancy writes its own ledger of what it settled whichever it uses.
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

// UseShared makes t keep quotas and budgets in sh (RedisShared, LeaseShared) instead
// of in-process (localQuotas); call it before the first Admit.
func (t *Tenancy) UseShared(sh Shared) { t.shared = sh }

// SharedState is what UseShared set; nil: the state is this process's.
func (t *Tenancy) SharedState() Shared {
	if _, local := t.shared.(*localQuotas); local {
		return nil
	}
	return t.shared
}

// ID is the ticket's id: unique per request across the processes sharing a Redis.
func (tk *Ticket) ID() string { return tk.id }

// Rerun reports whether the ticket's settlement found its batch line (AdmitBatchLine)
// charged by another run of the line, in the shared state: Settle then charged
// nothing and wrote its ledger entry as RequestID+RerunSuffix at cost 0. prior is
// what the other run was charged.
func (tk *Ticket) Rerun() (prior money.Money, ok bool) { return tk.prior, tk.rerun }

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
