package tenancy

import (
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/lmlite/lmlite/money"
)

// localQuotas is the in-process Shared: the quotas and budgets of one process, kept
// in memory, the budgets' settled spend loaded from the store's totals when a window
// starts (after a restart, or 0 for a new one). It is what a Tenancy uses unless
// UseShared gives it another (RedisShared, LeaseShared); the same tests run against
// the three (TestQuotas*).
//
// Requests/s and tokens/min are golang.org/x/time/rate token buckets. Tokens/min is
// charged after the fact with the tokens a request really used, and a request is only
// admitted while the bucket holds at least its prompt's tokens. Budgets use
// reserve→settle per ticket id (account). Every decision takes an explicit now; the
// decisions themselves (account.fits, ...) are plain functions of state.
type localQuotas struct {
	store *Store // nil: no stored spend

	tenants sync.Map // tenant → *tenantState: read lock-free on every call
}

// localTicket is what a ticket id holds in-process (tenantState.tickets).
type localTicket struct {
	reserved money.Money
	slot     bool // Admit took a concurrency slot
}

func newLocalQuotas(store *Store) *localQuotas {
	return &localQuotas{store: store}
}

// tenantState is one tenant's live quota state.
type tenantState struct {
	id    string
	store *Store

	mu       sync.Mutex // guards the fields below
	q        Quota
	applied  bool          // q's rates have been applied
	rps      *rate.Limiter // nil: unlimited
	tpm      *rate.Limiter // nil: unlimited
	inFlight int
	day      account
	month    account
	tickets  map[string]localTicket // the tickets reserving or holding a slot, by id
}

// account is the money state of one budget window. Its methods are the pure budget
// decisions; the caller holds the tenant's lock.
type account struct {
	window   int         // yyyymmdd or yyyymm; 0: not loaded yet
	ceiling  money.Money // 0: no ceiling
	spent    money.Money // settled in this window
	reserved money.Money // outstanding reservations (carried across a window change)
}

// room is the money left for new reservations; -1 when there is no ceiling.
func (a *account) room() money.Money {
	if a.ceiling == 0 {
		return -1
	}
	return max(0, a.ceiling-a.spent-a.reserved)
}

// fits reports whether amount may be reserved.
func (a *account) fits(amount money.Money) bool {
	return a.ceiling == 0 || a.spent+a.reserved+amount <= a.ceiling
}

// settle replaces a reservation by the actual cost.
func (a *account) settle(reserved, actual money.Money) {
	a.reserved -= reserved
	a.spent += actual
}

// state returns q's tenant with its budget windows at now. rates says whether q's
// rate and concurrency quotas apply (Admit) or only its budgets (a batch line's
// Reserve, whose quota has no rates: it must not reset the tenant's limiters).
func (l *localQuotas) state(q *Quota, now time.Time, rates bool) (*tenantState, error) {
	ts := l.tenant(q.Tenant)
	ts.mu.Lock()
	if rates && (!ts.applied || ts.q != *q) {
		ts.applyQuotaLocked(*q, now)
	}
	ts.day.ceiling, ts.month.ceiling = q.DailyBudget, q.MonthlyBudget
	ts.mu.Unlock()
	return ts, ts.roll(now)
}

// tenant returns the tenant's state, made if new.
func (l *localQuotas) tenant(id string) *tenantState {
	if ts, ok := l.tenants.Load(id); ok {
		return ts.(*tenantState)
	}
	ts, _ := l.tenants.LoadOrStore(id, &tenantState{id: id, store: l.store, tickets: map[string]localTicket{}})
	return ts.(*tenantState)
}

// applyQuotaLocked makes fresh rate limiters for q (a quota compared by value).
func (ts *tenantState) applyQuotaLocked(q Quota, now time.Time) {
	ts.q, ts.applied = q, true
	ts.rps, ts.tpm = nil, nil
	if q.RequestsPerSecond > 0 {
		ts.rps = rate.NewLimiter(rate.Limit(q.RequestsPerSecond), q.Burst)
		ts.rps.SetBurstAt(now, q.Burst) // full bucket at now, not at the zero time
	}
	if q.TokensPerMinute > 0 {
		ts.tpm = rate.NewLimiter(rate.Limit(float64(q.TokensPerMinute)/60), q.TokensPerMinute)
	}
}

// roll moves the budget windows to those of now, loading their settled spend from
// the store (after a restart, or 0 for a new window). The caller must not hold the
// tenant's lock: the store is read without it, so the tenant's other requests never
// wait for the disk.
func (ts *tenantState) roll(now time.Time) error {
	d, m := windows(now)
	ts.mu.Lock()
	current := ts.day.window == d && ts.month.window == m
	ts.mu.Unlock()
	if current {
		return nil
	}
	var spentD, spentM money.Money
	if ts.store != nil {
		var err error
		if spentD, spentM, err = ts.store.Spent(ts.id, now); err != nil {
			return err
		}
	}
	ts.mu.Lock()
	ts.rollToLocked(d, m, spentD, spentM)
	ts.mu.Unlock()
	return nil
}

// rollToLocked moves to the windows d and m with their settled spend, unless another
// request moved there first.
func (ts *tenantState) rollToLocked(d, m int, spentD, spentM money.Money) {
	if ts.day.window != d {
		ts.day.window, ts.day.spent = d, spentD
	}
	if ts.month.window != m {
		ts.month.window, ts.month.spent = m, spentM
	}
}

// roomLocked is the smaller of the day and month rooms; -1 when there is no budget.
func (ts *tenantState) roomLocked() money.Money {
	d, m := ts.day.room(), ts.month.room()
	switch {
	case d < 0:
		return m
	case m < 0:
		return d
	}
	return min(d, m)
}

// Admit is Shared.Admit in-process: the quotas (admitLocked), then the money, all
// or nothing.
func (l *localQuotas) Admit(q *Quota, id string, now time.Time, promptTokens int, total money.Money) (money.Money, error) {
	ts, err := l.state(q, now, true)
	if err != nil {
		return 0, err
	}
	ts.mu.Lock()
	rv, err := ts.admitLocked(now, promptTokens)
	if err != nil {
		ts.mu.Unlock()
		return 0, err
	}
	if total > 0 && (!ts.day.fits(total) || !ts.month.fits(total)) {
		if rv != nil {
			rv.CancelAt(now) // the request/s token back: nothing taken
		}
		room := ts.roomLocked()
		ts.mu.Unlock()
		return room, ErrInsufficientQuota
	}
	ts.day.reserved += total
	ts.month.reserved += total
	ts.inFlight++
	ts.tickets[id] = localTicket{reserved: total, slot: true}
	room := ts.roomLocked()
	ts.mu.Unlock()
	return room, nil
}

// admitLocked is the quota decision: it consumes a request token only if every quota
// admits the request, and returns that token's reservation (nil: no requests/s quota)
// so that the caller may give it back.
func (ts *tenantState) admitLocked(now time.Time, promptTokens int) (*rate.Reservation, error) {
	if max := ts.q.MaxConcurrency; max > 0 && ts.inFlight >= max {
		return nil, &LimitError{Reason: "concurrency", RetryAfter: time.Second}
	}
	if err := ts.checkTokensLocked(now, promptTokens); err != nil {
		return nil, err
	}
	if ts.rps != nil {
		r := ts.rps.ReserveN(now, 1)
		if !r.OK() {
			return nil, &LimitError{Reason: "requests", RetryAfter: time.Second}
		}
		if d := r.DelayFrom(now); d > 0 {
			r.CancelAt(now)
			return nil, &LimitError{Reason: "requests", RetryAfter: d}
		}
		return r, nil
	}
	return nil, nil
}

// CheckTokens is the tokens/min check of Ticket.CheckTokens (tokenChecker).
func (l *localQuotas) CheckTokens(q *Quota, now time.Time, promptTokens int) error {
	ts, err := l.state(q, now, true)
	if err != nil {
		return err
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.checkTokensLocked(now, promptTokens)
}

// checkTokensLocked is the tokens/min decision: promptTokens (at most the burst) must
// be left at now.
func (ts *tenantState) checkTokensLocked(now time.Time, promptTokens int) error {
	if ts.tpm == nil {
		return nil
	}
	need := float64(min(promptTokens, ts.tpm.Burst()))
	if have := ts.tpm.TokensAt(now); have < need {
		wait := time.Duration((need - have) / float64(ts.tpm.Limit()) * float64(time.Second))
		return &LimitError{Reason: "tokens", RetryAfter: wait}
	}
	return nil
}

// Room is the tenant's money left at time.Now (Shared.Room); RoomAt at now.
func (l *localQuotas) Room(q *Quota) money.Money { return l.RoomAt(q, time.Now()) }

// RoomAt is the tenant's money left for new reservations at now, computed live
// (roomAt): the smaller of the day and month rooms; -1 when it has no budget.
func (l *localQuotas) RoomAt(q *Quota, now time.Time) money.Money {
	ts, err := l.state(q, now, false)
	if err != nil {
		return 0
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.roomLocked()
}

// Reserve sets id's reservation to total against the budgets of now (Shared.Reserve).
func (l *localQuotas) Reserve(q *Quota, id string, now time.Time, total money.Money) (money.Money, error) {
	ts := l.tenant(q.Tenant)
	if total > 0 { // (0 is Release, which moves no window: its now is a guess)
		if err := ts.roll(now); err != nil {
			return 0, err
		}
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.day.ceiling, ts.month.ceiling = q.DailyBudget, q.MonthlyBudget
	t := ts.tickets[id] // absent: a batch line's ticket (no Admit)
	if add := total - t.reserved; add > 0 && (!ts.day.fits(add) || !ts.month.fits(add)) {
		return ts.roomLocked(), ErrInsufficientQuota
	}
	ts.day.reserved += total - t.reserved
	ts.month.reserved += total - t.reserved
	t.reserved = total
	ts.tickets[id] = t
	return ts.roomLocked(), nil
}

// Settle replaces id's reservation by actual in the windows of now, frees its slot
// and charges tokens to tokens/min (Shared.Settle). In-process there are no other
// settlements of a batch line to find: again is false.
func (l *localQuotas) Settle(q *Quota, id string, now time.Time, actual money.Money, tokens int) (money.Money, bool, error) {
	ts := l.tenant(q.Tenant)
	_ = ts.roll(now)
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := ts.tickets[id] // absent: nothing reserved under id (a batch line of a tenant without budget)
	delete(ts.tickets, id)
	ts.day.settle(t.reserved, actual)
	ts.month.settle(t.reserved, actual)
	if ts.tpm != nil && tokens > 0 {
		ts.tpm.ReserveN(now, min(tokens, ts.tpm.Burst())) // may go into debt: later requests wait it off
	}
	if t.slot {
		ts.inFlight--
	}
	return 0, false, nil
}

// InFlight is the tenant's admitted requests not yet settled (inFlighter).
func (l *localQuotas) InFlight(tenant string) int {
	v, ok := l.tenants.Load(tenant)
	if !ok {
		return 0
	}
	ts := v.(*tenantState)
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.inFlight
}
