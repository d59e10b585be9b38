package tenancy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lmlite/lmlite/internal/redistest"
)

// The one-request scripts below are the reference the batch scripts are tested
// against: admission and settlement as they were sent one request per script (before
// the batch scripts), unchanged but for the settlement's second answer (whether
// another settlement of a batch line charged it) and the by key that decides it.

// admitOneLua is a request's admission, all or nothing, in one round trip: a
// concurrency slot (leased until now + ttl), tokens/min (the prompt's tokens must be
// left, none taken), requests/s (one taken), and the reservation of the request's
// worst case (total) against the day's and month's budgets. It answers {1, roomD, roomM}
// when admitted, or the first refusal and changes nothing: {0} concurrency, {2, 0, 0,
// tokens left}, {3, 0, 0, retry after (s)}, {4, roomD, roomM} money.
// KEYS: spentD spentM held res resamt slots rps tpm
// ARGV: id total ceilD ceilM maxConc ttlms rpsBurst rpsRate rpsPeriod tpmBurst tpmRate tpmPeriod need
const admitOneLua = `
local t = redis.call('TIME')
local now = tonumber(t[1])*1000 + math.floor(tonumber(t[2])/1000)
reap(KEYS[3], KEYS[4], KEYS[5], now)
local id, total, cd, cm, max, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
if max > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now)
  if not redis.call('ZSCORE', KEYS[6], id) and redis.call('ZCARD', KEYS[6]) >= max then return {0, 0, 0, 0} end
end
local gnow = gcra_now(t)
local tpm, rps
if tonumber(ARGV[11]) > 0 then
  tpm = gcra_allow_n(KEYS[8], tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12]), 0, gnow)
  if tpm.remaining < tonumber(ARGV[13]) then return {2, 0, 0, math.floor(tpm.remaining)} end
end
if tonumber(ARGV[8]) > 0 then
  rps = gcra_allow_n(KEYS[7], tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]), 1, gnow)
  if rps.allowed == 0 then return {3, 0, 0, tostring(rps.retry)} end
end
local cur = num(redis.call('HGET', KEYS[5], id))
local sd, sm, held = num(redis.call('GET', KEYS[1])), num(redis.call('GET', KEYS[2])), num(redis.call('GET', KEYS[3]))
local delta = total - cur
if delta > 0 and ((cd > 0 and sd + held + delta > cd) or (cm > 0 and sm + held + delta > cm)) then
  return {4, room(sd, cd, held), room(sm, cm, held), 0}
end
gcra_apply(tpm)
gcra_apply(rps)
if max > 0 then redis.call('ZADD', KEYS[6], now + ttl, id) end
if delta ~= 0 then redis.call('INCRBY', KEYS[3], delta) end
if total > 0 then
  redis.call('HSET', KEYS[5], id, total)
  redis.call('ZADD', KEYS[4], now + ttl, id)
elseif cur ~= 0 then
  redis.call('HDEL', KEYS[5], id)
  redis.call('ZREM', KEYS[4], id)
end
held = held + delta
return {1, room(sd, cd, held), room(sm, cm, held), 0}
`

// settleOneLua replaces a ticket's reservation by its actual cost, frees its slot and
// charges the tokens used to tokens/min (redis_rate's allowAtMost), once: one round
// trip. It answers {what it charged, 0}, or {what was charged, 1} when another
// settlement (another token) of a batch line charged it before.
// KEYS: spentD spentM held res resamt slots done tpm by
// ARGV: id actual expD expM tokens tpmBurst tpmRate tpmPeriod keepSeconds token
const settleOneLua = `
local id, a, tokens, keep = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[5]), tonumber(ARGV[9])
local line = keep > 3600
local cur = num(redis.call('HGET', KEYS[5], id))
local prev = redis.call('GET', KEYS[7])
if prev then
  -- Settled before (a retried command, or a batch line run again after its worker
  -- died): charge nothing more, give back what a new reservation under id holds.
  if cur ~= 0 then redis.call('DECRBY', KEYS[3], cur) end
  redis.call('HDEL', KEYS[5], id)
  redis.call('ZREM', KEYS[4], id)
  redis.call('ZREM', KEYS[6], id)
  local again = 0
  if line and redis.call('GET', KEYS[9]) ~= ARGV[10] then again = 1 end
  return {tonumber(prev), again}
end
if cur ~= 0 then redis.call('DECRBY', KEYS[3], cur) end
redis.call('HDEL', KEYS[5], id)
redis.call('ZREM', KEYS[4], id)
redis.call('ZREM', KEYS[6], id)
if a > 0 then
  redis.call('INCRBY', KEYS[1], a)
  redis.call('EXPIREAT', KEYS[1], ARGV[3])
  redis.call('INCRBY', KEYS[2], a)
  redis.call('EXPIREAT', KEYS[2], ARGV[4])
end
if tokens > 0 and tonumber(ARGV[7]) > 0 then
  gcra_apply(gcra_allow_at_most(KEYS[8], tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tokens, gcra_now(redis.call('TIME'))))
end
-- A batch line's settlement (kept longer) is remembered only when it charged: a line
-- refused or failed at no cost runs again later under the same id and must be
-- charged then.
if a > 0 or (not line and (cur ~= 0 or tokens > 0)) then
  redis.call('SET', KEYS[7], a, 'EX', keep)
  if line then redis.call('SET', KEYS[9], ARGV[10], 'EX', keep) end
end
return {a, 0}
`

// clocked is src behind the test clock: redis.call('TIME') answers the last two ARGV.
func clocked(src string) *redis.Script { return redis.NewScript(clockPrelude + luaLib + luaGCRA + src) }

// oldReapLua is the reaper of the one-request scripts' layout (res, resamt, held),
// shadowing luaLib's.
const oldReapLua = `
local function reap(held, res, amt, now)
  local dead = redis.call('ZRANGEBYSCORE', res, '-inf', now, 'LIMIT', 0, 256)
  for _, id in ipairs(dead) do
    local a = num(redis.call('HGET', amt, id))
    if a ~= 0 then redis.call('DECRBY', held, a) end
    redis.call('HDEL', amt, id)
    redis.call('ZREM', res, id)
  end
end
`

var admitOneT, settleOneT = clocked(oldReapLua + admitOneLua), clocked(oldReapLua + settleOneLua)

// flushT is flushScript behind the test clock.
var flushT = redis.NewScript(clockPrelude + luaBase + luaGCRAAt + flushLua)

// batchOp is one request's admission or settlement in the differential test.
type batchOp struct {
	settle bool
	q      Quota
	id     string
	total  int64  // admission: the worst case reserved
	need   int    // admission: the prompt's tokens
	actual int64  // settlement: the cost
	tokens int    // settlement: the tokens used
	keep   int    // settlement: seconds its done key is kept
	token  string // settlement: its command's token
	own    bool   // settlement: the id's last settlement's command retried (its arguments and token)
}

// admitArgs are op's arguments of admitOneLua (its ttl ttlms).
func (op *batchOp) admitArgs(ttlms int) []any {
	q := &op.q
	a := []any{op.id, op.total, int64(q.DailyBudget), int64(q.MonthlyBudget), q.MaxConcurrency, ttlms}
	a = append(a, gcraArgs(rpsLimit(q), q.RequestsPerSecond > 0)...)
	a = append(a, gcraArgs(tpmLimit(q), q.TokensPerMinute > 0)...)
	return append(a, min(op.need, q.TokensPerMinute))
}

// settleArgs are op's arguments of settleOneLua.
func (op *batchOp) settleArgs(dexp, mexp int64) []any {
	a := []any{op.id, op.actual, dexp, mexp, op.tokens}
	a = append(a, gcraArgs(tpmLimit(&op.q), op.q.TokensPerMinute > 0)...)
	return append(a, op.keep, op.token)
}

// dumpKeys is every key under prefix (without it) with its type, value and whether it
// expires: the whole state the scripts keep.
func dumpKeys(t *testing.T, c *redis.Client, prefix string) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := c.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		var v string
		switch typ := c.Type(ctx, k).Val(); typ {
		case "string":
			v = c.Get(ctx, k).Val()
		case "hash":
			h := c.HGetAll(ctx, k).Val()
			fs := make([]string, 0, len(h))
			for f, x := range h {
				fs = append(fs, f+"="+x)
			}
			slices.Sort(fs)
			v = strings.Join(fs, ",")
		case "zset":
			v = fmt.Sprint(c.ZRangeWithScores(ctx, k, 0, -1).Val())
		default:
			v = typ
		}
		ttl := c.TTL(ctx, k).Val()
		out[strings.TrimPrefix(k, prefix)] = fmt.Sprintf("%s expires=%v", v, ttl > 0)
	}
	return out
}

// oldLayout is the state the one-request scripts keep under b (held, res, resamt, slots,
// rate:…, spent and done keys) in the terms of newLayout's: the spent and done keys as
// they are (value and whether they expire), held, the GCRA states, and per ticket its
// reservation, whether it holds a live slot (expiring after nowms) and its expiry.
func oldLayout(t *testing.T, c *redis.Client, b string, nowms int64) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for k, v := range dumpKeys(t, c, b) {
		if strings.HasPrefix(k, "spent:") || strings.HasPrefix(k, "done:") || strings.HasPrefix(k, "by:") {
			out[k] = v
		}
	}
	out["=held"] = fmt.Sprint(c.Get(ctx, b+"held").Val())
	for _, g := range []string{"rps", "tpm"} {
		out["="+g] = c.Get(ctx, "rate:"+b+g).Val()
	}
	type tick struct {
		amount int64
		slot   bool
		exp    float64
	}
	ts := map[string]*tick{}
	get := func(id string) *tick {
		if ts[id] == nil {
			ts[id] = &tick{}
		}
		return ts[id]
	}
	for id, a := range c.HGetAll(ctx, b+"resamt").Val() {
		n, _ := strconv.ParseInt(a, 10, 64)
		get(id).amount = n
	}
	for _, z := range c.ZRangeWithScores(ctx, b+"res", 0, -1).Val() {
		tk := get(z.Member.(string))
		tk.exp = max(tk.exp, z.Score)
	}
	for _, z := range c.ZRangeWithScores(ctx, b+"slots", 0, -1).Val() {
		if z.Score > float64(nowms) {
			tk := get(z.Member.(string))
			tk.slot, tk.exp = true, max(tk.exp, z.Score)
		}
	}
	for id, tk := range ts {
		out["ticket "+id] = fmt.Sprintf("reserved %d slot %v expires %.0f", tk.amount, tk.slot, tk.exp)
	}
	if out["=held"] == "" {
		out["=held"] = "0"
	}
	return out
}

// newLayout is the state the flush script keeps under b (the hash s, the sorted set z,
// spent and done keys) in the terms of oldLayout's; it also checks the hash's own
// invariants: =held is the sum of the tickets' reservations, =n the number of their
// slots, and the sorted set holds exactly the tickets of the hash.
func newLayout(t *testing.T, c *redis.Client, b string, nowms int64) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for k, v := range dumpKeys(t, c, b) {
		if strings.HasPrefix(k, "spent:") || strings.HasPrefix(k, "done:") || strings.HasPrefix(k, "by:") {
			out[k] = v
		}
	}
	h := c.HGetAll(ctx, b+"s").Val()
	zs := map[string]float64{}
	for _, z := range c.ZRangeWithScores(ctx, b+"z", 0, -1).Val() {
		zs[z.Member.(string)] = z.Score
	}
	var sum, slots int64
	tickets := 0
	for f, v := range h {
		if strings.HasPrefix(f, "=") {
			continue
		}
		tickets++
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			t.Fatalf("ticket %s: field %q", f, v)
		}
		score, ok := zs[f]
		if !ok {
			t.Fatalf("ticket %s in the hash, not in the sorted set", f)
		}
		sum, slots = sum+n/2, slots+n%2
		live := n%2 == 1 && score > float64(nowms)
		exp := score
		if n/2 == 0 && !live {
			exp = 0 // an expired slot alone: oldLayout does not see it
		}
		if n/2 != 0 || live {
			out["ticket "+f] = fmt.Sprintf("reserved %d slot %v expires %.0f", n/2, live, exp)
		}
	}
	if len(zs) != tickets {
		t.Fatalf("%d tickets in the sorted set, %d in the hash", len(zs), tickets)
	}
	held, _ := strconv.ParseInt(h["=held"], 10, 64)
	n, _ := strconv.ParseInt(h["=n"], 10, 64)
	if held != sum || n != slots {
		t.Fatalf("=held %d =n %d, the tickets hold %d and %d slots", held, n, sum, slots)
	}
	out["=held"] = strconv.FormatInt(held, 10)
	out["=rps"], out["=tpm"] = h["=rps"], h["=tpm"]
	return out
}

// gcraState is a stored GCRA state (its TAT, in seconds since 2017-01-01 as gcra_now
// counts) as it matters at the test clock sec.usec: a TAT at or before now allows what no
// state allows, so it reads as absent ("").
func gcraState(v string, sec, usec int64) string {
	tat, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return v
	}
	if tat <= float64(sec-1483228800)+float64(usec)/1e6 {
		return ""
	}
	return v
}

// TestRedisFlushScriptMatchesOneByOne drives the flush script (flushLua: a flush's
// settlements and admissions of a tenant in one script, its state read and written
// once) and the one-request scripts it replaced, one call per request in the same
// order (the settlements, then the admissions), with the same random admissions and
// settlements and the same clock against a real Redis, each on its own keys: every
// answer and the whole stored state (values, and which keys expire) must be identical
// after every flush. The load mixes flushes of admissions only, settlements only and
// both, the concurrency slot, both GCRA limits, day and month budgets, refusals of each
// kind, retried settlements (a batch line's by another run, or by its own command
// again), batch lines' settlements, tickets settled twice in one flush, and quotas that
// change between flushes of one tenant.
func TestRedisFlushScriptMatchesOneByOne(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(16, 1))
	quotas := []Quota{
		{Tenant: "t", RequestsPerSecond: 0.15, Burst: 3, TokensPerMinute: 40000, MaxConcurrency: 8, DailyBudget: 30000, MonthlyBudget: 45000},
		{Tenant: "t", RequestsPerSecond: 0.7, Burst: 2, TokensPerMinute: 2500, MaxConcurrency: 3, DailyBudget: 25000},
		{Tenant: "t", MonthlyBudget: 40000},
		{Tenant: "t"},
	}
	const ttlms = 30000
	const dexp, mexp int64 = 1900000000, 1910000000
	sec := int64(1795000000) // the test clock, seconds
	usec := int64(0)
	keysOf := func(side string) []string {
		b := side + ":t:{t}:"
		return []string{b + "spent:d:20261124", b + "spent:m:202611", b + "held", b + "res", b + "resamt", b + "slots", "rate:" + b + "rps", "rate:" + b + "tpm"}
	}
	kb := []string{"B:t:{t}:spent:d:20261124", "B:t:{t}:spent:m:202611", "B:t:{t}:s", "B:t:{t}:z"}
	var admitted, settled []string // ids, for settlements and retries
	last := map[string]batchOp{}   // by settled id: its last settlement
	next := 0
	decisions := map[string]int{}
	agains := map[string]int{} // settlement answers by their second value
	kinds := map[string]int{}
	for step := 0; step < 240; step++ {
		// The clock moves 0–2.5 s between flushes (sometimes not at all), and now and
		// then by about the TTL, so that a flush reaps reservations of tickets it admits
		// again.
		jump := false
		if rng.IntN(4) > 0 {
			usec += rng.Int64N(2500000)
			if jump = rng.IntN(12) == 0; jump {
				usec += ttlms * 1000
			}
			sec, usec = sec+usec/1000000, usec%1000000
		}
		clock := []any{sec, usec}
		nS, nA := 0, 0
		switch k := rng.IntN(3); {
		case k == 0 && len(admitted) > 0:
			nS = 1 + rng.IntN(10)
		case k == 1 && len(admitted) > 0:
			nS, nA = 1+rng.IntN(8), 1+rng.IntN(8)
		default:
			nA = 1 + rng.IntN(10)
		}
		kinds[fmt.Sprintf("settle %v admit %v", nS > 0, nA > 0)]++
		q := quotas[rng.IntN(len(quotas))] // a flush is of one quota (batchGroup)
		ops := make([]batchOp, nS+nA)      // the settlements, then the admissions
		for i := range ops {
			op := &ops[i]
			op.q = q
			op.settle = i < nS
			if !op.settle {
				if len(admitted) > 0 && (jump || rng.IntN(12) == 0) {
					op.id = admitted[rng.IntN(len(admitted))] // an admitted ticket admitted again
					if jump {
						op.id = admitted[max(0, len(admitted)-1-rng.IntN(20))] // a recent one, expired
					}
				} else {
					next++
					op.id = fmt.Sprintf("tk%d", next)
				}
				op.total = rng.Int64N(9000)
				if rng.IntN(5) == 0 {
					op.total = 0
				}
				op.need = rng.IntN(1500)
				continue
			}
			switch r := rng.IntN(10); {
			case r < 7 || len(settled) == 0:
				op.id = admitted[rng.IntN(len(admitted))]
			case r < 9:
				op.id = settled[rng.IntN(len(settled))] // a retried settlement:
				op.own = step%2 == 0                    // half the time its last command again
			default:
				next++
				op.id = fmt.Sprintf("tk%d", next) // never admitted
			}
			op.actual = rng.Int64N(6000)
			if rng.IntN(4) == 0 {
				op.actual = 0
			}
			op.tokens = rng.IntN(2000)
			op.keep = 3600
			if rng.IntN(5) == 0 {
				op.keep = 25 * 3600
			}
			op.token = fmt.Sprintf("s%d.%d", step, i)
			if op.own {
				l := last[op.id]
				op.actual, op.tokens, op.keep, op.token = l.actual, l.tokens, l.keep, l.token
			}
		}

		// A: one script per request, in order.
		var oneA, oneS []string
		ka := keysOf("A")
		for i := range ops {
			op := &ops[i]
			var v any
			var err error
			if op.settle {
				keys := append(slices.Clone(ka[:6]), "A:t:{t}:done:"+op.id, ka[7], "A:t:{t}:by:"+op.id)
				v, err = settleOneT.Run(ctx, c, keys, append(op.settleArgs(dexp, mexp), clock...)...).Result()
			} else {
				v, err = admitOneT.Run(ctx, c, ka, append(op.admitArgs(ttlms), clock...)...).Result()
			}
			if err != nil {
				t.Fatalf("step %d: one-request script: %v", step, err)
			}
			// The one-request scripts SET the GCRA keys with EX, which Redis counts on
			// its own wall clock, while the scripts run on the test's clock: on a slow
			// machine a key could expire between steps that are seconds apart for
			// Redis but not for the test. Keep them; gcraState below reads a spent
			// state (TAT at or before now) as absent, on both sides alike.
			c.Persist(ctx, ka[6])
			c.Persist(ctx, ka[7])
			vs := v.([]any)
			for _, x := range vs {
				if op.settle {
					oneS = append(oneS, fmt.Sprint(x))
				} else {
					oneA = append(oneA, fmt.Sprint(x))
				}
			}
			if op.settle {
				agains[fmt.Sprintf("again=%v line=%v own=%v", vs[1], op.keep > 3600, op.own)]++
			} else {
				decisions[fmt.Sprint(vs[0])]++
			}
		}
		one := append(oneA, oneS...) // the flush answers the admissions first

		// B: one flush script for all of them, on the tenant's hash and sorted set.
		args := append([]any{nA}, admitHead(&q, ttlms*time.Millisecond)...)
		args = append(args, nS, dexp, mexp)
		for _, op := range ops[nS:] {
			args = append(args, op.id, op.total, min(op.need, q.TokensPerMinute))
		}
		keys := slices.Clone(kb)
		for _, op := range ops[:nS] {
			keys = append(keys, "B:t:{t}:done:"+op.id, "B:t:{t}:by:"+op.id)
			args = append(args, op.id, op.actual, op.tokens, op.keep, op.token)
		}
		v, err := flushT.Run(ctx, c, keys, append(args, clock...)...).Result()
		if err != nil {
			t.Fatalf("step %d: flush script: %v", step, err)
		}
		var batch []string
		for _, x := range v.([]any) {
			batch = append(batch, fmt.Sprint(x))
		}
		settle := fmt.Sprintf("%d settlements, %d admissions", nS, nA)
		if !slices.Equal(one, batch) {
			t.Fatalf("step %d (%s): answers differ\none by one: %v\nflush:      %v", step, settle, one, batch)
		}
		sa, sb := oldLayout(t, c, "A:t:{t}:", sec*1000+usec/1000), newLayout(t, c, "B:t:{t}:", sec*1000+usec/1000)
		for _, k := range []string{"=rps", "=tpm"} {
			sa[k], sb[k] = gcraState(sa[k], sec, usec), gcraState(sb[k], sec, usec)
		}
		for k, va := range sa {
			if sb[k] != va {
				t.Fatalf("step %d (%s): key %s: one by one %q, flush %q", step, settle, k, va, sb[k])
			}
		}
		for k, vb := range sb {
			if _, ok := sa[k]; !ok {
				t.Fatalf("step %d (%s): key %s only in the flush's state: %q", step, settle, k, vb)
			}
		}
		for i := range ops {
			if ops[i].settle {
				settled = append(settled, ops[i].id)
				last[ops[i].id] = ops[i]
			} else {
				admitted = append(admitted, ops[i].id)
			}
		}
	}
	// Every kind of decision was taken (admitted, concurrency, tokens, requests, money).
	for _, code := range []string{"1", "0", "2", "3", "4"} {
		if decisions[code] == 0 {
			t.Errorf("no admission answered %s: %v", code, decisions)
		}
	}
	for _, k := range []string{"settle true admit false", "settle true admit true", "settle false admit true"} {
		if kinds[k] == 0 {
			t.Errorf("no flush of kind %q: %v", k, kinds)
		}
	}
	// A batch line's settlement found charged by another, and by its own command.
	if agains["again=1 line=true own=false"] == 0 || agains["again=0 line=true own=true"] == 0 {
		t.Errorf("settlements' second answers: %v", agains)
	}
	t.Logf("admission answers by code: %v; flushes: %v; settlements: %v", decisions, kinds, agains)
}
