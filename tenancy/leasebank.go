package tenancy

import (
	"sync"
	"time"

	"github.com/lmlite/lmlite/money"
)

// leaseBank is where leases are granted from: Redis for processes that share it
// (redisBank, leaseredis.go), or memory (memBank: one process's, the reference the
// same tests run against).
type leaseBank interface {
	// refresh reports what a lease settled and resizes it, as lease.lua says.
	refresh(q *Quota, now time.Time, a *leaseAsk) (leaseGrant, error)
	// reconcile closes lease lid of tenant held by a holder that is gone: each window's
	// spend raised to its ledger's sum (sums), the rest of the lease given back.
	reconcile(tenant, lid string, sums map[int]money.Money) (returned money.Money, err error)
}

// leaseReport is money settled from a lease in one day (and its month).
type leaseReport struct {
	Day, Month int
	Amount     money.Money
}

// leaseAsk is one refresh: a report of what was settled (applied once per Seq) and
// the lease wanted.
type leaseAsk struct {
	Lease   string // the lease id: the holder's, per process start
	Seq     uint64
	Reports []leaseReport
	Tokens  int // tokens used, for tokens/min
	Money   money.Money
	Slots   int
	Take    int // request tokens to take
	Give    int // request tokens to give back
	Reserve money.Money
}

func (a *leaseAsk) reported() (s money.Money) {
	for _, r := range a.Reports {
		s += r.Amount
	}
	return s
}

// leaseGrant is the answer to a refresh: the lease as it now is.
type leaseGrant struct {
	Money   money.Money
	Slots   int
	Took    int     // request tokens taken
	TPMLeft float64 // tokens/min left; -1: no limit
	Left    money.Money
}

// memBank is leaseBank in memory: the ceilings and slots of one process's tenants,
// with the grant rules of lease.lua (requests/s and tokens/min are not limited: it
// grants every token asked). It is the reference the lease tests run against
// besides Redis.
type memBank struct {
	mu      sync.Mutex
	spent   map[string]money.Money // by tenant and window, "T|d:YYYYMMDD"
	held    map[string]money.Money // by tenant: reservations and leases
	slots   map[string]int         // by tenant
	leases  map[string]*memLease   // by tenant|lid
	exactly map[string]money.Money // per-request reservations (exact path), by tenant|id
}

type memLease struct {
	seq      uint64
	money    money.Money
	slots    int
	reported map[string]money.Money
	closed   bool
}

func newMemBank() *memBank {
	return &memBank{spent: map[string]money.Money{}, held: map[string]money.Money{}, slots: map[string]int{},
		leases: map[string]*memLease{}, exactly: map[string]money.Money{}}
}

func memWin(tenant string, kind byte, w int) string {
	return tenant + "|" + string(kind) + ":" + itoa(w)
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}

// roomLocked is the money left beyond every reservation and lease; -1: no ceiling.
func (m *memBank) roomLocked(q *Quota, now time.Time) money.Money {
	d, mo := windows(now)
	r := money.Money(-1)
	if q.DailyBudget > 0 {
		r = q.DailyBudget - m.spent[memWin(q.Tenant, 'd', d)] - m.held[q.Tenant]
	}
	if q.MonthlyBudget > 0 {
		rm := q.MonthlyBudget - m.spent[memWin(q.Tenant, 'm', mo)] - m.held[q.Tenant]
		if r < 0 || rm < r {
			r = rm
		}
	}
	return r
}

func (m *memBank) refresh(q *Quota, now time.Time, a *leaseAsk) (leaseGrant, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := q.Tenant + "|" + a.Lease
	l := m.leases[k]
	if l == nil {
		l = &memLease{reported: map[string]money.Money{}}
		m.leases[k] = l
	}
	if a.Seq > l.seq {
		l.seq = a.Seq
		for _, r := range a.Reports {
			m.spent[memWin(q.Tenant, 'd', r.Day)] += r.Amount
			m.spent[memWin(q.Tenant, 'm', r.Month)] += r.Amount
			l.reported["d:"+itoa(r.Day)] += r.Amount
			l.reported["m:"+itoa(r.Month)] += r.Amount
			l.money -= r.Amount
			m.held[q.Tenant] -= r.Amount
		}
		if l.money < 0 { // spend without a budget: reported, never leased
			m.held[q.Tenant] -= l.money
			l.money = 0
		}
	}
	nm := l.money
	if !hasBudget(q) {
		nm = 0
	} else if a.Money <= l.money {
		nm = a.Money
	} else if grow := min(a.Money-l.money, (m.roomLocked(q, now)-a.Reserve)/2); grow > 0 {
		nm = l.money + grow
	}
	m.held[q.Tenant] += nm - l.money
	l.money = nm
	ns := l.slots
	if q.MaxConcurrency == 0 {
		ns = 0
	} else if a.Slots <= l.slots {
		ns = a.Slots
	} else if grow := min(a.Slots-l.slots, q.MaxConcurrency-m.slots[q.Tenant]); grow > 0 {
		ns = l.slots + grow
	}
	m.slots[q.Tenant] += ns - l.slots
	l.slots = ns
	g := leaseGrant{Money: l.money, Slots: l.slots, Took: a.Take, TPMLeft: -1, Left: m.roomLocked(q, now)}
	if g.Left < -1 || (g.Left < 0 && hasBudget(q)) {
		g.Left = 0
	}
	return g, nil
}

func (m *memBank) reconcile(tenant, lid string, sums map[int]money.Money) (money.Money, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.leases[tenant+"|"+lid]
	if l == nil || l.closed {
		return 0, nil
	}
	for w, s := range sums {
		kind := byte('d')
		if w < 1000000 {
			kind = 'm'
		}
		rk := string(kind) + ":" + itoa(w)
		if diff := s - l.reported[rk]; diff > 0 {
			m.spent[memWin(tenant, kind, w)] += diff
			l.reported[rk] += diff
		}
	}
	back := l.money
	m.held[tenant] -= l.money
	m.slots[tenant] -= l.slots
	l.money, l.slots, l.closed = 0, 0, true
	return back, nil
}

// admit is the per-request path of memBank (the exact path): it reserves total for
// id if it fits beyond every reservation and lease.
func (m *memBank) admit(q *Quota, id string, now time.Time, total money.Money) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.roomLocked(q, now); hasBudget(q) && r < total {
		return false
	}
	m.held[q.Tenant] += total
	m.exactly[q.Tenant+"|"+id] = total
	return true
}

// settle is the per-request path's settlement.
func (m *memBank) settle(q *Quota, id string, now time.Time, actual money.Money) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, mo := windows(now)
	m.held[q.Tenant] -= m.exactly[q.Tenant+"|"+id]
	delete(m.exactly, q.Tenant+"|"+id)
	m.spent[memWin(q.Tenant, 'd', d)] += actual
	m.spent[memWin(q.Tenant, 'm', mo)] += actual
}
