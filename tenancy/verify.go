package tenancy

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/lmlite/lmlite/money"
)

// SpendWindow names one budget window of a tenant: kind 'd' (Window is yyyymmdd) or
// 'm' (yyyymm).
type SpendWindow struct {
	Tenant string
	Kind   byte
	Window int
}

func (w SpendWindow) String() string {
	k := "day"
	if w.Kind == 'm' {
		k = "month"
	}
	return fmt.Sprintf("%s %s %d", w.Tenant, k, w.Window)
}

// Reconciled is one window's spend in the ledgers and in Redis.
type Reconciled struct {
	SpendWindow
	Ledgers, Redis money.Money
	InRedis        bool // false: Redis has no key for the window (never charged there, or expired)
}

// Match reports whether the ledgers and Redis agree to the nano-dollar.
func (r Reconciled) Match() bool { return r.Ledgers == r.Redis }

// LedgerSpend sums the costs in the ledgers of stores by tenant and window.
func LedgerSpend(stores ...*Store) (map[SpendWindow]money.Money, error) {
	out := map[SpendWindow]money.Money{}
	for _, s := range stores {
		err := s.Ledger(func(e Entry) error {
			if e.Cost == 0 {
				return nil
			}
			d, m := windows(e.Time)
			out[SpendWindow{e.Tenant, 'd', d}] += e.Cost
			out[SpendWindow{e.Tenant, 'm', m}] += e.Cost
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ReconcileRedis compares ledger spend (LedgerSpend of every process's ledger) with
// the settled spend RedisShared keeps under keyPrefix: every window either side
// knows, sorted. Run it with the processes stopped (each holds its ledger open), and
// after their queued settlements reached Redis.
func ReconcileRedis(ctx context.Context, c redis.UniversalClient, keyPrefix string, ledgers map[SpendWindow]money.Money) ([]Reconciled, error) {
	all := map[SpendWindow]*Reconciled{}
	for w, v := range ledgers {
		all[w] = &Reconciled{SpendWindow: w, Ledgers: v}
	}
	iter := c.Scan(ctx, 0, keyPrefix+"t:{*}:spent:*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		rest := strings.TrimPrefix(k, keyPrefix+"t:{")
		i := strings.LastIndex(rest, "}:spent:")
		if i < 0 {
			continue
		}
		tenant, win := rest[:i], rest[i+len("}:spent:"):]
		if len(win) < 3 || (win[0] != 'd' && win[0] != 'm') {
			continue
		}
		n, err := strconv.Atoi(win[2:])
		if err != nil {
			continue
		}
		v, err := c.Get(ctx, k).Int64()
		if err != nil && err != redis.Nil {
			return nil, fmt.Errorf("tenancy: redis %s: %w", k, err)
		}
		w := SpendWindow{tenant, win[0], n}
		r := all[w]
		if r == nil {
			r = &Reconciled{SpendWindow: w}
			all[w] = r
		}
		r.Redis, r.InRedis = money.Money(v), true
	}
	if err := iter.Err(); err != nil {
		return nil, fmt.Errorf("tenancy: redis scan: %w", err)
	}
	out := make([]Reconciled, 0, len(all))
	for _, r := range all {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Tenant != b.Tenant {
			return a.Tenant < b.Tenant
		}
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		return a.Window < b.Window
	})
	return out, nil
}
