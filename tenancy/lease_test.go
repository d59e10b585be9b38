package tenancy

import (
	"testing"
	"time"

	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/internal/redistest"
	"github.com/lmlite/lmlite/money"
)

// TestPlanLease is the table of planLease's decisions: how much to lease, when to
// refill ahead of need, when to give back, when to fall back to the per-request path.
func TestPlanLease(t *testing.T) {
	c := LeaseConfig{}.withDefaults() // Period 1s, LowWater 0.5, Reserve 4, MinGap 50ms
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	w := money.USD(0.01)
	busy := leaseView{Now: t0.Add(500 * time.Millisecond), Last: t0, Budget: true, Granted: true,
		Money: 100 * w, Resv: 10 * w, Left: 1000 * w, MaxW: w, DemMoney: 40 * w, DemReqs: 40}
	cases := []struct {
		name string
		v    func(v leaseView) leaseView
		want leasePlan
	}{
		{"first request: refresh for two worst cases", func(v leaseView) leaseView {
			return leaseView{Now: t0, Budget: true, MaxW: w, DemMoney: w, DemReqs: 1, Left: -1}
		}, leasePlan{Refresh: true, Money: 2 * w}},
		{"busy, plenty free: no refresh; target is 1s of demand", func(v leaseView) leaseView { return v },
			leasePlan{Money: 10*w + 80*w}},
		{"free under half the target: refill ahead of need", func(v leaseView) leaseView { v.Resv, v.Owed = 40*w, 25*w; return v },
			leasePlan{Refresh: true, Money: 40*w + 80*w}},
		{"period over: refresh", func(v leaseView) leaseView { v.Now, v.Money = t0.Add(time.Second), 60*w; return v },
			leasePlan{Refresh: true, Money: 10*w + 40*w}},
		{"period over, demand fell: the free part at most halves", func(v leaseView) leaseView { v.Now = t0.Add(time.Second); return v },
			leasePlan{Refresh: true, Money: 10*w + 45*w}},
		{"within MinGap of the last: never", func(v leaseView) leaseView { v.Now = t0.Add(10 * time.Millisecond); v.Owed = 90 * w; return v },
			leasePlan{Money: 10*w + 40*40*w}},
		{"idle for a period, plenty left beyond the leases: the free money halves", func(v leaseView) leaseView {
			v.Now, v.DemMoney, v.DemReqs = t0.Add(time.Second), 0, 0
			return v
		}, leasePlan{Refresh: true, Money: 10*w + 45*w}},
		{"idle for a period, less left beyond the leases than its free part: given back", func(v leaseView) leaseView {
			v.Now, v.DemMoney, v.DemReqs, v.Left = t0.Add(time.Second), 0, 0, 80*w
			return v
		}, leasePlan{Refresh: true, Money: 10 * w}},
		{"idle for a period, under four worst cases free: given back", func(v leaseView) leaseView {
			v.Now, v.DemMoney, v.DemReqs, v.Money = t0.Add(time.Second), 0, 0, 13*w
			return v
		}, leasePlan{Refresh: true, Money: 10 * w}},
		{"no admission for a period, requests still running: the free part is kept", func(v leaseView) leaseView {
			v.Now, v.DemMoney, v.DemReqs, v.Running = t0.Add(time.Second), 0, 0, 3
			return v
		}, leasePlan{Refresh: true, Money: 100 * w}},
		{"near the ceiling: no free money, per-request path", func(v leaseView) leaseView {
			v.Now, v.Left, v.Money, v.Owed = t0.Add(time.Second), w, 12*w, 0
			return v
		}, leasePlan{Refresh: true, Money: 10 * w, Near: true}},
		{"near the ceiling: no low-water refresh", func(v leaseView) leaseView { v.Left, v.Money, v.Owed = w, 12*w, 0; return v },
			leasePlan{Money: 10 * w, Near: true}},
		{"an earlier day's settlements wait: refresh", func(v leaseView) leaseView { v.OldOwed = true; return v },
			leasePlan{Refresh: true, Money: 90 * w}},
		{"slots: peak plus a quarter, refill at half the headroom", func(v leaseView) leaseView {
			v.Budget, v.MaxConc, v.Slots, v.Flight, v.DemPeak = false, 100, 8, 8, 8
			return v
		}, leasePlan{Refresh: true, Slots: 10}},
		{"slots: capped by the limit", func(v leaseView) leaseView {
			v.Budget, v.MaxConc, v.Slots, v.Flight, v.DemPeak = false, 9, 9, 8, 8
			return v
		}, leasePlan{Slots: 9}},
		{"request tokens: take a period's worth", func(v leaseView) leaseView {
			v.Budget, v.RPS, v.Burst, v.Tokens = false, 1000, 1000, 10
			return v
		}, leasePlan{Refresh: true, Take: 70}},
		{"request tokens: capped by what lies beyond half the burst, which stays for the per-request path", func(v leaseView) leaseView {
			v.Budget, v.RPS, v.Burst, v.Tokens = false, 1000, 20, 5
			return v
		}, leasePlan{Take: 5}},
		{"request tokens: an odd burst leaves its smaller half", func(v leaseView) leaseView {
			v.Budget, v.RPS, v.Burst, v.Tokens = false, 1000, 21, 0
			return v
		}, leasePlan{Refresh: true, Take: 11}},
		{"request tokens: a lease at the cap wants no refill", func(v leaseView) leaseView {
			v.Budget, v.RPS, v.Burst, v.Tokens = false, 1000, 20, 10
			return v
		}, leasePlan{}},
		{"request tokens: a burst of 1 is leased", func(v leaseView) leaseView {
			v.Budget, v.RPS, v.Burst, v.Tokens = false, 1000, 1, 0
			return v
		}, leasePlan{Refresh: true, Take: 1}},
		{"request tokens: given back when idle", func(v leaseView) leaseView {
			v.Now, v.DemReqs, v.DemMoney, v.Budget, v.RPS, v.Burst, v.Tokens = t0.Add(2*time.Second), 0, 0, false, 1000, 20, 15
			return v
		}, leasePlan{Refresh: true, Give: 15}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := planLease(tc.v(busy), c); got != tc.want {
				t.Errorf("planLease =\n %+v, want\n %+v", got, tc.want)
			}
		})
	}
}

// TestLeaseLuaGrantsTheRequestTokensPlanLeaseAsks: for a busy tenant with a full
// requests/s bucket, lease.lua grants exactly the request tokens planLease asks (it
// takes only beyond half the burst, and so does the plan), and with them the plan
// wants no refill: the Go planner and the Lua script agree on the cap, so a lease is
// never below its low-water mark for tokens Redis will not give (a refresh every
// MinGap).
func TestLeaseLuaGrantsTheRequestTokensPlanLeaseAsks(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c, err := rediscli.New(rediscli.Options{URL: srv.URL(0), Name: "bank"})
	if err != nil {
		t.Fatal(err)
	}
	r := NewRedisShared(c, RedisOptions{KeyPrefix: "test:", Node: "n"})
	t.Cleanup(func() { r.Close(); c.Close() })
	b := &redisBank{r: r, owner: "o"}
	cfg := LeaseConfig{}.withDefaults()
	for _, burst := range []int{1, 2, 3, 20, 21, 100} {
		now := time.Now()
		q := &Quota{Tenant: "t" + itoa(burst), RequestsPerSecond: 1000, Burst: burst}
		v := leaseView{Now: now, Last: now.Add(-500 * time.Millisecond), Granted: true, RPS: 1000, Burst: burst, DemReqs: 400}
		p := planLease(v, cfg)
		g, err := b.refresh(q, now, &leaseAsk{Lease: "A", Seq: 1, Take: p.Take})
		if err != nil {
			t.Fatal(err)
		}
		if g.Took != p.Take {
			t.Errorf("burst %d: planLease asked %d request tokens, lease.lua granted %d", burst, p.Take, g.Took)
		}
		v.Tokens = g.Took
		if p2 := planLease(v, cfg); p2.Refresh || p2.Take != 0 {
			t.Errorf("burst %d: holding the %d tokens granted, planLease wants %+v, want no refresh", burst, g.Took, p2)
		}
	}
}
