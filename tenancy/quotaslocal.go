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
// reserve→settle (account). Every decision takes an explicit now; the decisions
// themselves (account.fits, ...) are plain functions of state.
//
// A Tenancy's Ticket holds its own reservation and slot and the tenant's state
// (Ticket.local): its Admit, Reserve and Settle take the tenant's lock once each,
// budget windows included (lockAt), and keep nothing per ticket here. The Shared
// methods, which name a ticket by its id only, keep the id's reservation in a map
// (tenantState.byID) for callers that hold no Ticket.
type localQuotas struct {
	store *Store // nil: no stored spend

	tenants sync.Map // tenant → *tenantState: read lock-free on every call
}

// localTicket is what a ticket id holds in-process when the Shared methods are
// called by id (tenantState.byID).
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
	from, to int64                  // day.window's UTC day in Unix seconds, [from, to); 0, 0: no window yet
	byID     map[string]localTicket // the Shared methods' tickets by id (not a Ticket's); nil until one
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

// tenant returns the tenant's state, made if new.
func (l *localQuotas) tenant(id string) *tenantState {
	if ts, ok := l.tenants.Load(id); ok {
		return ts.(*tenantState)
	}
	ts, _ := l.tenants.LoadOrStore(id, &tenantState{id: id, store: l.store})
	return ts.(*tenantState)
}

// applyLocked brings the tenant's quota to q: its budgets' ceilings, and with rates
// its rate and concurrency quotas (Admit; a batch line's Reserve, whose quota has no
// rates, must not reset the tenant's limiters).
func (ts *tenantState) applyLocked(q *Quota, now time.Time, rates bool) {
	if rates && (!ts.applied || ts.q != *q) {
		ts.applyQuotaLocked(*q, now)
	}
	ts.day.ceiling, ts.month.ceiling = q.DailyBudget, q.MonthlyBudget
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

// lockAt takes the tenant's lock with its budget windows at those of now: the check
// is two comparisons in the caller's own critical section. Moving to new windows
// loads their settled spend from the store (after a restart, or 0 for a new window)
// with the lock let go meanwhile, so the tenant's other requests never wait for the
// disk. It returns with the lock held, even with an error (the windows then stay as
// they were).
func (ts *tenantState) lockAt(now time.Time) error {
	ts.mu.Lock()
	if s := now.Unix(); s >= ts.from && s < ts.to {
		return nil
	}
	var spentD, spentM money.Money
	if ts.store != nil {
		ts.mu.Unlock()
		var err error
		spentD, spentM, err = ts.store.Spent(ts.id, now)
		ts.mu.Lock()
		if err != nil {
			return err
		}
	}
	ts.rollToLocked(now, spentD, spentM)
	return nil
}

// rollToLocked moves to the windows of now with their settled spend, unless another
// request moved there first.
func (ts *tenantState) rollToLocked(now time.Time, spentD, spentM money.Money) {
	d, m := windows(now)
	if ts.day.window != d {
		ts.day.window, ts.day.spent = d, spentD
	}
	if ts.month.window != m {
		ts.month.window, ts.month.spent = m, spentM
	}
	y, mo, dd := now.UTC().Date()
	ts.from = time.Date(y, mo, dd, 0, 0, 0, 0, time.UTC).Unix()
	ts.to = ts.from + 24*60*60 // a UTC day (Go's times have no leap seconds)
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

// admit is Admit for a Ticket, which holds the slot and the reservation it takes and
// the tenant's state returned: the quotas (admitLocked), then the money, all or
// nothing, in one critical section.
func (l *localQuotas) admit(q *Quota, now time.Time, promptTokens int, total money.Money) (*tenantState, money.Money, error) {
	ts := l.tenant(q.Tenant)
	err := ts.lockAt(now)
	defer ts.mu.Unlock()
	if err != nil {
		return nil, 0, err
	}
	ts.applyLocked(q, now, true)
	rv, err := ts.admitLocked(now, promptTokens)
	if err != nil {
		return nil, 0, err
	}
	if total > 0 && (!ts.day.fits(total) || !ts.month.fits(total)) {
		if rv != nil {
			rv.CancelAt(now) // the request/s token back: nothing taken
		}
		return nil, ts.roomLocked(), ErrInsufficientQuota
	}
	ts.day.reserved += total
	ts.month.reserved += total
	ts.inFlight++
	return ts, ts.roomLocked(), nil
}

// reserve sets a reservation of held to total (0 releases it) against the budgets of
// now (Reserve for a Ticket, which holds it); q gives the ceilings.
func (ts *tenantState) reserve(q *Quota, now time.Time, held, total money.Money) (money.Money, error) {
	if total > 0 {
		err := ts.lockAt(now)
		defer ts.mu.Unlock()
		if err != nil {
			return 0, err
		}
	} else { // (0 is Release, which moves no window: its now is a guess)
		ts.mu.Lock()
		defer ts.mu.Unlock()
	}
	ts.applyLocked(q, now, false)
	if add := total - held; add > 0 && (!ts.day.fits(add) || !ts.month.fits(add)) {
		return ts.roomLocked(), ErrInsufficientQuota
	}
	ts.day.reserved += total - held
	ts.month.reserved += total - held
	return ts.roomLocked(), nil
}

// settle replaces a reservation of held by actual in the windows of now, frees a slot
// if the ticket holds one and charges tokens to tokens/min (Settle for a Ticket).
func (ts *tenantState) settle(now time.Time, held money.Money, slot bool, actual money.Money, tokens int) {
	_ = ts.lockAt(now) // an error: charged to the windows as they are
	defer ts.mu.Unlock()
	ts.day.settle(held, actual)
	ts.month.settle(held, actual)
	if ts.tpm != nil && tokens > 0 {
		ts.tpm.ReserveN(now, min(tokens, ts.tpm.Burst())) // may go into debt: later requests wait it off
	}
	if slot {
		ts.inFlight--
	}
}

// take removes and returns id's ticket (Shared methods by id).
func (ts *tenantState) take(id string) (localTicket, bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t, ok := ts.byID[id]
	delete(ts.byID, id)
	return t, ok
}

// put records id's ticket (Shared methods by id).
func (ts *tenantState) put(id string, t localTicket) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.byID == nil {
		ts.byID = map[string]localTicket{}
	}
	ts.byID[id] = t
}

// Admit is Shared.Admit in-process, for a caller holding no Ticket: admit, with the
// slot and reservation kept under id.
func (l *localQuotas) Admit(q *Quota, id string, now time.Time, promptTokens int, total money.Money) (money.Money, error) {
	ts, room, err := l.admit(q, now, promptTokens, total)
	if err == nil {
		ts.put(id, localTicket{reserved: total, slot: true})
	}
	return room, err
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
	return l.tenant(q.Tenant).checkTokens(q, now, promptTokens)
}

// checkTokens is CheckTokens on the tenant's state (a Ticket holds it: Ticket.local).
func (ts *tenantState) checkTokens(q *Quota, now time.Time, promptTokens int) error {
	err := ts.lockAt(now)
	defer ts.mu.Unlock()
	if err != nil {
		return err
	}
	ts.applyLocked(q, now, true)
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
	return l.tenant(q.Tenant).roomAt(q, now)
}

// roomAt is RoomAt on the tenant's state (a Ticket holds it: Ticket.local).
func (ts *tenantState) roomAt(q *Quota, now time.Time) money.Money {
	err := ts.lockAt(now)
	defer ts.mu.Unlock()
	if err != nil {
		return 0
	}
	ts.applyLocked(q, now, false)
	return ts.roomLocked()
}

// Reserve sets id's reservation to total against the budgets of now (Shared.Reserve),
// for a caller holding no Ticket (an id never admitted: a batch line's).
func (l *localQuotas) Reserve(q *Quota, id string, now time.Time, total money.Money) (money.Money, error) {
	ts := l.tenant(q.Tenant)
	t, ok := ts.take(id) // absent: a batch line's ticket (no Admit)
	room, err := ts.reserve(q, now, t.reserved, total)
	if err == nil {
		t.reserved = total
	}
	if err == nil || ok {
		ts.put(id, t)
	}
	return room, err
}

// Settle replaces id's reservation by actual in the windows of now, frees its slot
// and charges tokens to tokens/min (Shared.Settle), for a caller holding no Ticket.
// In-process there are no other settlements of a batch line to find: again is false.
func (l *localQuotas) Settle(q *Quota, id string, now time.Time, actual money.Money, tokens int) (money.Money, bool, error) {
	ts := l.tenant(q.Tenant)
	t, _ := ts.take(id) // absent: nothing reserved under id (a batch line of a tenant without budget)
	ts.settle(now, t.reserved, t.slot, actual, tokens)
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
