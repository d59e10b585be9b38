package tenancy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/lmlite/lmlite/internal/redistest"
)

// gcraScript takes one luaGCRA decision at the clock given (ARGV 6 and 7: seconds and
// microseconds, as TIME answers them), applies it and answers as redis_rate's scripts do.
// KEYS: key; ARGV: burst rate period cost atMost(0|1) sec usec
var gcraScript = redis.NewScript(luaGCRA + `
local now = gcra_now({ARGV[6], ARGV[7]})
local d
if ARGV[5] == '1' then
  d = gcra_allow_at_most(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), now)
else
  d = gcra_allow_n(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), now)
end
gcra_apply(d)
return gcra_result(d)
`)

// clockClient runs redis_rate's own scripts with TIME answering a clock the test sets:
// EVALSHA goes out with a hash Redis does not know, so that the library falls back to
// EVAL with its script's source, which runs behind a prelude in which
// redis.call('TIME') answers the clock (passed after the script's own arguments).
type clockClient struct {
	*redis.Client
	sec, usec string
}

const clockPrelude = `local clock_, redis_ = {ARGV[#ARGV-1], ARGV[#ARGV]}, redis
local redis = setmetatable({call = function(c, ...) if c == 'TIME' then return clock_ end return redis_.call(c, ...) end}, {__index = redis_})
`

func (c *clockClient) EvalSha(ctx context.Context, _ string, keys []string, args ...any) *redis.Cmd {
	return c.Client.EvalSha(ctx, strings.Repeat("0", 40), keys, args...) // NOSCRIPT
}

func (c *clockClient) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return c.Client.Eval(ctx, clockPrelude+script, keys, append(args, c.sec, c.usec)...)
}

// dur is redis_rate's conversion of its answers' seconds.
func dur(f float64) time.Duration {
	if f == -1 {
		return -1
	}
	return time.Duration(f * float64(time.Second))
}

// TestRedisGCRAMatchesRedisRate drives redis_rate's Limiter (AllowN and AllowAtMost, its own
// scripts) and our luaGCRA, used by the admission and settlement scripts, with the same
// limits, costs and clock against a real Redis, each on its own key: every answer
// (allowed, remaining, retry after, reset after) and the stored state must be identical.
func TestRedisGCRAMatchesRedisRate(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	clk := &clockClient{Client: c}
	lim := redis_rate.NewLimiter(clk)
	ctx := context.Background()
	limits := []redis_rate.Limit{
		{Rate: 20, Burst: 10, Period: time.Second},
		rpsLimit(&Quota{RequestsPerSecond: 2.5, Burst: 3}), // thousandths per 1000 s, as the admission uses
		rpsLimit(&Quota{RequestsPerSecond: 1000, Burst: 1}),
		tpmLimit(&Quota{TokensPerMinute: 1000}),
		{Rate: 7, Burst: 1, Period: time.Minute},
	}
	rng := rand.New(rand.NewPCG(16, 1))
	for li, l := range limits {
		interval := l.Period / time.Duration(l.Rate)
		allowed, denied := 0, 0 // over both modes: AllowAtMost at burst 1 and a 1 ms interval
		// never allows (the rounding of times near 3e8 s leaves 0.99999… of a token), in
		// redis_rate as in ours
		for _, atMost := range []bool{false, true} {
			name := fmt.Sprintf("%s/atMost=%v", l, atMost)
			key := fmt.Sprintf("k%d-%v", li, atMost)
			at := time.Unix(1_795_000_000, 0) // after 2026-11; the clock only moves forward
			for step := range 300 {
				at = at.Add(time.Duration(rng.Int64N(int64(3*interval) + 1)))
				if rng.IntN(20) == 0 {
					at = at.Add(time.Duration(l.Burst) * interval) // a pause: the burst refills
				}
				sec, usec := strconv.FormatInt(at.Unix(), 10), strconv.Itoa(at.Nanosecond()/1000)
				cost := rng.IntN(l.Burst + 2)
				if l.Burst > 20 {
					cost = rng.IntN(l.Burst/4 + 1)
				}
				clk.sec, clk.usec = sec, usec
				var want *redis_rate.Result
				var err error
				if atMost {
					want, err = lim.AllowAtMost(ctx, "theirs:"+key, l, cost)
				} else {
					want, err = lim.AllowN(ctx, "theirs:"+key, l, cost)
				}
				if err != nil {
					t.Fatal(name, err)
				}
				flag := "0"
				if atMost {
					flag = "1"
				}
				v, err := gcraScript.Run(ctx, c, []string{"rate:ours:" + key}, l.Burst, l.Rate, l.Period.Seconds(), cost, flag, sec, usec).Slice()
				if err != nil {
					t.Fatal(name, err)
				}
				retry, _ := strconv.ParseFloat(v[2].(string), 64)
				reset, _ := strconv.ParseFloat(v[3].(string), 64)
				got := redis_rate.Result{Limit: l, Allowed: int(v[0].(int64)), Remaining: int(v[1].(int64)), RetryAfter: dur(retry), ResetAfter: dur(reset)}
				if got != *want {
					t.Fatalf("%s step %d (cost %d at %s.%s): ours %+v, redis_rate %+v", name, step, cost, sec, usec, got, *want)
				}
				theirs, err1 := c.Get(ctx, "rate:theirs:"+key).Result()
				ours, err2 := c.Get(ctx, "rate:ours:"+key).Result()
				if theirs != ours || (err1 == nil) != (err2 == nil) {
					t.Fatalf("%s step %d: state ours %q (%v), redis_rate %q (%v)", name, step, ours, err2, theirs, err1)
				}
				if want.Allowed > 0 || (cost == 0 && want.RetryAfter < 0) {
					allowed++
				} else {
					denied++
				}
			}
		}
		if allowed == 0 || denied == 0 {
			t.Fatalf("%s: %d allowed, %d denied: the sequences do not exercise both answers", l, allowed, denied)
		}
	}
}
