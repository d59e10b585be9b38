package usage_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/internal/redistest"
	"github.com/lmlite/lmlite/money"
	"github.com/lmlite/lmlite/tenancy"
	"github.com/lmlite/lmlite/usage"
)

// t0 is where the entries start: a few hours ago, as Redis expires minute buckets by
// its own clock.
var t0 = time.Now().UTC().Truncate(time.Hour).Add(-31 * time.Hour)

func redisClient(t *testing.T, srv *redistest.Server) *redis.Client {
	t.Helper()
	c, err := rediscli.New(rediscli.Options{URL: srv.URL(0), Name: "usage-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func openStore(t *testing.T, path string) *tenancy.Store {
	t.Helper()
	s, err := tenancy.Open(path, tenancy.Options{Sync: tenancy.SyncProcess})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// record writes n random ledger entries (3 tenants, 2 models, 2 tiers, some refused
// after admission) over span from t0, named prefix-i.
func record(t *testing.T, s *tenancy.Store, r *rand.Rand, prefix string, n int, span time.Duration) {
	t.Helper()
	for i := range n {
		e := tenancy.Entry{Time: t0.Add(time.Duration(r.Int64N(int64(span)))), RequestID: prefix + strconv.Itoa(i),
			Tenant: []string{"a", "b", "c"}[r.IntN(3)], Model: []string{"m1", "m2"}[r.IntN(2)],
			Tier: []string{"fast", "smart"}[r.IntN(2)], Status: 200, PromptTokens: r.IntN(1000),
			CompletionTokens: r.IntN(300), Cost: money.Money(r.IntN(1e7)), Latency: time.Duration(r.IntN(4000)) * time.Millisecond}
		e.CachedTokens = r.IntN(e.PromptTokens + 1)
		if r.IntN(5) == 0 { // waited for its model's load or worker's start
			e.ColdStart = time.Duration(1+r.IntN(3000)) * time.Millisecond
		}
		if e.CompletionTokens%4 == 0 { // structured output (no draw, so the other fields stay as they were)
			e.GrammarTime = time.Duration(e.CompletionTokens+1) * time.Millisecond
		}
		if r.IntN(6) == 0 {
			e.Status, e.Refused, e.Cost = 429, "budget", 0
		}
		if err := s.Record(e); err != nil {
			t.Fatal(err)
		}
	}
}

var groupings = [][3]bool{{false, false, false}, {true, true, true}, {true, false, false}, {false, true, true}}

// sameAnswers checks that the Redis rollups answer every width and grouping over
// [from, to) as want does.
func sameAnswers(t *testing.T, got, want usage.Rollups, from, to time.Time) {
	t.Helper()
	for w := range []usage.Width{usage.Minute, usage.Hour, usage.Day} {
		for _, g := range groupings {
			q := usage.Query{Start: from, End: to, Width: usage.Width(w), ByTenant: g[0], ByModel: g[1], ByTier: g[2]}
			a, err1 := got.Query(q)
			b, err2 := want.Query(q)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			if !reflect.DeepEqual(a, b) {
				t.Errorf("width %s grouping %v: Redis answers differently", usage.Width(w), g)
				return
			}
		}
	}
}

// Two processes' ledgers published to one Redis: each process's usage API answers
// every query with the sum of both ledgers, exactly as the embedded rollups of both
// together do.
func TestRedisRollupsSumEveryProcessLedger(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	r := rand.New(rand.NewPCG(5, 6))
	span := 30 * time.Hour
	want := usage.NewMemory()
	var procs []*usage.Redis
	for p := range 2 {
		s := openStore(t, filepath.Join(t.TempDir(), "lmlite.db"))
		defer s.Close()
		record(t, s, r, fmt.Sprintf("p%d-", p), 1500, span)
		if _, err := s.LoadRollups(want, t0.Add(span)); err != nil {
			t.Fatal(err)
		}
		ru := usage.NewRedis(redisClient(t, srv), s, usage.RedisOptions{KeyPrefix: "lmlite:", Every: time.Hour})
		defer ru.Close()
		procs = append(procs, ru)
	}
	procs[1].Publish(context.Background()) // each Query publishes its own process's ledger
	for _, ru := range procs {
		sameAnswers(t, ru, want, t0, t0.Add(span))
	}
	if ts := procs[0].Tenants(); !reflect.DeepEqual(ts, []string{"a", "b", "c"}) {
		t.Errorf("tenants %v", ts)
	}
}

// A process restarted on its ledger (it does not know what it published), one whose
// writes failed while Redis was down, and a publish repeated by hand never count a
// settlement twice; what was settled while Redis was down is counted once it is back.
func TestRedisPublishesEachSettlementOnce(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Persist: true})
	r := rand.New(rand.NewPCG(7, 8))
	path := filepath.Join(t.TempDir(), "lmlite.db")
	s := openStore(t, path)
	c := redisClient(t, srv)
	ru := usage.NewRedis(c, s, usage.RedisOptions{KeyPrefix: "x:", Every: time.Hour})
	record(t, s, r, "a-", 700, 5*time.Hour)
	ctx := context.Background()
	if err := ru.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	record(t, s, r, "b-", 700, 5*time.Hour)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	if err := ru.Publish(short); err == nil {
		t.Fatal("published with Redis down")
	}
	cancel()
	srv.Restart()
	record(t, s, r, "c-", 300, 5*time.Hour)
	if err := ru.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	ru.Publish(ctx)
	ru.Close()
	s.Close()

	// The process restarts: new rollups on the reopened store, one more entry.
	s = openStore(t, path)
	defer s.Close()
	record(t, s, r, "d-", 1, 5*time.Hour)
	again := usage.NewRedis(c, s, usage.RedisOptions{KeyPrefix: "x:", Every: time.Hour})
	defer again.Close()
	want := usage.NewMemory()
	if _, err := s.LoadRollups(want, t0.Add(5*time.Hour)); err != nil {
		t.Fatal(err)
	}
	sameAnswers(t, again, want, t0, t0.Add(5*time.Hour))
	// The entries may straddle midnight (t0 follows the clock): count every day bucket.
	bs, _ := again.Query(usage.Query{Start: t0, End: t0.Add(48 * time.Hour), Width: usage.Day})
	n := int64(0)
	for _, b := range bs {
		for _, res := range b.Results {
			n += res.Requests
		}
	}
	if n != 1701 {
		t.Errorf("Redis counts %d settlements, the ledger holds 1701", n)
	}
}

// Minute hashes expire 48 h after their minute, hour hashes 90 days after their hour,
// day hashes never; refusals before admission are counted from the ledger's entries.
func TestRedisRetentionAndRefusals(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c := redisClient(t, srv)
	s := openStore(t, filepath.Join(t.TempDir(), "lmlite.db"))
	defer s.Close()
	now := time.Now().UTC().Truncate(time.Second)
	if err := s.Record(tenancy.Entry{Time: now, RequestID: "r", Tenant: "a", Model: "m", Tier: "fast", Status: 200, Cost: 5}); err != nil {
		t.Fatal(err)
	}
	if err := s.Record(tenancy.Entry{Time: now, RequestID: "q", Tenant: "a", Status: 429, Refused: "rate", NotAdmitted: true}); err != nil {
		t.Fatal(err)
	}
	ru := usage.NewRedis(c, s, usage.RedisOptions{KeyPrefix: "p:", Every: time.Hour})
	defer ru.Close()
	if err := ru.Publish(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, w := range []usage.Width{usage.Minute, usage.Hour, usage.Day} {
		i := w.Start(now).Unix() / int64(w.Duration()/time.Second)
		key := "p:u:{a}:" + w.String() + ":" + strconv.FormatInt(i, 10)
		exp, err := c.ExpireTime(context.Background(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		want := time.Duration(-1) // no expiry
		if w.Retention() > 0 {
			want = time.Duration(w.Start(now).Add(w.Duration()+w.Retention()).Unix()) * time.Second
		}
		if exp != want {
			t.Errorf("%s hash %s expires at %v, want %v", w, key, exp, want)
		}
	}
	bs, err := ru.Query(usage.Query{Tenants: []string{"a"}, Start: now, End: now.Add(time.Second), Width: usage.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if got := bs[0].Results[0]; got.Requests != 1 || got.Cost != 5 || got.Refused(usage.Rate) != 1 {
		t.Errorf("minute: %+v, want 1 request, 5 nano-USD, 1 rate refusal", got)
	}
}
