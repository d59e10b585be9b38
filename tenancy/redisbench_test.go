package tenancy

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lmlite/lmlite/internal/redistest"
)

// redisCPU is the server's user + system CPU so far (INFO cpu).
func redisCPU(b *testing.B, c *redis.Client) time.Duration {
	b.Helper()
	s, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, l := range strings.Split(s, "\r\n") {
		k, v, _ := strings.Cut(l, ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f
		}
	}
	return time.Duration(sum * float64(time.Second))
}

// BenchmarkRedisFlush is redis-server's CPU per request (admitted and then settled,
// the bench's quota: every limit on) for flushes of k admissions and k settlements of
// one tenant, against a real redis-server, one flush per round trip from one client:
// where the Redis side's cost per request is. Beside it, for the floor: "ping", one
// round trip of PING per request (the network and event loop alone), and "eval-empty",
// a script that only answers, with the flush's keys and arguments (EVALSHA's own cost).
//
//	go test -run '^$' -bench BenchmarkRedisFlush -benchtime 20000x ./tenancy/
func BenchmarkRedisFlush(b *testing.B) {
	srv := redistest.Start(b, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	b.Cleanup(func() { c.Close() })
	ctx := context.Background()
	q := Quota{Tenant: "bench", RequestsPerSecond: 1e6, Burst: 1e6, TokensPerMinute: 1e9, MaxConcurrency: 4096, DailyBudget: 1e18}
	r := &RedisShared{prefix: "b:", ttl: 30 * time.Second}
	empty := redis.NewScript(`return {}`)
	run := func(b *testing.B, k int, sc *redis.Script) {
		now := time.Now()
		bs := r.base(q.Tenant)
		keys := r.tenantKeys(q.Tenant, now)
		dexp, mexp := windowExpiry(now)
		prev := []string{}
		next := 0
		cpu0 := redisCPU(b, c)
		b.ResetTimer()
		for range b.N {
			s := &script{}
			for range k {
				next++
				id := "tk" + strconv.Itoa(next)
				s.admits = append(s.admits, &batchCall{group: batchGroup{q: q}, keys: keys, args: []any{id, int64(50000), 20}})
			}
			for _, id := range prev {
				s.settles = append(s.settles, &batchCall{settle: true, keys: keys, exp: [2]int64{dexp, mexp}, key: [2]string{bs + "done:" + id, bs + "by:" + id},
					args: []any{id, int64(14000), 13, 3600, "t." + id}})
			}
			prev = prev[:0]
			for _, a := range s.admits {
				prev = append(prev, a.args[0].(string))
			}
			ks, as := s.keysArgs(r.ttl)
			if err := sc.Run(ctx, c, ks, as...).Err(); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64((redisCPU(b, c)-cpu0).Microseconds())/float64(b.N*k), "redis-cpu-µs/req")
	}
	for _, k := range []int{1, 2, 4, 8, 16} {
		b.Run(fmt.Sprintf("flush-%d", k), func(b *testing.B) { run(b, k, flushScript) })
	}
	for _, k := range []int{1, 4} {
		b.Run(fmt.Sprintf("eval-empty-%d", k), func(b *testing.B) { run(b, k, empty) })
	}
	b.Run("ping", func(b *testing.B) {
		cpu0 := redisCPU(b, c)
		for range b.N {
			if err := c.Ping(ctx).Err(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64((redisCPU(b, c)-cpu0).Microseconds())/float64(b.N), "redis-cpu-µs/req")
	})
}

// BenchmarkRedisRequest is one interactive request's whole tenancy path with Redis
// (Admit, CheckTokens, Reserve of its worst case, Settle; no ledger), from 16
// goroutines, every limit on (the gateway bench's quota): "exact" on RedisShared (two
// to three round trips per request, coalesced per flush), "leased" on LeaseShared (none
// while the lease covers it). It reports redis-server's CPU per request too.
//
//	go test -run '^$' -bench BenchmarkRedisRequest -benchtime 20000x ./tenancy/
func BenchmarkRedisRequest(b *testing.B) {
	srv := redistest.Start(b, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	b.Cleanup(func() { c.Close() })
	q := Quota{Tenant: "bench", RequestsPerSecond: 1e6, Burst: 1e6, TokensPerMinute: 1e9, MaxConcurrency: 4096, DailyBudget: 1e18}
	for _, leased := range []bool{false, true} {
		name := "exact"
		if leased {
			name = "leased"
		}
		b.Run(name, func(b *testing.B) {
			r := NewRedisShared(c, RedisOptions{KeyPrefix: "b" + name + ":", Node: name})
			var sh Shared = r
			if leased {
				ls := NewLeaseShared(r, LeaseOptions{})
				defer ls.Close()
				sh = ls
			} else {
				defer r.Close()
			}
			ten := New(nil)
			ten.UseShared(sh)
			cpu0 := redisCPU(b, c)
			b.SetParallelism(16 / max(1, runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				q := q
				for pb.Next() {
					now := time.Now()
					tk, err := ten.Admit(&q, now, 0)
					if err != nil {
						b.Error(err)
						return
					}
					if err := tk.CheckTokens(now, 20); err != nil {
						b.Error(err)
						return
					}
					if err := tk.Reserve(now, 50000); err != nil {
						b.Error(err)
						return
					}
					if _, err := tk.Settle(Entry{Time: now, Cost: 14000, PromptTokens: 20, CompletionTokens: 1}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64((redisCPU(b, c)-cpu0).Microseconds())/float64(b.N), "redis-cpu-µs/req")
		})
	}
}
