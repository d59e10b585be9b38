package tenancy

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/lmlite/lmlite/money"
)

// LeaseShared is a Shared that serves a tenant's requests from leases this process
// holds in Redis, with no round trip, and falls back to RedisShared's per-request
// path (exact) whenever a lease does not cover a request. It embeds the RedisShared,
// so its other abilities (batch jobs, Held, Pending, ...) are RedisShared's.
// docs/REDIS.md and the package doc have the design and its bounds.
type LeaseShared struct {
	*RedisShared
	bank interface {
		leaseBank
		register(tenant, lid string) error
		forget(tenant, lid string)
	}
	cfg   LeaseConfig
	now   func() time.Time // LeaseOptions.Now: the refreshes' clock, and how long a request waits for one (awaitRefresh)
	lid   string           // this process start's lease id
	store *Store           // the ledger whose entries name the lease (reconciliation); nil: none

	mu    sync.RWMutex // guards books
	books map[string]*leaseBook

	kick chan *leaseBook
	stop chan struct{}
	done chan struct{}
}

// LeaseOptions configure NewLeaseShared.
type LeaseOptions struct {
	LeaseConfig
	// Store is this process's ledger: its ID names the owner of the leases, so that its
	// next start (or an operator with its ledger) reconciles the leases it held. Required.
	Store *Store
	// Now is the clock of the background refreshes and of Close's, and what a
	// request's wait for a refresh is measured on (awaitRefresh); time.Now.
	Now func() time.Time
}

// leaseBook is one tenant's lease as this process holds it. mu guards every field;
// requests take it for a few arithmetic steps, the refresher to build a refresh and to
// apply its answer, never across a round trip.
type leaseBook struct {
	tenant string
	mu     sync.Mutex
	q      Quota

	granted bool
	money   money.Money // leased: what Redis holds for this process
	resv    money.Money // of it, reserved by requests in flight
	owed    []leaseReport
	owedSum money.Money
	sending *leaseAsk // sent and not answered, or failed: resent as is
	tokens  int       // tokens used since the last report
	slots   int
	flight  int
	reqTok  int     // request tokens held
	tpmLeft float64 // tokens/min left at the last answer, minus the tokens used since
	left    money.Money
	seq     uint64
	reg     bool // registered in the owner's index

	maxW     money.Money
	demMoney money.Money
	demReqs  int
	demPeak  int
	last     time.Time
	queued   bool // on the kick channel or being refreshed

	confirmed time.Time // when the last refresh that Redis answered was sent: the lease's term runs from it
	failing   bool      // the last refresh failed (Redis down): the lease is kept as it is until one succeeds

	tickets map[string]leaseTicket
	// exact: requests this process admitted on the per-request path (the lease did
	// not cover them) and has not settled: running, their clients wait on them, so the
	// lease is not idle (planLease's Running counts them).
	exact map[string]exactTicket
	// answered is closed (and replaced) whenever a refresh ends, answered or failed: a
	// request refused a slot on the per-request path while a refresh is under way waits
	// on it, since that refresh may have taken the slot for the lease (admitExact).
	answered chan struct{}
}

// exactTicket is a request admitted on the per-request path: slot, it runs on one of
// the lease's slots (flight counts it; Redis counts the slot in the lease's, none of
// its own).
type exactTicket struct{ slot bool }

// leaseTicket is a request served from the lease: money is its reservation there;
// exact is the part reserved on the per-request path (a Reserve the lease could not
// cover).
type leaseTicket struct {
	money, exact money.Money
	slot         bool // it holds one of the lease's slots (flight counts it)
	// admitted: admitted on the per-request path (its rate and slot there, or the
	// lease's slot: slot), its money reserved from the lease because Redis went down
	// before its Reserve; its settlement releases that admission with nothing charged
	// there.
	admitted bool
}

// NewLeaseShared returns r served through leases and starts the refresher; Close
// gives the leases back and closes r.
func NewLeaseShared(r *RedisShared, o LeaseOptions) *LeaseShared {
	owner := ""
	if o.Store != nil {
		owner = o.Store.ID()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	l := &LeaseShared{RedisShared: r, cfg: o.LeaseConfig.withDefaults(), now: o.Now, store: o.Store,
		lid:   r.node + "." + strconv.FormatUint(rand.Uint64(), 36),
		books: map[string]*leaseBook{}, kick: make(chan *leaseBook, 1024), stop: make(chan struct{}), done: make(chan struct{})}
	l.bank = &redisBank{r: r, owner: owner}
	go l.loop()
	return l
}

// LeaseID is this process start's lease id (Entry.Lease of what it settles from leases).
func (l *LeaseShared) LeaseID() string { return l.lid }

// Reconcile closes the leases this ledger's earlier runs held (a process killed
// holding them): what its ledger says they settled is charged, the rest given back. It
// returns the money given back. Call it at start, before serving.
func (l *LeaseShared) Reconcile() (money.Money, error) {
	if l.store == nil {
		return 0, nil
	}
	sums, err := LeaseSums(l.store)
	if err != nil {
		return 0, err
	}
	held := map[string]bool{}
	for _, h := range l.store.Interrupted() {
		if h.Ticket != "" {
			held[h.Ticket] = true
		}
	}
	return ReconcileOwner(l.c, l.prefix, l.store.ID(), l.lid, sums, held)
}

// registerLocked adds b's tenant to the owner's index (the lease's registration)
// before its first request on the per-request path reserves in Redis, so that a
// restart finds the tickets a death left there (ReconcileOwner). Once per tenant and
// process start; b.mu is held across the round trip, which only a tenant's first
// requests wait for. A failure is left to the next call (the admission then fails on
// Redis too, or its ticket expires if the process dies).
func (l *LeaseShared) registerLocked(b *leaseBook) {
	if b.reg || l.store == nil {
		return
	}
	if l.bank.register(b.tenant, l.lid) == nil {
		b.reg = true
	}
}

func limited(q *Quota) bool {
	return q.RequestsPerSecond > 0 || q.TokensPerMinute > 0 || q.MaxConcurrency > 0 || hasBudget(q)
}

func (l *LeaseShared) book(q *Quota) *leaseBook {
	l.mu.RLock()
	b := l.books[q.Tenant]
	l.mu.RUnlock()
	if b != nil {
		return b
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if b = l.books[q.Tenant]; b == nil {
		l.RedisShared.seen(q.Tenant) // the background reaper returns its dead tickets too
		b = &leaseBook{tenant: q.Tenant, q: *q, left: -1, tpmLeft: -1, tickets: map[string]leaseTicket{}, exact: map[string]exactTicket{}, answered: make(chan struct{})}
		l.books[q.Tenant] = b
	}
	return b
}

// viewLocked is the book as planLease sees it at now.
func (b *leaseBook) viewLocked(now time.Time) leaseView {
	owed := b.owedSum
	if b.sending != nil {
		owed += b.sending.reported()
	}
	d, _ := windows(now)
	old := false
	for _, r := range b.owed {
		old = old || r.Day != d
	}
	return leaseView{Now: now, Last: b.last, Budget: hasBudget(&b.q), MaxConc: b.q.MaxConcurrency, RPS: b.q.RequestsPerSecond,
		Burst: b.q.Burst, Granted: b.granted, Money: b.money, Resv: b.resv, Owed: owed, Left: b.left, Slots: b.slots,
		Flight: b.flight, Running: len(b.tickets) + len(b.exact), Tokens: b.reqTok, MaxW: b.maxW, DemMoney: b.demMoney, DemReqs: b.demReqs, DemPeak: b.demPeak, OldOwed: old}
}

// maybeKickLocked queues the book for a refresh if planLease says so.
func (l *LeaseShared) maybeKickLocked(b *leaseBook, now time.Time) {
	if b.failing && now.Sub(b.last) < l.cfg.Period/10 {
		return // Redis down: retried at most every tenth of a period
	}
	if b.queued || !planLease(b.viewLocked(now), l.cfg).Refresh {
		return
	}
	select {
	case l.kick <- b:
		b.queued = true
	default: // full: the periodic pass finds it
	}
}

// liveLocked reports whether the lease may be spent from at now: granted, and
// within its term of the last refresh Redis answered.
func (b *leaseBook) liveLocked(now time.Time, term time.Duration) bool {
	return b.granted && now.Sub(b.confirmed) <= term
}

// fitsLocked reports whether the lease covers a request at now: its money (total)
// and a slot, and unless localRate, a request token and the prompt's tokens/min.
func (b *leaseBook) fitsLocked(now time.Time, term time.Duration, promptTokens int, total money.Money, localRate bool) bool {
	v := b.viewLocked(time.Time{})
	switch {
	case !b.liveLocked(now, term):
		return false
	case v.Budget && total > v.free():
		return false
	case b.q.MaxConcurrency > 0 && b.flight >= b.slots:
		return false
	case localRate:
		return true
	case b.q.RequestsPerSecond > 0 && b.reqTok < 1:
		return false
	case b.q.TokensPerMinute > 0 && b.tpmLeft < float64(min(promptTokens, b.q.TokensPerMinute)):
		return false
	}
	return true
}

// takeLocked serves a request from the lease if it covers every limit (fitsLocked):
// a slot, a request token (unless localRate: the caller checked the rates against
// this process's share), the prompt's tokens/min and total. It reports whether it did.
func (b *leaseBook) takeLocked(now time.Time, term time.Duration, id string, promptTokens int, total money.Money, localRate bool) bool {
	if !b.fitsLocked(now, term, promptTokens, total, localRate) {
		return false
	}
	slot := b.q.MaxConcurrency > 0
	if slot {
		b.flight++
	}
	if b.q.RequestsPerSecond > 0 && !localRate {
		b.reqTok--
	}
	v := b.viewLocked(time.Time{})
	if v.Budget {
		b.resv += total
	}
	b.tickets[id] = leaseTicket{money: total, slot: slot}
	return true
}

// roomLocked is the money left for the tenant as this process knows it: what Redis
// had left beyond every lease at its last answer, plus this lease's free part.
func (b *leaseBook) roomLocked() money.Money {
	if !hasBudget(&b.q) {
		return -1
	}
	v := b.viewLocked(time.Time{})
	return max(0, b.left) + max(0, v.free())
}

func (l *LeaseShared) Admit(q *Quota, id string, now time.Time, promptTokens int, total money.Money) (money.Money, error) {
	if !limited(q) {
		return -1, nil
	}
	b := l.book(q)
	b.mu.Lock()
	if b.q != *q {
		b.q = *q // the next refresh sizes the lease for it
	}
	b.demReqs++
	b.demMoney += total
	b.maxW = max(b.maxW, total)
	ok := b.takeLocked(now, l.cfg.Term, id, promptTokens, total, false)
	if ok {
		b.demPeak = max(b.demPeak, b.flight)
	} else {
		b.demPeak = max(b.demPeak, b.flight+1) // one more than the lease had slots for
	}
	// Redis down (the last refresh failed, or any command did a moment ago) and the
	// lease out of request tokens or tokens/min but not of money or slots: the rates
	// are checked against this process's share of them, as RedisShared does while
	// Redis is down.
	localRate := !ok && (b.failing || l.RedisShared.isDown()) && b.fitsLocked(now, l.cfg.Term, promptTokens, total, true)
	var room money.Money
	if ok {
		room = b.roomLocked()
	}
	l.maybeKickLocked(b, now)
	b.mu.Unlock()
	if ok {
		return room, nil
	}
	if localRate {
		return l.admitLocalRate(b, q, id, now, promptTokens, total)
	}
	room, err := l.admitExact(b, q, id, now, promptTokens, total)
	if errors.Is(err, ErrUnavailable) {
		// Redis went down with no refresh failed yet: the lease serves the request
		// on this process's share of the rates if its money and slots cover it.
		b.mu.Lock()
		fits := b.fitsLocked(now, l.cfg.Term, promptTokens, total, true)
		b.mu.Unlock()
		if fits {
			return l.admitLocalRate(b, q, id, now, promptTokens, total)
		}
	}
	return room, err
}

// admitExact admits a request the lease does not cover (its money, mostly: near the
// ceiling the lease holds none free) on the per-request path. The concurrency slots
// and request tokens the lease holds are quantities apart from its money: a slot of
// the lease not in use, and a request token it holds, serve the request there (it is
// admitted in Redis with neither, its money reserved in Redis exactly), so that a lease
// holding the tenant's slots never starves the per-request path of them. A request
// refused a slot or money in Redis while a refresh of the lease is under way (which
// may have just taken the slot, or the money, for the lease: demand it was sized by)
// waits for that refresh's answer (awaitRefresh) and is then served from the lease if
// it covers it, or tries the per-request path again.
func (l *LeaseShared) admitExact(b *leaseBook, q *Quota, id string, now time.Time, promptTokens int, total money.Money) (money.Money, error) {
	deadline := now.Add(l.cfg.Period / 4) // the request's time, not the wall clock's
	for first := true; ; first = false {
		rq := *q
		b.mu.Lock()
		if !first && b.takeLocked(now, l.cfg.Term, id, promptTokens, total, false) {
			b.demPeak = max(b.demPeak, b.flight)
			room := b.roomLocked()
			b.mu.Unlock()
			return room, nil
		}
		live := b.liveLocked(now, l.cfg.Term)
		slot := live && q.MaxConcurrency > 0 && b.flight < b.slots
		tok := live && q.RequestsPerSecond > 0 && b.reqTok >= 1
		if slot {
			b.flight++
			rq.MaxConcurrency = 0
		}
		if tok {
			b.reqTok--
			rq.RequestsPerSecond = 0
		}
		b.demPeak = max(b.demPeak, b.flight)
		wait, busy := b.answered, b.queued
		l.registerLocked(b)
		b.mu.Unlock()
		room, err := l.RedisShared.Admit(&rq, id, now, promptTokens, total)
		b.mu.Lock()
		if err == nil {
			b.exact[id] = exactTicket{slot: slot}
			b.mu.Unlock()
			return room, nil
		}
		if slot {
			b.flight--
		}
		if tok {
			b.reqTok++
		}
		// A refresh that began after busy was read (the periodic pass, or the one this
		// very request's demand queued) may have taken the slot, money or request token
		// the request was refused for: wait for it too. One that ended meanwhile has
		// closed wait already.
		busy = busy || b.queued
		b.mu.Unlock()
		var le *LimitError
		short := errors.Is(err, ErrInsufficientQuota) || errors.As(err, &le) && (le.Reason == "concurrency" || le.Reason == "requests")
		if !short || !busy && !closed(wait) || !l.awaitRefresh(wait, deadline) {
			return room, err
		}
	}
}

// awaitRefresh waits until wait (a book's answered, taken while a refresh of it was
// queued or under way) is closed or deadline passes; it reports whether the refresh
// ended in time. A request the per-request path refused while its lease is being
// refreshed waits for the refresh: the refresh was sized by the demand of that very
// request (or took the slot it found taken), and money granted to a lease after the
// requests that asked for it were refused would sit there unspent until the lease is
// found idle, a period later (near the ceiling no refresh is kicked for money, so no
// request waits: they go one by one, exactly).
//
// deadline is a request's now plus a quarter period; the time left to it is measured
// on the configured clock (LeaseOptions.Now), and never more than a quarter period (a
// request dated in the future waits no longer than one dated now).
func (l *LeaseShared) awaitRefresh(wait <-chan struct{}, deadline time.Time) bool {
	d := min(deadline.Sub(l.now()), l.cfg.Period/4)
	if d <= 0 {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-wait:
		return true
	case <-t.C:
		return false
	}
}

// admitLocalRate serves a request from b's lease while Redis is down, its rates
// checked against this process's share of them (RedisShared.admitLocal).
func (l *LeaseShared) admitLocalRate(b *leaseBook, q *Quota, id string, now time.Time, promptTokens int, total money.Money) (money.Money, error) {
	rq := *q
	rq.MaxConcurrency = 0 // the slot is the lease's
	if _, err := l.RedisShared.admitLocal(&rq, id, now, promptTokens, nil); err != nil {
		return 0, err
	}
	b.mu.Lock()
	ok := b.takeLocked(now, l.cfg.Term, id, promptTokens, total, true)
	room := b.roomLocked()
	b.mu.Unlock()
	if !ok {
		return 0, unavailable("admit", errLeaseShort)
	}
	return room, nil
}

// errLeaseShort is the cause of a refusal while Redis is down: the lease ran short
// between a check and the take.
var errLeaseShort = errors.New("down, and the lease ran short")

func (l *LeaseShared) Room(q *Quota) money.Money {
	l.mu.RLock()
	b := l.books[q.Tenant]
	l.mu.RUnlock()
	if b == nil {
		return l.RedisShared.Room(q)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.granted {
		return l.RedisShared.Room(q)
	}
	return b.roomLocked()
}

func (l *LeaseShared) Reserve(q *Quota, id string, now time.Time, total money.Money) (money.Money, error) {
	l.mu.RLock()
	b := l.books[q.Tenant]
	l.mu.RUnlock()
	if b == nil {
		return l.RedisShared.Reserve(q, id, now, total)
	}
	b.mu.Lock()
	lt, ok := b.tickets[id]
	if total > lt.money+lt.exact { // demand, whichever path serves it
		b.demMoney += total - lt.money - lt.exact
		b.maxW = max(b.maxW, total)
	}
	if !ok {
		l.maybeKickLocked(b, now)
		deadline := now.Add(l.cfg.Period / 4) // the request's time, not the wall clock's
		for {
			wait, busy := b.answered, b.queued
			b.mu.Unlock()
			room, err := l.RedisShared.Reserve(q, id, now, total)
			short := errors.Is(err, ErrInsufficientQuota)
			if !hasBudget(q) || !short && !errors.Is(err, ErrUnavailable) {
				return room, err
			}
			// Admitted on the per-request path, and Redis went down before this
			// Reserve, or refused it while the lease was being refreshed (awaitRefresh):
			// what the lease holds free covers it, as it would have had the lease
			// admitted the request (the money was reserved in Redis before).
			if short {
				if r, ok := l.reserveSplit(b, q, id, now, total); ok {
					return r, nil
				}
			}
			if short && (!busy || !l.awaitRefresh(wait, deadline)) {
				return room, err
			}
			b.mu.Lock()
			et, exact := b.exact[id]
			v := b.viewLocked(now)
			if exact && b.liveLocked(now, l.cfg.Term) && total <= v.free() {
				delete(b.exact, id)
				b.resv += total
				b.tickets[id] = leaseTicket{money: total, admitted: true, slot: et.slot}
				room = b.roomLocked()
				b.mu.Unlock()
				return room, nil
			}
			if !short || !exact {
				b.mu.Unlock()
				return room, err
			}
		}
	}
	budget := hasBudget(&b.q)
	if !budget {
		b.mu.Unlock()
		return -1, nil
	}
	// Grow or shrink the lease's part first; what the lease cannot cover goes to the
	// per-request path. Refused there while the lease is being refreshed, the request
	// waits for the refresh and tries again (awaitRefresh).
	deadline := now.Add(l.cfg.Period / 4) // the request's time, not the wall clock's
	for {
		if lt.exact == 0 && b.liveLocked(now, l.cfg.Term) {
			v := b.viewLocked(now)
			if total <= lt.money || total-lt.money <= v.free() {
				b.resv += total - lt.money
				lt.money = total
				b.tickets[id] = lt
				room := b.roomLocked()
				l.maybeKickLocked(b, now)
				b.mu.Unlock()
				return room, nil
			}
		}
		keep := min(lt.money, total)
		b.resv -= lt.money - keep
		lt.money = keep
		// The lease's free part, short of what the request lacks (a remnant under a
		// worst case, near the ceiling), goes into the reservation too, and only the
		// rest to Redis: a remnant no request can spend alone, beside what is left in
		// Redis, must not refuse a request the two cover together.
		var extra money.Money
		if b.liveLocked(now, l.cfg.Term) {
			v := b.viewLocked(now)
			extra = min(total-keep, max(0, v.free()))
			b.resv += extra
			lt.money += extra
			keep += extra
		}
		b.tickets[id] = lt
		l.maybeKickLocked(b, now)
		wait, busy := b.answered, b.queued
		b.mu.Unlock()
		room, err := l.RedisShared.Reserve(q, id, now, total-keep)
		if err != nil && extra > 0 {
			b.mu.Lock()
			lt = b.tickets[id]
			lt.money -= extra
			b.resv -= extra
			b.tickets[id] = lt
			b.mu.Unlock()
		}
		if err == nil {
			b.mu.Lock()
			lt = b.tickets[id]
			lt.exact = total - keep
			b.tickets[id] = lt
			b.mu.Unlock()
			return room, nil
		}
		if !errors.Is(err, ErrInsufficientQuota) || !busy || !l.awaitRefresh(wait, deadline) {
			return room, err
		}
		b.mu.Lock()
		lt = b.tickets[id]
	}
}

// reserveSplit reserves total for a request admitted on the per-request path whose
// Reserve Redis refused for money from the lease: all of it if its free part covers it
// (the lease was granted after the admission, maybe with the money Redis now lacks),
// else that free part (a remnant under total, near the ceiling) and the rest in Redis,
// so that money in the lease never refuses a request it covers, alone or together
// with what Redis has left. It reports whether it reserved; if not, nothing changed.
func (l *LeaseShared) reserveSplit(b *leaseBook, q *Quota, id string, now time.Time, total money.Money) (money.Money, bool) {
	b.mu.Lock()
	et, exact := b.exact[id]
	v := b.viewLocked(now)
	f := min(total, v.free())
	if !exact || !b.liveLocked(now, l.cfg.Term) || f <= 0 {
		b.mu.Unlock()
		return 0, false
	}
	delete(b.exact, id)
	b.resv += f
	b.tickets[id] = leaseTicket{money: f, admitted: true, slot: et.slot}
	if f == total { // the lease covers it all (granted after the admission)
		room := b.roomLocked()
		b.mu.Unlock()
		return room, true
	}
	b.mu.Unlock()
	room, err := l.RedisShared.Reserve(q, id, now, total-f)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		delete(b.tickets, id)
		b.resv -= f
		b.exact[id] = et
		return 0, false
	}
	b.tickets[id] = leaseTicket{money: f, exact: total - f, admitted: true, slot: et.slot}
	return room, true
}

func (l *LeaseShared) Settle(q *Quota, id string, now time.Time, actual money.Money, tokens int) (money.Money, bool, error) {
	prior, again, _, err := l.SettleLease(q, id, now, actual, tokens)
	return prior, again, err
}

// SettleLease is Settle that also says which lease the money was settled from ("":
// none, the per-request path), for the ledger entry (Entry.Lease).
func (l *LeaseShared) SettleLease(q *Quota, id string, now time.Time, actual money.Money, tokens int) (prior money.Money, again bool, lease string, err error) {
	l.mu.RLock()
	b := l.books[q.Tenant]
	l.mu.RUnlock()
	if b == nil {
		prior, again, err = l.RedisShared.Settle(q, id, now, actual, tokens)
		return prior, again, "", err
	}
	b.mu.Lock()
	lt, ok := b.tickets[id]
	if !ok {
		if et, exact := b.exact[id]; exact {
			delete(b.exact, id)
			if et.slot {
				b.flight--
				l.maybeKickLocked(b, now)
			}
		}
		b.mu.Unlock()
		prior, again, err = l.RedisShared.Settle(q, id, now, actual, tokens)
		return prior, again, "", err
	}
	delete(b.tickets, id)
	// What the lease settles: all of it, unless part was reserved on the per-request
	// path (which settles the rest). A tenant without a budget reserves nothing but its
	// spend is still reported, as the per-request path counts it.
	fromLease := actual
	if lt.exact > 0 {
		fromLease = min(actual, lt.money)
	}
	b.resv -= lt.money
	if fromLease > 0 {
		d, m := windows(now)
		i := len(b.owed) - 1
		if i < 0 || b.owed[i].Day != d {
			b.owed = append(b.owed, leaseReport{Day: d, Month: m})
			i++
		}
		b.owed[i].Amount += fromLease
		b.owedSum += fromLease
	}
	if lt.slot {
		b.flight--
	}
	if tokens > 0 && b.q.TokensPerMinute > 0 {
		b.tokens += tokens
		b.tpmLeft -= float64(tokens)
	}
	l.maybeKickLocked(b, now)
	b.mu.Unlock()
	if lt.admitted && lt.exact == 0 {
		// The per-request admission is released, nothing charged there (the lease
		// settled it all); with Redis down the release is queued and retried.
		l.RedisShared.Settle(q, id, now, 0, 0)
	} else if lt.exact > 0 { // its part on the per-request path (and its admission there)
		if _, _, err = l.RedisShared.Settle(q, id, now, actual-fromLease, 0); err != nil {
			return 0, false, l.lid, err
		}
	}
	if fromLease > 0 || lt.exact == 0 {
		lease = l.lid
	}
	return 0, false, lease, nil
}

// CheckTokens is Ticket.CheckTokens (tokenChecker): for a tenant with a lease, against
// the tokens/min left at its last refresh less the tokens used since, with no round
// trip; otherwise RedisShared's.
func (l *LeaseShared) CheckTokens(q *Quota, now time.Time, promptTokens int) error {
	if q.TokensPerMinute <= 0 || promptTokens <= 0 {
		return nil
	}
	l.mu.RLock()
	b := l.books[q.Tenant]
	l.mu.RUnlock()
	if b != nil {
		b.mu.Lock()
		granted, left := b.granted, b.tpmLeft
		b.mu.Unlock()
		if granted && left >= float64(min(promptTokens, q.TokensPerMinute)) {
			return nil
		}
	}
	return l.RedisShared.CheckTokens(q, now, promptTokens)
}

// loop is the refresher: it refreshes the books kicked by requests at once, and every
// tenth of a period passes over every book for those planLease says are due (an idle
// lease given back, a day that changed).
func (l *LeaseShared) loop() {
	defer close(l.done)
	now := l.now
	t := time.NewTicker(l.cfg.Period / 10)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case b := <-l.kick:
			l.refresh(b, now(), false)
		case <-t.C:
			l.mu.RLock()
			bs := make([]*leaseBook, 0, len(l.books))
			for _, b := range l.books {
				bs = append(bs, b)
			}
			l.mu.RUnlock()
			n := now()
			for _, b := range bs {
				b.mu.Lock()
				due := planLease(b.viewLocked(n), l.cfg).Refresh && (b.granted || b.demReqs > 0 || b.owedSum > 0)
				if due {
					b.queued = true
				}
				b.mu.Unlock()
				if due {
					l.refresh(b, n, false)
				}
			}
		}
	}
}

// refresh sends one refresh of b's lease and applies the answer; final gives the lease
// back whole (Close). It is only called by the refresher (or Close, after it stopped).
func (l *LeaseShared) refresh(b *leaseBook, now time.Time, final bool) error {
	b.mu.Lock()
	p := planLease(b.viewLocked(now), l.cfg)
	if final {
		p = leasePlan{Money: b.resv, Slots: b.flight, Give: b.reqTok}
	}
	q := b.q
	ask := b.sending
	if ask == nil {
		b.seq++
		ask = &leaseAsk{Lease: l.lid, Seq: b.seq, Reports: b.owed, Tokens: b.tokens}
		b.owed, b.owedSum, b.tokens = nil, 0, 0
		b.sending = ask
	}
	rep := ask.reported()
	if hasBudget(&q) {
		// What was settled and is not in this report (a resend's: it reports what it
		// first did) stays in the lease until the next report takes it off.
		p.Money += b.owedSum
	}
	if b.failing && !final {
		// The last refresh failed (Redis down): the lease is kept whole until Redis
		// answers, so that the process serves from it meanwhile (LeaseConfig.Term).
		// An ambiguous failure (the script ran, its answer lost) may have shrunk it in
		// Redis: the shrink applied locally before that send stays (never undone).
		p.Money = max(p.Money, b.money-rep)
		p.Slots = max(p.Slots, b.slots)
		p.Give = 0
	}
	ask.Money, ask.Slots, ask.Take, ask.Give = p.Money, p.Slots, p.Take, p.Give
	ask.Reserve = money.Money(l.cfg.Reserve) * b.maxW
	// A shrink takes effect here at once (the lease after it still covers every
	// reservation: p.Money ≥ resv); a grow only when Redis grants it.
	if p.Money < b.money-rep {
		b.money = p.Money + rep
	}
	if p.Slots < b.slots {
		b.slots = p.Slots
	}
	b.reqTok -= p.Give
	if b.demReqs == 0 && !final {
		b.maxW -= b.maxW / 4 // the worst case seen decays while the tenant is idle
	}
	b.last = now
	b.demMoney, b.demReqs, b.demPeak = 0, 0, b.flight
	reg := b.reg
	b.mu.Unlock()

	var err error
	if !reg {
		if err = l.bank.register(q.Tenant, l.lid); err == nil {
			b.mu.Lock()
			b.reg = true
			b.mu.Unlock()
		}
	}
	var g leaseGrant
	if err == nil {
		g, err = l.bank.refresh(&q, now, ask)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.queued = false
	close(b.answered)
	b.answered = make(chan struct{})
	if err != nil {
		ask.Give = 0 // given back locally; a resend must not give them twice
		b.failing = true
		return err
	}
	b.sending = nil
	b.failing = false
	b.confirmed = now
	b.granted = !final
	b.money = g.Money
	b.slots = g.Slots
	b.reqTok += g.Took
	b.tpmLeft = g.TPMLeft - float64(b.tokens)
	b.left = g.Left
	return nil
}

// Close gives every lease back (reporting what it settled) and closes the
// RedisShared. A lease that cannot be given back stays in Redis, stranded until this
// ledger's next start reconciles it.
func (l *LeaseShared) Close() {
	select {
	case <-l.stop:
		return
	default:
	}
	close(l.stop)
	<-l.done
	l.mu.RLock()
	bs := make([]*leaseBook, 0, len(l.books))
	for _, b := range l.books {
		bs = append(bs, b)
	}
	l.mu.RUnlock()
	for _, b := range bs {
		err := l.refresh(b, l.now(), true)
		b.mu.Lock()
		again := err == nil && b.owedSum > 0 // settled during a failed refresh: a second report
		b.mu.Unlock()
		if again {
			err = l.refresh(b, l.now(), true)
		}
		if err == nil {
			b.mu.Lock()
			whole := b.money == 0 && b.slots == 0 && b.reg
			b.mu.Unlock()
			if whole {
				l.bank.forget(b.tenant, l.lid)
			}
		}
	}
	l.RedisShared.Close()
}

var _ Shared = (*LeaseShared)(nil)

// closed reports whether ch is closed (a book's answered: a refresh ended).
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
