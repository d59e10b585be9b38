package usage

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/internal/redistest"
	"github.com/lmlite/lmlite/money"
)

// sliceSource is a ledger as a slice: entry i has seq i+1.
type sliceSource []Event

func (s sliceSource) ID() string { return "slice" }

func (s sliceSource) UsageSince(seq uint64, fn func(uint64, Event) error) error {
	for i := int(seq); i < len(s); i++ {
		if err := fn(uint64(i+1), s[i]); err != nil {
			return err
		}
	}
	return nil
}

// A batch sent again after its reply was lost (the process still believes it
// unsent) is skipped by the script when Redis's seq covers it, and refused when it
// overlaps it, then resent from Redis's seq: nothing counts twice.
func TestRedisScriptSkipsWhatItCounted(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c, err := rediscli.New(rediscli.Options{URL: srv.URL(0), Name: "script-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	now := time.Now().UTC()
	var src sliceSource
	more := func(n int) {
		for range n {
			src = append(src, settled(now, "a", "m", "fast", 10, 1, 3, time.Millisecond))
		}
	}
	r := NewRedis(c, nil, RedisOptions{KeyPrefix: "s:", Every: time.Hour})
	defer r.Close()
	ctx := context.Background()
	requests := func() int64 {
		t.Helper()
		bs, err := r.Query(Query{Start: now, End: now.Add(time.Nanosecond), Width: Day})
		if err != nil || len(bs) != 1 || len(bs[0].Results) != 1 {
			t.Fatalf("%+v %v", bs, err)
		}
		return bs[0].Results[0].Requests
	}
	more(10)
	r.src = src
	if err := r.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	more(5)
	r.src = src
	if err := r.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	// The reply of 11..15 was lost: the same batch again is skipped.
	r.pubMu.Lock()
	r.sent = 10
	r.pubMu.Unlock()
	if err := r.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	if n := requests(); n != 15 {
		t.Fatalf("after resending 11..15: %d requests, want 15", n)
	}
	// Believing nothing sent, with one more entry: 1..16 overlaps 1..15 and is
	// refused; the next publish asks Redis and sends 16 alone.
	more(1)
	r.src = src
	r.pubMu.Lock()
	r.sent = 0
	r.pubMu.Unlock()
	if err := r.Publish(ctx); err == nil {
		t.Fatal("an overlapping batch was taken")
	}
	if err := r.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	if n := requests(); n != 16 {
		t.Fatalf("after the overlap: %d requests, want 16", n)
	}
}

// BenchmarkRedisQuery30Days publishes 1,000,000 settlements over 1,000 tenants spread
// over the last 30 days to a real redis-server, then times 30-day queries as
// BenchmarkQuery30DaysFromBolt does (p95 in ms; publish-s is the setup's publishing
// time).
func BenchmarkRedisQuery30Days(b *testing.B) {
	const tenants, requests = 1000, 1_000_000
	srv := redistest.Start(b, redistest.Options{})
	c, err := rediscli.New(rediscli.Options{URL: srv.URL(0), Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	end := time.Now().UTC().Truncate(24 * time.Hour)
	from := end.Add(-30 * 24 * time.Hour)
	rnd := rand.New(rand.NewPCG(3, 4))
	models := []string{"tiny", "small", "big"}
	tiersOf := []string{"fast", "balanced", "smart"}
	names := make([]string, tenants)
	for i := range names {
		names[i] = fmt.Sprintf("tenant-%04d", i)
	}
	src := make(sliceSource, requests)
	for i := range src {
		k := rnd.IntN(3)
		src[i] = settled(from.Add(time.Duration(int64(i)*int64(end.Sub(from))/requests)), names[rnd.IntN(tenants)], models[k], tiersOf[k],
			100+rnd.IntN(900), rnd.IntN(500), money.Money(rnd.IntN(1e6)), time.Duration(rnd.IntN(3000))*time.Millisecond)
	}
	r := NewRedis(c, src, RedisOptions{KeyPrefix: "b:", Every: time.Hour})
	defer r.Close()
	start := time.Now()
	if err := r.Publish(context.Background()); err != nil {
		b.Fatal(err)
	}
	publish := time.Since(start)
	b.ResetTimer()
	for _, q := range []struct {
		name string
		q    func(i int) Query
	}{
		{"tenant_by_day", func(i int) Query {
			return Query{Tenants: []string{names[i%tenants]}, Start: from, End: end, Width: Day, ByModel: true, ByTier: true}
		}},
		{"tenant_by_hour", func(i int) Query {
			return Query{Tenants: []string{names[i%tenants]}, Start: from, End: end, Width: Hour, ByModel: true}
		}},
		{"all_by_day", func(i int) Query { return Query{Start: from, End: end, Width: Day, ByModel: true} }},
	} {
		b.Run(q.name, func(b *testing.B) {
			var lat []time.Duration
			i := 0
			for b.Loop() {
				s := time.Now()
				if _, err := r.Query(q.q(i)); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(s))
				i++
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)*95/100])/1e6, "p95-ms")
			b.ReportMetric(publish.Seconds(), "publish-s")
		})
	}
}
