package tenancy

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/money"
)

// RedisShared is the Shared state of several processes in one Redis. With P the key
// prefix and T the tenant, it keeps (the braces make a tenant's keys one hash slot):
//
//	P t:{T}:spent:d:YYYYMMDD  string: settled spend of the UTC day, nano-USD; expires 8 days after the day ends
//	P t:{T}:spent:m:YYYYMM    string: settled spend of the UTC month; expires 40 days after the month ends
//	P t:{T}:s                 hash: the tenant's live state: =held (the sum of the live reservations),
//	                          =n (the concurrency slots held), =rps and =tpm (the GCRA states of
//	                          requests/s and tokens/min, redis_rate's "theoretical arrival time"),
//	                          and per live ticket ID: 2 × its reservation + 1 if it holds a slot
//	P t:{T}:z                 sorted set: the live tickets (a slot, a reservation or both) scored
//	                          by their expiry, ms by Redis's clock
//	P t:{T}:done:ID           string: what the settlement of ticket ID charged (idempotency); 1 hour,
//	                          25 hours for a batch line's (ID "line:" + its request id, AdmitBatchLine)
//	P t:{T}:by:ID             string: a batch line's only: the token of the settlement command that
//	                          charged it (another run's settlement is told from a retry of its own);
//	                          as long as done:ID
//	P t:{T}:api:NAME, t:{T}:jobs  the Batch API's rates and unfinished jobs (redisapi.go)
//	P nodes                   sorted set: live process (node id) scored by its expiry (ms, its clock)
//
// Ticket ids never start with "=". This layout replaced one of separate keys (held,
// res, resamt, slots, rate:…) and does not read it: a Redis written by an older version
// must be emptied of the t:{T}: keys (or a new key_prefix used) before this one runs.
//
// Admission is one script, settlement one; the admissions (and settlements) of
// concurrent requests of a tenant go together as one script (batchPipe). Admission and
// reserve first reap the tenant's expired reservations (giving their money back), so a
// holder that died returns its money within the TTL; a background reaper does the same for the
// tenants this process has seen. The holder renews its live reservations and slots
// every TTL/3.
//
// Failure policy: money fails closed (Reserve returns ErrUnavailable, the gateway
// answers 503); rates and concurrency fall back to this process's share (the limit ÷
// live processes, as last seen in P nodes); a settlement that cannot reach Redis is
// retried in the background until it does (idempotent per ticket), while the ledger
// records it at once.
type RedisShared struct {
	c      redis.UniversalClient
	prefix string
	node   string
	ttl    time.Duration
	log    *slog.Logger
	met    *rediscli.Metrics
	pipe   *batchPipe // admissions and settlements of concurrent requests, one script per tenant per flush

	seed    string        // random per RedisShared: a settlement command's token is seed.n
	settles atomic.Uint64 // n of the last token

	mu       sync.Mutex
	live     map[string]liveTicket  // by ticket id: reservations and slots to renew
	pending  []pendingSettle        // settlements to retry
	retrying int                    // settlements taken from pending by retry and not yet settled
	tenants  map[string]bool        // seen, for the reaper
	rooms    map[string]money.Money // by tenant: the money left at Redis's last answer (Room)
	local    map[string]*localShare
	jobs     map[string]string // by batch job id: its tenant, the unfinished jobs to renew (redisapi.go)
	nodes    int               // live processes, last seen (≥ 1)

	downUntil atomic.Int64 // unix ns: Redis failed a moment ago; until then requests do not wait for it

	stop chan struct{}
	done chan struct{}
}

// downFor is how long a failed command marks Redis down: requests meanwhile take the
// failure policy at once instead of each waiting out the client's retries.
const downFor = 250 * time.Millisecond

// failed notes a failed command; it reports whether Redis was thought up before.
func (r *RedisShared) failed(err error) {
	var re redis.Error
	if errors.As(err, &re) {
		return // an answer (a script error): Redis is up
	}
	if r.downUntil.Swap(time.Now().Add(downFor).UnixNano()) < time.Now().Add(-time.Second).UnixNano() {
		r.log.Warn("tenancy: redis unavailable: money fails closed, rates use this process's share", "error", err)
	}
}

// fallback counts one request that took resource's failure policy.
func (r *RedisShared) fallback(resource string) {
	if r.met != nil {
		r.met.Fallback(resource)
	}
}

func (r *RedisShared) isDown() bool { return time.Now().UnixNano() < r.downUntil.Load() }

type liveTicket struct{ tenant string }

type pendingSettle struct {
	q      Quota
	id     string
	now    time.Time
	actual money.Money
	tokens int
	token  string // the settlement command's, the same on every retry (see flushScript)
}

// localShare is a tenant's fallback while Redis is down: its share of the limits.
type localShare struct {
	q        Quota
	nodes    int
	rps, tpm *rate.Limiter
	inFlight int
}

// DefaultTTL is how long a per-request reservation or slot outlives its holder's last
// renewal (every TTL/3): a process killed with requests in flight has their money
// and slots back within it, plus a reaper's pass (TTL/3) or at the next admission.
// Short, so that another process spends the money soon after a crash; a Redis
// outage longer than it lets the reservations of requests in flight lapse (their
// settlements still charge them when Redis returns).
const DefaultTTL = 6 * time.Second

// RedisOptions configure NewRedisShared.
type RedisOptions struct {
	KeyPrefix string        // "lmlite:"
	Node      string        // this process's node id
	TTL       time.Duration // of reservations and slots not renewed (renewed every TTL/3); 6s
	Logger    *slog.Logger
	Metrics   *rediscli.Metrics // counts fallbacks (lmlite_redis_fallbacks_total); nil: none
}

// NewRedisShared returns the shared state on c and starts its background work
// (renewal, reaper, settlement retries, node heartbeat); Close stops it.
func NewRedisShared(c redis.UniversalClient, o RedisOptions) *RedisShared {
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = "lmlite:"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	r := &RedisShared{c: c, prefix: o.KeyPrefix, node: o.Node, ttl: o.TTL, log: o.Logger, met: o.Metrics, seed: strconv.FormatUint(rand.Uint64(), 36),
		live: map[string]liveTicket{}, tenants: map[string]bool{}, rooms: map[string]money.Money{}, local: map[string]*localShare{}, jobs: map[string]string{}, nodes: 1,
		stop: make(chan struct{}), done: make(chan struct{})}
	r.pipe = newBatchPipe(c, o.TTL)
	r.beat()
	go r.loop()
	return r
}

// Close stops the background work (settlements still pending are lost from Redis;
// their reservations expire).
func (r *RedisShared) Close() {
	select {
	case <-r.stop:
		return
	default:
	}
	close(r.stop)
	<-r.done
	r.pipe.close()
	r.c.ZRem(context.Background(), r.prefix+"nodes", r.node)
}

var _ Shared = (*RedisShared)(nil)

func (r *RedisShared) base(tenant string) string { return r.prefix + "t:{" + tenant + "}:" }

// tenantKeys are KEYS 1–4 of the scripts: spent day, spent month, the tenant's hash
// and its sorted set of tickets.
func (r *RedisShared) tenantKeys(tenant string, now time.Time) []string {
	d, m := windows(now)
	b := r.base(tenant)
	return []string{b + "spent:d:" + strconv.Itoa(d), b + "spent:m:" + strconv.Itoa(m), b + "s", b + "z"}
}

// windowExpiry is when the day and month keys of now expire (unix seconds).
func windowExpiry(now time.Time) (day, month int64) {
	u := now.UTC()
	y, mo, d := u.Date()
	day = time.Date(y, mo, d+1+8, 0, 0, 0, 0, time.UTC).Unix()
	month = time.Date(y, mo+1, 1+40, 0, 0, 0, 0, time.UTC).Unix()
	return
}

func unavailable(op string, err error) error {
	return fmt.Errorf("%w: redis %s: %w", ErrUnavailable, op, err)
}

// luaLib is the library of the scripts: luaBase and the reaper.
var luaLib = luaBase + luaReap

// luaBase are the helpers every script uses (the flush script only these, so that a
// call defines no function it does not use).
//
//go:embed lua/lib_base.lua
var luaBase string

//go:embed lua/lib_reap.lua
var luaReap string

// luaGCRA is GCRA with exactly the semantics of github.com/go-redis/redis_rate/v10
// (its allowN and allowAtMost: the same state, the key's "theoretical arrival time" in
// seconds since 2017-01-01, the same floating-point steps, the same answers), written
// here so that the admission and settlement scripts can take a rate decision together
// with the slot and the money in one round trip. redis_rate's own scripts cannot be
// composed into another script; TestRedisGCRAMatchesRedisRate drives both with the same
// requests and clock against a real Redis and requires identical answers and state.
//
// A decision is a table {allowed, remaining, retry, reset, key, tat, ex}: the write
// (SET key tat EX ex, when ex > 0) is applied by gcra_apply only once every other
// check of the script has passed, so a refused admission takes nothing.
var luaGCRA = luaGCRAAt + luaGCRAKey

//go:embed lua/lib_gcra.lua
var luaGCRAKey string

// luaGCRAAt are the GCRA steps on a state passed in (the flush script's).
//
//go:embed lua/lib_gcra_at.lua
var luaGCRAAt string

// reserveScript sets a ticket's reservation to total, if it fits both budgets (its
// slot, if any, is kept).
// KEYS: spentD spentM s z; ARGV: id total ceilD ceilM ttlms
var reserveScript = redis.NewScript(luaLib + reserveLua)

//go:embed lua/reserve.lua
var reserveLua string

// renewScript pushes the expiry of a tenant's live tickets.
// KEYS: z; ARGV: ttlms id…
var renewScript = redis.NewScript(luaLib + renewLua)

//go:embed lua/renew.lua
var renewLua string

// reapScript gives back the money and slots of a tenant's expired tickets.
// KEYS: s z
var reapScript = redis.NewScript(luaLib + reapLua)

//go:embed lua/reap.lua
var reapLua string

func ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 2*time.Second)
}

func hasBudget(q *Quota) bool { return q.DailyBudget > 0 || q.MonthlyBudget > 0 }

func roomOf(v []any) money.Money {
	d, m := money.Money(v[1].(int64)), money.Money(v[2].(int64))
	switch {
	case d < 0:
		return m
	case m < 0:
		return d
	}
	return min(d, m)
}

// rpsLimit is q's requests/s as a GCRA limit (rates in thousandths, so that fractional
// rates keep their emission interval).
func rpsLimit(q *Quota) redis_rate.Limit {
	return redis_rate.Limit{Rate: max(1, int(math.Round(q.RequestsPerSecond*1000))), Burst: max(1, q.Burst), Period: 1000 * time.Second}
}

func tpmLimit(q *Quota) redis_rate.Limit {
	return redis_rate.Limit{Rate: q.TokensPerMinute, Burst: q.TokensPerMinute, Period: time.Minute}
}

// gcraArgs are a limit's arguments to luaGCRA, as redis_rate passes them (burst,
// rate, period in seconds); zeros when the limit is off.
func gcraArgs(l redis_rate.Limit, on bool) []any {
	if !on {
		return []any{0, 0, 0}
	}
	return []any{l.Burst, l.Rate, l.Period.Seconds()}
}

func (r *RedisShared) Admit(q *Quota, id string, now time.Time, promptTokens int, total money.Money) (money.Money, error) {
	pays := hasBudget(q) && total > 0 // money fails closed
	if r.isDown() {
		if pays {
			r.fallback("budget")
			return 0, unavailable("admit", errors.New("down a moment ago"))
		}
		return r.admitLocal(q, id, now, promptTokens, nil)
	}
	if q.RequestsPerSecond <= 0 && q.TokensPerMinute <= 0 && q.MaxConcurrency <= 0 && !hasBudget(q) {
		return -1, nil
	}
	r.seen(q.Tenant)
	keys := r.tenantKeys(q.Tenant, now)
	v, err := r.pipe.run(&batchCall{group: batchGroup{day: keys[0], month: keys[1], q: *q}, keys: keys,
		args: []any{id, int64(total), min(promptTokens, q.TokensPerMinute)}})
	if err != nil {
		if pays {
			r.failed(err)
			r.fallback("budget")
			return 0, unavailable("admit", err)
		}
		return r.admitLocal(q, id, now, promptTokens, err)
	}
	switch v[0].(int64) {
	case 0:
		return 0, &LimitError{Reason: "concurrency", RetryAfter: time.Second}
	case 2:
		need := min(promptTokens, q.TokensPerMinute)
		wait := time.Duration(float64(need-int(v[3].(int64))) / float64(q.TokensPerMinute) * float64(time.Minute))
		return 0, &LimitError{Reason: "tokens", RetryAfter: wait}
	case 3:
		s, _ := v[3].(string)
		sec, _ := strconv.ParseFloat(s, 64)
		return 0, &LimitError{Reason: "requests", RetryAfter: max(time.Duration(sec*float64(time.Second)), time.Millisecond)}
	case 4:
		room := r.noteRoom(q, roomOf(v))
		return room, ErrInsufficientQuota
	}
	if q.MaxConcurrency > 0 || total > 0 {
		r.mu.Lock()
		r.live[id] = liveTicket{q.Tenant}
		r.mu.Unlock()
	}
	if !hasBudget(q) {
		return -1, nil
	}
	return r.noteRoom(q, roomOf(v)), nil
}

// admitHead are the arguments of flushScript after nA: the TTL and q's limits.
func admitHead(q *Quota, ttl time.Duration) []any {
	h := make([]any, 0, 10)
	h = append(h, ttl.Milliseconds(), int64(q.DailyBudget), int64(q.MonthlyBudget), q.MaxConcurrency)
	h = append(h, gcraArgs(rpsLimit(q), q.RequestsPerSecond > 0)...)
	return append(h, gcraArgs(tpmLimit(q), q.TokensPerMinute > 0)...)
}

// noteRoom keeps the tenant's money left as Redis last answered it (Room) and returns it.
func (r *RedisShared) noteRoom(q *Quota, room money.Money) money.Money {
	r.mu.Lock()
	r.rooms[q.Tenant] = room
	r.mu.Unlock()
	return room
}

// Room is the tenant's money left as Redis last answered this process; -1 when it has
// no budget or this process has not asked yet.
func (r *RedisShared) Room(q *Quota) money.Money {
	if !hasBudget(q) {
		return -1
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if room, ok := r.rooms[q.Tenant]; ok {
		return room
	}
	return -1
}

// admitLocal admits against this process's share of the limits while Redis is down.
func (r *RedisShared) admitLocal(q *Quota, id string, now time.Time, promptTokens int, cause error) (money.Money, error) {
	if cause != nil {
		r.failed(cause)
	}
	r.fallback("rate")
	r.mu.Lock()
	defer r.mu.Unlock()
	ls := r.local[q.Tenant]
	if ls == nil || ls.q != *q || ls.nodes != r.nodes {
		n := float64(r.nodes)
		ls = &localShare{q: *q, nodes: r.nodes}
		if q.RequestsPerSecond > 0 {
			ls.rps = rate.NewLimiter(rate.Limit(q.RequestsPerSecond/n), max(1, int(float64(q.Burst)/n)))
			ls.rps.SetBurstAt(now, max(1, int(float64(q.Burst)/n)))
		}
		if q.TokensPerMinute > 0 {
			per := max(1, int(float64(q.TokensPerMinute)/n))
			ls.tpm = rate.NewLimiter(rate.Limit(float64(per)/60), per)
		}
		r.local[q.Tenant] = ls
	}
	if max := int(math.Ceil(float64(q.MaxConcurrency) / float64(r.nodes))); q.MaxConcurrency > 0 && ls.inFlight >= max {
		return 0, &LimitError{Reason: "concurrency", RetryAfter: time.Second}
	}
	if ls.tpm != nil && ls.tpm.TokensAt(now) < float64(min(promptTokens, ls.tpm.Burst())) {
		return 0, &LimitError{Reason: "tokens", RetryAfter: time.Second}
	}
	if ls.rps != nil {
		rv := ls.rps.ReserveN(now, 1)
		if d := rv.DelayFrom(now); !rv.OK() || d > 0 {
			rv.CancelAt(now)
			return 0, &LimitError{Reason: "requests", RetryAfter: max(d, time.Millisecond)}
		}
	}
	if q.MaxConcurrency > 0 {
		ls.inFlight++
		r.live["local:"+id] = liveTicket{q.Tenant}
	}
	return -1, nil
}

func (r *RedisShared) Reserve(q *Quota, id string, now time.Time, total money.Money) (money.Money, error) {
	if !hasBudget(q) {
		return -1, nil
	}
	if r.isDown() {
		r.fallback("budget")
		return 0, unavailable("reserve", errors.New("down a moment ago"))
	}
	c, cancel := ctx()
	defer cancel()
	v, err := reserveScript.Run(c, r.c, r.tenantKeys(q.Tenant, now),
		id, int64(total), int64(q.DailyBudget), int64(q.MonthlyBudget), r.ttl.Milliseconds()).Slice()
	if err != nil {
		r.failed(err)
		r.fallback("budget")
		return 0, unavailable("reserve", err)
	}
	if v[0].(int64) == 0 {
		return r.noteRoom(q, roomOf(v)), ErrInsufficientQuota
	}
	r.noteRoom(q, roomOf(v))
	r.mu.Lock()
	if total > 0 {
		r.live[id] = liveTicket{q.Tenant}
	}
	r.mu.Unlock()
	return roomOf(v), nil
}

func (r *RedisShared) Settle(q *Quota, id string, now time.Time, actual money.Money, tokens int) (money.Money, bool, error) {
	r.mu.Lock()
	if _, ok := r.live["local:"+id]; ok {
		delete(r.live, "local:"+id)
		if ls := r.local[q.Tenant]; ls != nil {
			ls.inFlight--
			if ls.tpm != nil && tokens > 0 {
				ls.tpm.ReserveN(now, min(tokens, ls.tpm.Burst()))
			}
		}
	}
	r.mu.Unlock()
	p := pendingSettle{q: *q, id: id, now: now, actual: actual, tokens: tokens}
	if strings.HasPrefix(id, LinePrefix) { // only a batch line's settlement needs a token (flushScript)
		p.token = r.seed + "." + strconv.FormatUint(r.settles.Add(1), 36)
	}
	var err error
	var prior money.Money
	var again bool
	if r.isDown() {
		err = unavailable("settle", errors.New("down a moment ago"))
	} else if prior, again, err = r.settle(&p); err != nil {
		r.failed(err)
	}
	if err != nil {
		r.fallback("settle")
		r.mu.Lock()
		r.pending = append(r.pending, p)
		r.mu.Unlock()
		return 0, false, fmt.Errorf("%w (settlement queued for retry)", err)
	}
	return prior, again, nil
}

// settle sends p's settlement; it reports what the earlier settlement charged when
// another settlement of a batch line charged it before (flushScript).
func (r *RedisShared) settle(p *pendingSettle) (prior money.Money, again bool, err error) {
	dexp, mexp := windowExpiry(p.now)
	b := r.base(p.q.Tenant)
	keep := 3600 // seconds the settlement is remembered: a retried command comes within it
	done := b + "done:" + p.id
	by := done // not read or written but for a batch line's: no second key built per request
	if strings.HasPrefix(p.id, LinePrefix) {
		keep = 25 * 3600 // a batch line may run again until its job's 24-hour window ends
		by = b + "by:" + p.id
	}
	keys := r.tenantKeys(p.q.Tenant, p.now)
	v, err := r.pipe.run(&batchCall{group: batchGroup{day: keys[0], month: keys[1], q: p.q}, settle: true, keys: keys,
		exp: [2]int64{dexp, mexp}, key: [2]string{done, by}, args: []any{p.id, int64(p.actual), p.tokens, keep, p.token}})
	if err != nil {
		return 0, false, unavailable("settle", err)
	}
	r.mu.Lock()
	delete(r.live, p.id)
	r.mu.Unlock()
	if v[1].(int64) == 1 {
		return money.Money(v[0].(int64)), true, nil
	}
	return 0, false, nil
}

func (r *RedisShared) seen(tenant string) {
	r.mu.Lock()
	if !r.tenants[tenant] {
		r.tenants[tenant] = true
	}
	r.mu.Unlock()
}

// loop renews live reservations and slots every TTL/3, retries pending settlements,
// reaps expired reservations and beats the node's heartbeat.
func (r *RedisShared) loop() {
	defer close(r.done)
	every := min(r.ttl/3, time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		r.retry()
		if time.Since(last) >= r.ttl/3 {
			last = time.Now()
			r.renew()
			r.renewJobs()
			r.reap()
		}
		r.beat()
	}
}

func (r *RedisShared) retry() {
	r.mu.Lock()
	ps := r.pending
	r.pending = nil
	r.retrying += len(ps) // still pending (Pending counts them) until settled
	r.mu.Unlock()
	for i := range ps {
		_, _, err := r.settle(&ps[i]) // its ledger entry was written when it was queued
		r.mu.Lock()
		if err != nil {
			r.pending = append(r.pending, ps[i:]...)
			r.retrying -= len(ps) - i
			r.mu.Unlock()
			return
		}
		r.retrying--
		r.mu.Unlock()
	}
}

func (r *RedisShared) renew() {
	r.mu.Lock()
	by := map[string][]any{}
	for id, lt := range r.live {
		if len(id) > 6 && id[:6] == "local:" {
			continue
		}
		by[lt.tenant] = append(by[lt.tenant], id)
	}
	r.mu.Unlock()
	for tenant, ids := range by {
		c, cancel := ctx()
		b := r.base(tenant)
		err := renewScript.Run(c, r.c, []string{b + "z"}, append([]any{r.ttl.Milliseconds()}, ids...)...).Err()
		cancel()
		if err != nil {
			return
		}
	}
}

func (r *RedisShared) reap() {
	r.mu.Lock()
	ts := make([]string, 0, len(r.tenants))
	for t := range r.tenants {
		ts = append(ts, t)
	}
	r.mu.Unlock()
	for _, tenant := range ts {
		c, cancel := ctx()
		b := r.base(tenant)
		err := reapScript.Run(c, r.c, []string{b + "s", b + "z"}).Err()
		cancel()
		if err != nil {
			return
		}
	}
}

// beat renews this node in P nodes and counts the live ones (for the local shares).
func (r *RedisShared) beat() {
	c, cancel := ctx()
	defer cancel()
	now := time.Now().UnixMilli()
	key := r.prefix + "nodes"
	p := r.c.TxPipeline()
	p.ZAdd(c, key, redis.Z{Score: float64(now + 3000), Member: r.node})
	p.ZRemRangeByScore(c, key, "-inf", strconv.FormatInt(now, 10))
	n := p.ZCard(c, key)
	if _, err := p.Exec(c); err != nil {
		return
	}
	r.mu.Lock()
	r.nodes = max(1, int(n.Val()))
	r.mu.Unlock()
}

// Spent returns the settled spend of tenant in the day and month windows of now, as
// Redis holds it.
func (r *RedisShared) Spent(tenant string, now time.Time) (day, month money.Money, err error) {
	c, cancel := ctx()
	defer cancel()
	k := r.tenantKeys(tenant, now)
	vs, err := r.c.MGet(c, k[0], k[1]).Result()
	if err != nil {
		return 0, 0, unavailable("spent", err)
	}
	get := func(v any) money.Money {
		s, _ := v.(string)
		n, _ := strconv.ParseInt(s, 10, 64)
		return money.Money(n)
	}
	return get(vs[0]), get(vs[1]), nil
}

// Held is the sum of the tenant's live reservations, as Redis holds it.
func (r *RedisShared) Held(tenant string) (money.Money, error) {
	c, cancel := ctx()
	defer cancel()
	n, err := r.c.HGet(c, r.base(tenant)+"s", "=held").Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return money.Money(n), err
}

// Settled reports what the settlement of ticket id charged, if it was settled (and
// is still remembered: see the done: keys).
func (r *RedisShared) Settled(tenant, id string) (money.Money, bool, error) {
	c, cancel := ctx()
	defer cancel()
	n, err := r.c.Get(c, r.base(tenant)+"done:"+id).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, unavailable("settled", err)
	}
	return money.Money(n), true, nil
}

// Pending is the number of settlements waiting for Redis.
func (r *RedisShared) Pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending) + r.retrying
}
