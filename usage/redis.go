package usage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lmlite/lmlite/money"
)

// Source is the durable record the Redis rollups follow: a process's ledger
// (tenancy.Store).
type Source interface {
	// ID names the source for good (across restarts, among every process's sources).
	ID() string
	// UsageSince calls fn in seq order with every acknowledged entry after seq.
	UsageSince(seq uint64, fn func(seq uint64, e Event) error) error
}

// Redis is the Rollups of several processes in one Redis: each process publishes
// the settlements of its own ledger (Source), and every process's usage API and
// dashboard read the sum. With P the key prefix and T a tenant, it keeps:
//
//	P u:{T}:1m:N   hash: the counters of minute N (Unix minutes) of tenant T; expires 48 h after the minute ends
//	P u:{T}:1h:N   hash: hour N; expires 90 days after the hour ends
//	P u:{T}:1d:N   hash: day N; kept for ever
//	P u:tenants    set: the tenants with rollups
//	P u:src:ID     string: the last seq of source ID's ledger counted (idempotency)
//
// A hash's fields are "model\x00tier\x00counter" with counter n (requests), e
// (errors), i, o, c (input, output, cached tokens), $ (nano-USD), x:REASON
// (refusals), l:B and t:B (latency and TTFT histogram bin B); HINCRBY adds to them.
//
// Everything is written from the ledger, settlements and refusals (the ledger holds
// the refusals before admission too, Entry.NotAdmitted, coalesced: Event.Count): a background goroutine
// reads the entries after the last one counted (the source's seq in Redis) and
// counts up to 1,024 of them in one script, which skips them if that seq already
// covers them. So a write retried after a timeout, or after the process was killed
// and restarted (it starts from the seq Redis holds), never counts twice, and every
// settlement the ledger acknowledged is counted once Redis can be reached. Query first publishes
// what this process has settled, so a caller sees its own requests.
type Redis struct {
	c      redis.UniversalClient
	src    Source
	prefix string
	log    *slog.Logger

	pubMu sync.Mutex // serialises publishing; guards sent and known
	sent  uint64     // the source's last seq counted in Redis
	known bool       // sent was read from Redis since the last error

	stop chan struct{}
	done chan struct{}
}

// RedisOptions configure Redis rollups.
type RedisOptions struct {
	KeyPrefix string        // e.g. "lmlite:"
	Every     time.Duration // how often the ledger is published; 0: 500ms
	Logger    *slog.Logger  // nil: slog.Default()
}

// NewRedis returns rollups in c that follow src, publishing in the background until
// Close.
func NewRedis(c redis.UniversalClient, src Source, o RedisOptions) *Redis {
	if o.Every == 0 {
		o.Every = 500 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	r := &Redis{c: c, src: src, prefix: o.KeyPrefix + "u:", log: o.Logger,
		stop: make(chan struct{}), done: make(chan struct{})}
	go r.run(o.Every)
	return r
}

// Close stops publishing, after a last attempt.
func (r *Redis) Close() error {
	close(r.stop)
	<-r.done
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return r.Publish(ctx)
}

func (r *Redis) run(every time.Duration) {
	defer close(r.done)
	t := time.NewTicker(every)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := r.Publish(ctx)
		cancel()
		if err != nil && !failing {
			r.log.Warn("usage: publishing rollups to redis failed; retrying", "error", err)
		}
		failing = err != nil
	}
}

func (r *Redis) srcKey() string { return r.prefix + "src:" + r.src.ID() }

func (r *Redis) hashKey(tenant string, w Width, i int64) string {
	return r.prefix + "{" + tenant + "}:" + w.String() + ":" + strconv.FormatInt(i, 10)
}

// expireAt is when bucket i of width w expires (Unix seconds); 0: never.
func expireAt(w Width, i int64) int64 {
	if w.Retention() == 0 {
		return 0
	}
	step := int64(w.Duration() / time.Second)
	return (i+1)*step + int64(w.Retention()/time.Second)
}

// field is the hash field of a counter of a series.
func field(model, tier, counter string) string { return model + "\x00" + tier + "\x00" + counter }

// increments are the counters e adds, as field/amount pairs.
func increments(c *Counts, model, tier string, add func(f string, n int64)) {
	for _, v := range [...]struct {
		name string
		n    int64
	}{{"n", c.Requests}, {"e", c.Errors}, {"i", c.InputTokens}, {"o", c.OutputTokens}, {"c", c.CachedTokens}, {"$", int64(c.Cost)},
		{"k", c.ColdStarts}, {"K", int64(c.ColdStartTime)}, {"g", int64(c.GrammarTime)}} {
		if v.n != 0 {
			add(field(model, tier, v.name), v.n)
		}
	}
	for _, rs := range Reasons {
		if n := c.Refusals[rs]; n != 0 {
			add(field(model, tier, "x:"+rs.String()), n)
		}
	}
	for j, n := range c.Latency {
		if n != 0 {
			add(field(model, tier, "l:"+strconv.Itoa(j)), int64(n))
		}
	}
	for j, n := range c.TTFT {
		if n != 0 {
			add(field(model, tier, "t:"+strconv.Itoa(j)), int64(n))
		}
	}
}

// publishScript counts one batch of a source's entries, first..last, unless the
// source's seq (KEYS[1]) already covers them. KEYS[2] is the tenants set, KEYS[3..]
// the hashes; ARGV: first, last, the tenant count and tenants, then per hash its
// expiry (0: none), its field count and its field/amount pairs.
var publishScript = redis.NewScript(`
local applied = tonumber(redis.call('GET', KEYS[1]) or '0')
local first, last = tonumber(ARGV[1]), tonumber(ARGV[2])
if last <= applied then return 0 end
if first <= applied then return redis.error_reply('usage: batch overlaps what is counted') end
local a = 3
local nt = tonumber(ARGV[a]); a = a + 1
for i = 1, nt do redis.call('SADD', KEYS[2], ARGV[a]); a = a + 1 end
for k = 3, #KEYS do
  local exp = tonumber(ARGV[a]); local nf = tonumber(ARGV[a+1]); a = a + 2
  for i = 1, nf do redis.call('HINCRBY', KEYS[k], ARGV[a], ARGV[a+1]); a = a + 2 end
  if exp > 0 then redis.call('EXPIREAT', KEYS[k], exp) end
end
redis.call('SET', KEYS[1], ARGV[2])
return 1`)

// publishBatch is at most this many ledger entries in one script.
const publishBatch = 1024

type cellKey struct {
	tenant, model, tier string
	w                   Width
	i                   int64
}

// Publish counts in Redis the source's entries not yet counted.
func (r *Redis) Publish(ctx context.Context) error {
	r.pubMu.Lock()
	defer r.pubMu.Unlock()
	if !r.known { // after an error the script may or may not have run: ask Redis
		v, err := r.c.Get(ctx, r.srcKey()).Uint64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("usage: redis: %w", err)
		}
		r.sent, r.known = v, true
	}
	// Read a batch, then send it: the source's read (a bbolt read transaction) is not
	// held across the round trip.
	cells := map[cellKey]*Counts{}
	for {
		var first, last uint64
		n := 0
		err := r.src.UsageSince(r.sent, func(seq uint64, e Event) error {
			if first == 0 {
				first = seq
			}
			last = seq
			for w := Width(0); w < numWidths; w++ {
				k := cellKey{e.Tenant, seriesModel(e.Model, e.Adapter), e.Tier, w, w.index(e.Time)}
				c := cells[k]
				if c == nil {
					c = &Counts{}
					cells[k] = c
				}
				c.add(&e)
			}
			if n++; n == publishBatch {
				return errBatchFull
			}
			return nil
		})
		if err != nil && !errors.Is(err, errBatchFull) {
			return err
		}
		if n == 0 {
			return nil
		}
		err = r.runPublish(ctx, cells, first, last)
		clear(cells)
		if err != nil {
			r.known = false
			return err
		}
		r.sent = last
	}
}

var errBatchFull = errors.New("usage: batch full")

// runPublish runs publishScript for the cells of entries first..last.
func (r *Redis) runPublish(ctx context.Context, cells map[cellKey]*Counts, first, last uint64) error {
	type hash struct {
		key    string
		exp    int64
		fields []any
	}
	hashes := map[string]*hash{}
	tenants := map[string]bool{}
	for k, c := range cells {
		hk := r.hashKey(k.tenant, k.w, k.i)
		h := hashes[hk]
		if h == nil {
			h = &hash{key: hk, exp: expireAt(k.w, k.i)}
			hashes[hk] = h
		}
		tenants[k.tenant] = true
		increments(c, k.model, k.tier, func(f string, n int64) { h.fields = append(h.fields, f, n) })
	}
	keys := []string{r.srcKey(), r.prefix + "tenants"}
	args := []any{first, last, len(tenants)}
	for t := range tenants {
		args = append(args, t)
	}
	for _, h := range hashes {
		keys = append(keys, h.key)
		args = append(args, h.exp, len(h.fields)/2)
		args = append(args, h.fields...)
	}
	if err := publishScript.Run(ctx, r.c, keys, args...).Err(); err != nil {
		return fmt.Errorf("usage: redis: %w", err)
	}
	return nil
}

// Tenants lists the tenants with rollups in Redis, sorted (nil when Redis cannot be
// reached).
func (r *Redis) Tenants() []string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ts, err := r.c.SMembers(ctx, r.prefix+"tenants").Result()
	if err != nil {
		return nil
	}
	slices.Sort(ts)
	return ts
}

// Query answers q from Redis, after publishing what this process has settled: one
// HGETALL per tenant and bucket, pipelined.
func (r *Redis) Query(q Query) ([]Bucket, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Publish(ctx); err != nil {
		r.log.Warn("usage: query answers without this process's latest settlements", "error", err)
	}
	if !q.End.After(q.Start) {
		return nil, nil
	}
	first, end := q.Width.index(q.Start), q.Width.index(q.End.Add(-time.Nanosecond))+1
	if end-first > MaxBuckets {
		return nil, ErrTooManyBuckets
	}
	tenants := q.Tenants
	if tenants == nil {
		var err error
		if tenants, err = r.c.SMembers(ctx, r.prefix+"tenants").Result(); err != nil {
			return nil, fmt.Errorf("usage: redis: %w", err)
		}
	}
	type get struct {
		tenant string
		i      int64
		cmd    *redis.MapStringStringCmd
	}
	gets := make([]get, 0, len(tenants)*int(end-first))
	_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, t := range tenants {
			for i := first; i < end; i++ {
				gets = append(gets, get{t, i, p.HGetAll(ctx, r.hashKey(t, q.Width, i))})
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("usage: redis: %w", err)
	}
	acc := make([]map[Group]*Counts, end-first)
	for _, g := range gets {
		m := g.cmd.Val()
		if len(m) == 0 {
			continue
		}
		a := acc[g.i-first]
		if a == nil {
			a = map[Group]*Counts{}
			acc[g.i-first] = a
		}
		for f, v := range m {
			model, rest, ok1 := strings.Cut(f, "\x00")
			tier, counter, ok2 := strings.Cut(rest, "\x00")
			n, err := strconv.ParseInt(v, 10, 64)
			if !ok1 || !ok2 || err != nil {
				continue // not ours
			}
			grp := q.group(g.tenant, model, tier)
			c := a[grp]
			if c == nil {
				c = &Counts{}
				a[grp] = c
			}
			c.set(counter, n)
		}
	}
	step := int64(q.Width.Duration() / time.Second)
	out := make([]Bucket, end-first)
	for n := range out {
		i := first + int64(n)
		out[n].Start = time.Unix(i*step, 0).UTC()
		out[n].End = time.Unix((i+1)*step, 0).UTC()
		for g, c := range acc[n] {
			out[n].Results = append(out[n].Results, Result{Group: g, Counts: *c})
		}
		slices.SortFunc(out[n].Results, func(a, b Result) int { return compareGroups(a.Group, b.Group) })
	}
	return out, nil
}

// set adds n to the counter named as increments names it.
func (c *Counts) set(counter string, n int64) {
	switch counter {
	case "n":
		c.Requests += n
	case "e":
		c.Errors += n
	case "i":
		c.InputTokens += n
	case "o":
		c.OutputTokens += n
	case "c":
		c.CachedTokens += n
	case "$":
		c.Cost += money.Money(n)
	case "k":
		c.ColdStarts += n
	case "K":
		c.ColdStartTime += time.Duration(n)
	case "g":
		c.GrammarTime += time.Duration(n)
	default:
		kind, rest, _ := strings.Cut(counter, ":")
		switch kind {
		case "x":
			if r := ParseReason(rest); r != NotRefused {
				c.Refusals[r] += n
			}
		case "l", "t":
			j, err := strconv.Atoi(rest)
			if err != nil || j < 0 || j >= len(Bins) {
				return
			}
			if kind == "l" {
				c.Latency[j] += uint32(n)
			} else {
				c.TTFT[j] += uint32(n)
			}
		}
	}
}
