package tenancy

import (
	"math"
	"time"

	"github.com/lmlite/lmlite/money"
)

// LeaseConfig sizes the leases of LeaseShared. The zero value works: every field says
// its default.
type LeaseConfig struct {
	// Period is the target period of recent demand a lease covers, and how often a
	// lease whose demand fell (or stopped) gives back half its free part at least; 1s.
	Period time.Duration
	// LowWater is the fraction of a lease's target left free at which it is refilled,
	// ahead of need; 0.5.
	LowWater float64
	// Reserve is how many requests' worst case a lease always leaves to the per-request
	// path: what is left beyond every lease never falls below it by a grant, and a
	// tenant with less than that left (near its ceiling) gets no lease; 4.
	Reserve int
	// Term is how long after Redis last answered a refresh the process keeps serving
	// from the lease while refreshes fail (Redis down): the money it holds, its slots
	// and request tokens, then this process's share of the rates; past it the lease
	// serves nothing until Redis answers again; 10s.
	Term time.Duration
	// MinGap is the least time between two refreshes of one tenant's lease (a refresh
	// that fails is not retried sooner); Period/20, at most 25ms.
	MinGap time.Duration
}

func (c LeaseConfig) withDefaults() LeaseConfig {
	if c.Period <= 0 {
		c.Period = time.Second
	}
	if c.LowWater <= 0 || c.LowWater >= 1 {
		c.LowWater = 0.5
	}
	if c.Reserve <= 0 {
		c.Reserve = 4
	}
	if c.Term <= 0 {
		c.Term = 10 * time.Second
	}
	if c.MinGap <= 0 {
		c.MinGap = min(c.Period/20, 25*time.Millisecond)
	}
	return c
}

// leaseView is what planLease decides from: one tenant's lease as this process holds
// it, its limits and its demand since the last refresh. Plain data.
type leaseView struct {
	Now, Last time.Time // Last: when the last refresh was sent (zero: never)

	Budget  bool    // the tenant has a day or month ceiling
	MaxConc int     // its concurrency limit; 0: none
	RPS     float64 // its requests/s; 0: none
	Burst   int

	Granted bool        // a refresh has answered
	Money   money.Money // the lease: money Redis holds for this process
	Resv    money.Money // of it, reserved by requests in flight
	Owed    money.Money // of it, settled and not yet reported (spent)
	Left    money.Money // what was left beyond every reservation and lease at the last answer; -1: no ceiling
	Slots   int         // concurrency slots leased
	Flight  int         // of them, held by requests in flight
	Running int         // requests served from the lease and not settled yet
	Tokens  int         // request tokens (requests/s) held

	MaxW     money.Money // the largest worst case reserved recently
	DemMoney money.Money // worst cases reserved since Last
	DemReqs  int         // requests admitted since Last (leased or not)
	DemPeak  int         // most requests in flight at once since Last
	OldOwed  bool        // settlements of an earlier day are not yet reported
}

// leasePlan is planLease's decision: whether to refresh now, and the lease to ask for.
type leasePlan struct {
	Refresh bool
	Money   money.Money // the lease wanted after the refresh (its reservations included)
	Slots   int         // the slots wanted
	Take    int         // request tokens to take
	Give    int         // request tokens to give back
	Near    bool        // near the ceiling: no free money leased, requests go one by one
}

// free is the lease's money not reserved or spent.
func (v *leaseView) free() money.Money { return v.Money - v.Resv - v.Owed }

// leaseTokenCap is the most request tokens a lease holds for a tenant whose
// requests/s burst is burst: what lies beyond half the burst (rounded down), which
// stays in the tenant's bucket for the per-request path (lease.lua takes tokens only
// beyond it), so a request that finds the lease out of tokens between refreshes is
// not refused while the tenant is under its rate; at least 1.
func leaseTokenCap(burst int) int { return max(1, burst-burst/2) }

// planLease decides, at v.Now, what the tenant's lease should be and whether to ask
// for it now. The lease covers Period of the demand seen since the last refresh (its
// worst cases, its requests, its peak in flight), at least two requests' worst case
// while the tenant is busy, no less than its free part while requests run with no
// new admission (their clients wait on them), no less than half its free part at
// a period's refresh (a shrink for demand that fell halves it at most per period, and so
// does an idle lease's while what is left beyond the leases is at least its free part;
// otherwise, or once half is under two worst cases, an idle lease is given back whole), and
// nothing beyond its reservations when what is left is under Reserve requests'
// worst case (near the ceiling: the per-request path, exact). Request tokens cover
// Period of the requests seen, at most leaseTokenCap of the burst. It refreshes when the
// interval is over (every Period), when the free part of the money, the slots or the
// request tokens falls under LowWater of its target (ahead of need), when an earlier
// day's settlements wait, and at first; never sooner than MinGap after the last.
func planLease(v leaseView, c LeaseConfig) leasePlan {
	elapsed := v.Now.Sub(v.Last)
	if v.Last.IsZero() || elapsed > c.Period {
		elapsed = c.Period
	}
	elapsed = max(elapsed, c.MinGap) // the demand of a short interval is scaled by at most Period/MinGap
	scale := float64(c.Period) / float64(elapsed)
	idle := v.DemReqs == 0 && v.Running == 0 && !v.Last.IsZero() && v.Now.Sub(v.Last) >= c.Period
	// No admission since the last refresh but requests still running (their clients
	// wait on them, e.g. on a slow engine): the demand has not gone, it waits; the
	// free part is kept rather than cut to two worst cases.
	waiting := v.DemReqs == 0 && v.Running > 0
	var p leasePlan
	var freeWant money.Money
	if v.Budget {
		freeWant = max(money.Money(float64(v.DemMoney)*scale), 2*v.MaxW)
		if waiting {
			freeWant = max(freeWant, v.free())
		}
		if v.Granted && v.Now.Sub(v.Last) >= c.Period {
			// Demand fell over a whole period: the free part shrinks at most by half
			// a period, not to the target at once. A shrink takes effect when its refresh is sent; if
			// that refresh fails (Redis just went down) the process cannot know whether
			// Redis applied it, so it keeps the shrunk lease through the outage
			// (docs/REDIS.md, "Redis down"): halving keeps at least half of what it
			// held free to serve from.
			freeWant = max(freeWant, v.free()/2)
		}
		if v.Left >= 0 && v.Granted && v.Left+v.free() < money.Money(c.Reserve)*v.MaxW {
			p.Near, freeWant = true, 0
		}
		if idle && !p.Near {
			// Idle for a period: given back, halving too (the same reason) while what
			// is left beyond the leases is at least the free part (the other processes
			// are not short of it), whole once half is under two worst cases.
			freeWant = 0
			if half := v.free() / 2; half >= 2*v.MaxW && v.Left >= v.free() {
				freeWant = half
			}
		}
		p.Money = v.Resv + freeWant
	}
	var slotWant int
	if v.MaxConc > 0 {
		peak := max(v.DemPeak, v.Flight)
		slotWant = peak + max(1, peak/4)
		if idle {
			slotWant = v.Flight
		}
		p.Slots = min(slotWant, v.MaxConc)
	}
	var tokWant int
	if v.RPS > 0 {
		tokWant = min(int(math.Ceil(float64(v.DemReqs)*scale)), leaseTokenCap(v.Burst))
		if v.DemReqs > 0 {
			tokWant = max(tokWant, 1)
		}
		if idle {
			p.Give = v.Tokens
		} else if tokWant > v.Tokens {
			p.Take = tokWant - v.Tokens
		}
	}

	if !v.Last.IsZero() && v.Now.Sub(v.Last) < c.MinGap {
		return p
	}
	low := func(have, want int64) bool { return want > 0 && float64(have) < c.LowWater*float64(want) }
	switch {
	case !v.Granted, v.Now.Sub(v.Last) >= c.Period, v.OldOwed:
		p.Refresh = true
	case v.Budget && !p.Near && low(int64(v.free()), int64(freeWant)):
		p.Refresh = true
	case v.MaxConc > 0 && low(int64(v.Slots-v.Flight), int64(slotWant-v.Flight)):
		p.Refresh = true
	case v.RPS > 0 && low(int64(v.Tokens), int64(tokWant)):
		p.Refresh = true
	}
	return p
}
