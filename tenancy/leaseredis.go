package tenancy

import (
	"context"
	_ "embed"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lmlite/lmlite/money"
)

//go:embed lua/lease.lua
var leaseLua string

//go:embed lua/reconcile.lua
var reconcileLua string

//go:embed lua/release.lua
var releaseLua string

// leaseScript refreshes a lease (lua/lease.lua); reconcileScript closes one whose
// holder is gone (lua/reconcile.lua).
var (
	leaseScript     = redis.NewScript(luaBase + luaReap + luaGCRAAt + leaseLua)
	reconcileScript = redis.NewScript(luaBase + reconcileLua)
	releaseScript   = redis.NewScript(luaBase + releaseLua)
)

// leaseKeep is how long a lease key outlives its last refresh: a holder that died is
// reconciled at its restart, or by an operator, within it.
const leaseKeep = 40 * 24 * time.Hour

// redisBank is leaseBank in Redis, beside RedisShared's keys (docs/REDIS.md):
//
//	P t:{T}:lease:LID   hash: money (leased, counted in t:{T}:s =held), slots (counted in
//	                    =n), seq (the last report applied), owner (the holder's ledger, its
//	                    store id), d:YYYYMMDD and m:YYYYMM (money reported per window),
//	                    closed (reconciled)
//	P leases:{OWNER}    set: "LID TENANT" of every lease the ledger OWNER holds (and of
//	                    every tenant it admitted on the per-request path), for its
//	                    reconciliation at restart
type redisBank struct {
	r     *RedisShared
	owner string
}

func (b *redisBank) leaseKey(tenant, lid string) string { return b.r.base(tenant) + "lease:" + lid }

func (b *redisBank) indexKey(owner string) string { return b.r.prefix + "leases:{" + owner + "}" }

func (b *redisBank) refresh(q *Quota, now time.Time, a *leaseAsk) (leaseGrant, error) {
	tk := b.r.tenantKeys(q.Tenant, now)
	keys := append(tk[:3:3], b.leaseKey(q.Tenant, a.Lease), tk[3])
	args := []any{a.Seq, int64(q.DailyBudget), int64(q.MonthlyBudget), q.MaxConcurrency}
	args = append(args, gcraArgs(rpsLimit(q), q.RequestsPerSecond > 0)...)
	args = append(args, gcraArgs(tpmLimit(q), q.TokensPerMinute > 0)...)
	args = append(args, int64(a.Money), a.Slots, a.Take, a.Give, a.Tokens, int64(a.Reserve), b.owner,
		int64(leaseKeep/time.Second), len(a.Reports))
	for _, r := range a.Reports {
		t := time.Date(r.Day/10000, time.Month(r.Day/100%100), r.Day%100, 12, 0, 0, 0, time.UTC)
		dexp, mexp := windowExpiry(t)
		base := b.r.base(q.Tenant)
		keys = append(keys, base+"spent:d:"+strconv.Itoa(r.Day), base+"spent:m:"+strconv.Itoa(r.Month))
		args = append(args, int64(r.Amount), r.Day, r.Month, dexp, mexp)
	}
	c, cancel := ctx()
	defer cancel()
	v, err := leaseScript.Run(c, b.r.c, keys, args...).Slice()
	if err != nil {
		b.r.failed(err)
		return leaseGrant{}, unavailable("lease", err)
	}
	s, _ := v[3].(string)
	tl, _ := strconv.ParseFloat(s, 64)
	g := leaseGrant{Money: money.Money(v[0].(int64)), Slots: int(v[1].(int64)), Took: int(v[2].(int64)), TPMLeft: tl,
		Left: roomOf([]any{nil, v[4], v[5]})}
	b.r.noteRoom(q, g.Left)
	return g, nil
}

// register adds lease lid of tenant to its owner's index, once, before its first
// refresh: a lease Redis holds is always found by its owner's reconciliation.
func (b *redisBank) register(tenant, lid string) error {
	c, cancel := ctx()
	defer cancel()
	if err := b.r.c.SAdd(c, b.indexKey(b.owner), lid+" "+tenant).Err(); err != nil {
		return unavailable("lease index", err)
	}
	return nil
}

// forget removes a lease that was given back whole (Close) from its owner's index
// and deletes its key.
func (b *redisBank) forget(tenant, lid string) {
	c, cancel := ctx()
	defer cancel()
	b.r.c.Del(c, b.leaseKey(tenant, lid))
	b.r.c.SRem(c, b.indexKey(b.owner), lid+" "+tenant)
}

func (b *redisBank) reconcile(tenant, lid string, sums map[int]money.Money) (money.Money, error) {
	keys := []string{b.r.base(tenant) + "s", b.leaseKey(tenant, lid)}
	days, months := []int{}, map[int]bool{}
	for w := range sums {
		if w >= 1000000 {
			days = append(days, w)
		}
	}
	sort.Ints(days)
	args := []any{0}
	add := func(d, m int, ld, lm money.Money) {
		t := time.Date(d/10000, time.Month(d/100%100), d%100, 12, 0, 0, 0, time.UTC)
		dexp, mexp := windowExpiry(t)
		base := b.r.base(tenant)
		keys = append(keys, base+"spent:d:"+strconv.Itoa(d), base+"spent:m:"+strconv.Itoa(m))
		args = append(args, int64(ld), d, int64(lm), m, dexp, mexp)
	}
	for _, d := range days {
		m := d / 100
		lm := money.Money(-1)
		if !months[m] {
			months[m], lm = true, sums[m]
		}
		add(d, m, sums[d], lm)
	}
	for w, s := range sums { // a month without a day (not written by Store: kept whole)
		if w < 1000000 && !months[w] {
			add(w*100+1, w, -1, s)
		}
	}
	args[0] = (len(args) - 1) / 6
	c, cancel := ctx()
	defer cancel()
	v, err := reconcileScript.Run(c, b.r.c, keys, args...).Int64Slice()
	if err != nil {
		return 0, unavailable("reconcile", err)
	}
	return money.Money(v[0]), nil
}

// LeaseSums returns, from store's ledger, what the entries settled from each lease
// (Entry.Lease) charged, by lease id and by window (yyyymmdd for a day, yyyymm for a
// month): what a lease's reconciliation raises Redis's spend to.
func LeaseSums(store *Store) (map[string]map[int]money.Money, error) {
	out := map[string]map[int]money.Money{}
	err := store.Ledger(func(e Entry) error {
		if e.Lease == "" || e.Cost == 0 {
			return nil
		}
		m := out[e.Lease]
		if m == nil {
			m = map[int]money.Money{}
			out[e.Lease] = m
		}
		d, mo := windows(e.Time)
		m[d] += e.Cost
		m[mo] += e.Cost
		return nil
	})
	return out, err
}

// ReconcileLeases closes every lease the Redis of c (keys under keyPrefix) holds for
// the ledger owner (a store's ID) except the lease id keep (this process's own): each
// lease's windows are charged what sums (LeaseSums of that ledger) says it settled
// beyond what it reported, and the rest of it is given back. It returns the money given
// back. Run at start with the process's own store (LeaseShared.Reconcile), or by an
// operator with the ledger of a process that will not return (lmlite ledger verify
// --release).
func ReconcileLeases(c redis.UniversalClient, keyPrefix, owner, keep string, sums map[string]map[int]money.Money) (money.Money, error) {
	return ReconcileOwner(c, keyPrefix, owner, keep, sums, nil)
}

// ReconcileOwner is ReconcileLeases that also gives back the per-request tickets
// (reservations and slots, ids TicketPrefix(owner)…) the owner's earlier runs left in
// Redis for the tenants of those leases, except the tickets held (the ledger's holds:
// SettleInterrupted charges them). Such a ticket was admitted on the per-request path
// and its process died before its hold reached the ledger (the hold is logged once the
// request runs, after its reservation): nothing else returns it before it expires. A
// tenant's first per-request admission registers the tenant in the owner's index
// (LeaseShared.admitExact), so every tenant with such a ticket is found. nil held:
// every one of the owner's tickets is given back (a process that never returns: its
// holds are never charged, as when the tickets expire).
func ReconcileOwner(c redis.UniversalClient, keyPrefix, owner, keep string, sums map[string]map[int]money.Money, held map[string]bool) (money.Money, error) {
	if keyPrefix == "" {
		keyPrefix = "lmlite:"
	}
	r := &RedisShared{c: c, prefix: keyPrefix}
	b := &redisBank{r: r, owner: owner}
	cx, cancel := ctx()
	members, err := c.SMembers(cx, b.indexKey(owner)).Result()
	cancel()
	if err != nil {
		return 0, unavailable("lease index", err)
	}
	var back money.Money
	// The tickets first, each tenant once, before any index entry goes: a failure
	// leaves the index whole for the next reconciliation.
	released := map[string]bool{}
	for _, mem := range members {
		lid, tenant, ok := strings.Cut(mem, " ")
		if !ok || lid == keep || released[tenant] {
			continue
		}
		released[tenant] = true
		n, err := releaseTickets(r, tenant, TicketPrefix(owner), held)
		if err != nil {
			return back, err
		}
		back += n
	}
	for _, mem := range members {
		lid, tenant, ok := strings.Cut(mem, " ")
		if !ok || lid == keep {
			continue
		}
		n, err := b.reconcile(tenant, lid, sums[lid])
		if err != nil {
			return back, err
		}
		back += n
		cx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = c.SRem(cx, b.indexKey(owner), mem).Err()
		cancel()
		if err != nil {
			return back, fmt.Errorf("tenancy: lease index: %w", err)
		}
	}
	return back, nil
}

// releaseTickets gives back tenant's tickets whose ids start with prefix, except held
// (lua/release.lua); it returns the money given back.
func releaseTickets(r *RedisShared, tenant, prefix string, held map[string]bool) (money.Money, error) {
	args := make([]any, 0, 1+len(held))
	args = append(args, prefix)
	for id := range held {
		if strings.HasPrefix(id, prefix) {
			args = append(args, id)
		}
	}
	b := r.base(tenant)
	c, cancel := ctx()
	defer cancel()
	v, err := releaseScript.Run(c, r.c, []string{b + "s", b + "z"}, args...).Int64Slice()
	if err != nil {
		return 0, unavailable("release tickets", err)
	}
	return money.Money(v[0]), nil
}
