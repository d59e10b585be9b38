package lease

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is the Store shared by several processes through one Redis (model-boss's
// GPUBoss layout). With P the key prefix and D the device, it keeps:
//
//	P lease:{D}:z          sorted set: member holder, score expiry (ms since the epoch, the callers' clock)
//	P lease:{D}:l:HOLDER   hash: bytes, prio, ttl (ms), idle (0/1), node, gen
//	P lease:{D}:hb:HOLDER  string: the holder's node id, expiring TTL after the last acquire or heartbeat (Redis's clock)
//	P lease:{D}:gen        counter: each Acquire's generation (gen), so a lease acquired again is told from the one before
//	P lease:devices        set: every device that has had a lease (for Expire)
//	P lease:preempt:NODE   pub/sub channel: requests to NODE to unload an idle lease (a JSON PreemptRequest)
//
// A lease is live while its score is after now and its heartbeat key exists: so a
// holder that stops beating loses its lease within its TTL by Redis's clock even when
// the callers' clocks disagree, and an expired lease is never renewed (Heartbeat
// refuses it and removes it). Acquire is one Lua script: drop the dead leases of the
// device, sum the rest (the holder's own excluded), and add the lease only when the sum
// plus its bytes fits the budget, so no interleaving of processes exceeds a device.
// The braces make every key of a device one hash slot.
//
// When Redis does not answer, every method returns an error that is not ErrNoMemory
// or ErrNotHeld: a load fails (closed), and a holder whose heartbeats fail keeps
// serving only until its TTL, after which it must acquire again (its lease may have
// been taken). A Redis restarted without persistence has forgotten every lease: the
// next heartbeats return ErrNotHeld and their holders acquire again.
type Redis struct {
	c      redis.UniversalClient
	prefix string // key prefix, e.g. "lmlite:"
	node   string // this process's node id

	// PreemptWait bounds how long Unload waits for another process to give up a
	// lease; 0: 10s.
	PreemptWait time.Duration
}

var _ Store = (*Redis)(nil)

// NewRedis returns the store on client c (internal/rediscli builds it) with keys under
// keyPrefix; node names this process (configs' redis.node_id): leases acquired here
// record it, and the preempt requests for them come on its channel.
func NewRedis(c redis.UniversalClient, keyPrefix, node string) *Redis {
	return &Redis{c: c, prefix: keyPrefix, node: node}
}

// Node is the store's node id.
func (r *Redis) Node() string { return r.node }

func (r *Redis) devBase(device string) string { return r.prefix + "lease:{" + device + "}:" }
func (r *Redis) devicesKey() string           { return r.prefix + "lease:devices" }

// PreemptChannel is the pub/sub channel on which node receives preempt requests.
func (r *Redis) PreemptChannel(node string) string { return r.prefix + "lease:preempt:" + node }

func ms(d time.Duration) int64 { return max(1, int64((d+time.Millisecond-1)/time.Millisecond)) }

func redisErr(op string, err error) error { return fmt.Errorf("%w %s: %w", ErrRedis, op, err) }

// Expired or heartbeat-less members of a device's set are dead; both Acquire and
// Expire drop them. The hash outlives the heartbeat key (2×TTL + a minute) so that
// Expire can still report a dead lease's numbers.
var acquireScript = redis.NewScript(`
local z, base, holder = KEYS[1], ARGV[1], ARGV[2]
local bytes, prio, ttl = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local now, budget = tonumber(ARGV[7]), tonumber(ARGV[8])
local used, reclaim = 0, 0
local m = redis.call('ZRANGE', z, 0, -1, 'WITHSCORES')
for i = 1, #m, 2 do
  local h, exp = m[i], tonumber(m[i+1])
  if exp <= now or redis.call('EXISTS', base .. 'hb:' .. h) == 0 then
    redis.call('ZREM', z, h)
    redis.call('DEL', base .. 'l:' .. h, base .. 'hb:' .. h)
  elseif h ~= holder then
    local f = redis.call('HMGET', base .. 'l:' .. h, 'bytes', 'prio', 'idle')
    local b = tonumber(f[1]) or 0
    used = used + b
    if f[3] == '1' and (tonumber(f[2]) or 0) < prio then reclaim = reclaim + b end
  end
end
if used + bytes > budget then return {0, used, reclaim} end
local exp = now + ttl
redis.call('ZADD', z, exp, holder)
local gen = redis.call('INCR', base .. 'gen')
redis.call('HSET', base .. 'l:' .. holder, 'bytes', ARGV[3], 'prio', ARGV[4], 'ttl', ARGV[5], 'idle', ARGV[6], 'node', ARGV[9], 'gen', gen)
redis.call('PEXPIRE', base .. 'l:' .. holder, 2 * ttl + 60000)
redis.call('SET', base .. 'hb:' .. holder, ARGV[9], 'PX', ttl)
redis.call('SADD', KEYS[2], ARGV[10])
return {1, exp}
`)

// Acquire implements Store.
func (r *Redis) Acquire(ctx context.Context, now time.Time, l Lease, budget int64) (Lease, error) {
	if err := l.validate(); err != nil {
		return Lease{}, err
	}
	base := r.devBase(l.Device)
	res, err := acquireScript.Run(ctx, r.c, []string{base + "z", r.devicesKey()},
		base, l.Holder, l.Bytes, l.Priority, ms(l.TTL), boolArg(l.Idle), now.UnixMilli(), budget, r.node, l.Device).Int64Slice()
	if err != nil {
		return Lease{}, redisErr("acquire", err)
	}
	if len(res) != 3 && len(res) != 2 {
		return Lease{}, fmt.Errorf("%w acquire: unexpected reply %v", ErrRedis, res)
	}
	if res[0] == 0 {
		return Lease{}, &NoMemoryError{Device: l.Device, Want: l.Bytes, Budget: budget, Used: res[1], Reclaimable: res[2]}
	}
	l.Expires = time.UnixMilli(res[1])
	return l, nil
}

func boolArg(b bool) int {
	if b {
		return 1
	}
	return 0
}

var heartbeatScript = redis.NewScript(`
local z, base, holder, now = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3])
local exp = redis.call('ZSCORE', z, holder)
local ttl = tonumber(redis.call('HGET', base .. 'l:' .. holder, 'ttl'))
if not exp or tonumber(exp) <= now or not ttl or redis.call('EXISTS', base .. 'hb:' .. holder) == 0 then
  redis.call('ZREM', z, holder)
  redis.call('DEL', base .. 'l:' .. holder, base .. 'hb:' .. holder)
  return 0
end
redis.call('ZADD', z, now + ttl, holder)
redis.call('HSET', base .. 'l:' .. holder, 'idle', ARGV[4])
redis.call('PEXPIRE', base .. 'l:' .. holder, 2 * ttl + 60000)
redis.call('PEXPIRE', base .. 'hb:' .. holder, ttl)
return 1
`)

// Heartbeat implements Store.
func (r *Redis) Heartbeat(ctx context.Context, now time.Time, device, holder string, idle bool) error {
	base := r.devBase(device)
	ok, err := heartbeatScript.Run(ctx, r.c, []string{base + "z"}, base, holder, now.UnixMilli(), boolArg(idle)).Int()
	if err != nil {
		return redisErr("heartbeat", err)
	}
	if ok == 0 {
		return fmt.Errorf("%w: %s on %s", ErrNotHeld, holder, device)
	}
	return nil
}

var releaseScript = redis.NewScript(`
local n = redis.call('ZREM', KEYS[1], ARGV[2])
redis.call('DEL', ARGV[1] .. 'l:' .. ARGV[2], ARGV[1] .. 'hb:' .. ARGV[2])
return n
`)

// Release implements Store.
func (r *Redis) Release(ctx context.Context, device, holder string) error {
	base := r.devBase(device)
	n, err := releaseScript.Run(ctx, r.c, []string{base + "z"}, base, holder).Int()
	if err != nil {
		return redisErr("release", err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s on %s", ErrNotHeld, holder, device)
	}
	return nil
}

var releaseGenScript = redis.NewScript(`
if redis.call('HGET', ARGV[1] .. 'l:' .. ARGV[2], 'gen') ~= ARGV[3] then return 0 end
redis.call('ZREM', KEYS[1], ARGV[2])
redis.call('DEL', ARGV[1] .. 'l:' .. ARGV[2], ARGV[1] .. 'hb:' .. ARGV[2])
return 1
`)

// releaseGen releases holder's lease if it is still the acquisition of generation gen.
func (r *Redis) releaseGen(ctx context.Context, device, holder, gen string) error {
	base := r.devBase(device)
	if err := releaseGenScript.Run(ctx, r.c, []string{base + "z"}, base, holder, gen).Err(); err != nil {
		return redisErr("release", err)
	}
	return nil
}

// listScript returns the live leases of a device (ARGV[3] "live") or removes and
// returns the dead ones ("dead"), as flat groups of holder, expiry, bytes, prio, ttl,
// idle, node.
var listScript = redis.NewScript(`
local z, base, now, dead = KEYS[1], ARGV[1], tonumber(ARGV[2]), ARGV[3] == 'dead'
local out = {}
local m = redis.call('ZRANGE', z, 0, -1, 'WITHSCORES')
for i = 1, #m, 2 do
  local h, exp = m[i], m[i+1]
  local live = tonumber(exp) > now and redis.call('EXISTS', base .. 'hb:' .. h) == 1
  if live ~= dead then
    local f = redis.call('HMGET', base .. 'l:' .. h, 'bytes', 'prio', 'ttl', 'idle', 'node')
    out[#out+1] = h
    out[#out+1] = exp
    for j = 1, 5 do out[#out+1] = f[j] or '' end
    if dead then
      redis.call('ZREM', z, h)
      redis.call('DEL', base .. 'l:' .. h, base .. 'hb:' .. h)
    end
  end
end
return out
`)

func (r *Redis) list(ctx context.Context, now time.Time, device, mode string) ([]Lease, error) {
	base := r.devBase(device)
	vals, err := listScript.Run(ctx, r.c, []string{base + "z"}, base, now.UnixMilli(), mode).StringSlice()
	if err != nil {
		return nil, redisErr("list", err)
	}
	if len(vals)%7 != 0 {
		return nil, fmt.Errorf("%w list: %d values", ErrRedis, len(vals))
	}
	var out []Lease
	for i := 0; i < len(vals); i += 7 {
		g := vals[i : i+7]
		exp, err1 := strconv.ParseFloat(g[1], 64)
		l := Lease{Device: device, Holder: g[0], Expires: time.UnixMilli(int64(exp)), Idle: g[5] == "1", Node: g[6]}
		var err2, err3, err4 error
		if g[2] != "" || mode == "live" { // a dead lease's hash may be gone: zero numbers
			l.Bytes, err2 = strconv.ParseInt(g[2], 10, 64)
			l.Priority, err3 = strconv.Atoi(g[3])
			var t int64
			t, err4 = strconv.ParseInt(g[4], 10, 64)
			l.TTL = time.Duration(t) * time.Millisecond
		}
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			return nil, fmt.Errorf("%w list: lease %s on %s: %w", ErrRedis, g[0], device, err)
		}
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b Lease) int { return cmp.Compare(a.Holder, b.Holder) })
	return out, nil
}

// List implements Store.
func (r *Redis) List(ctx context.Context, now time.Time, device string) ([]Lease, error) {
	return r.list(ctx, now, device, "live")
}

// Expire implements Store: for every device, it removes and returns the leases whose
// expiry is past or whose heartbeat key Redis has expired.
func (r *Redis) Expire(ctx context.Context, now time.Time) ([]Lease, error) {
	devices, err := r.c.SMembers(ctx, r.devicesKey()).Result()
	if err != nil {
		return nil, redisErr("expire", err)
	}
	slices.Sort(devices)
	var out []Lease
	for _, d := range devices {
		gone, err := r.list(ctx, now, d, "dead")
		if err != nil {
			return out, err
		}
		out = append(out, gone...)
	}
	return out, nil
}

// PreemptRequest asks a holder's process to unload an idle lease so that a load of
// higher priority fits. It travels as JSON on the holder's node's preempt channel.
type PreemptRequest struct {
	Device   string `json:"device"`
	Holder   string `json:"holder"`   // the lease to give up
	By       string `json:"by"`       // the holder that wants the memory
	Priority int    `json:"priority"` // its priority
	Node     string `json:"node"`     // its node
}

// ErrNoListener: a preempt request reached no process (the holder's node does not
// listen on its channel, or is gone); its lease expires on its own within its TTL.
var ErrNoListener = errors.New("lease: no process listens for the holder's preempt requests")

// ErrNotGivenUp: the holder got the preempt request but did not give its lease up
// within the wait (it is busy again, or refused).
var ErrNotGivenUp = errors.New("lease: the holder did not give its lease up")

// Unload returns the unload function for Acquire on this store: a victim held by this
// node is unloaded by local; a victim held by another node is asked to unload over its
// preempt channel, and Unload waits (PreemptWait at most) until its lease is gone.
// by is the lease being acquired.
func (r *Redis) Unload(by Lease, local func(Lease) error) func(Lease) error {
	return func(v Lease) error {
		node, err := r.c.HGet(context.Background(), r.devBase(v.Device)+"l:"+v.Holder, "node").Result()
		switch {
		case errors.Is(err, redis.Nil):
			return nil // gone already
		case err != nil:
			return redisErr("preempt", err)
		case node == r.node:
			return local(v)
		}
		return r.preempt(node, v, by)
	}
}

func (r *Redis) preempt(node string, v, by Lease) error {
	wait := cmp.Or(r.PreemptWait, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	msg, _ := json.Marshal(PreemptRequest{Device: v.Device, Holder: v.Holder, By: by.Holder, Priority: by.Priority, Node: r.node})
	n, err := r.c.Publish(ctx, r.PreemptChannel(node), msg).Result()
	if err != nil {
		return redisErr("preempt", err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s of node %s", ErrNoListener, v.Holder, node)
	}
	hb := r.devBase(v.Device) + "hb:" + v.Holder
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if n, err := r.c.Exists(ctx, hb).Result(); err == nil && n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s of node %s, within %v (busy again, or refused)", ErrNotGivenUp, v.Holder, node, wait)
		case <-tick.C:
		}
	}
}

// Listen subscribes to this node's preempt channel and, until stop is called, hands
// each request for a lease this node holds to handle, in order: handle unloads the
// model if it is still idle and of lower priority than req.Priority, and returns an
// error to refuse (the model is busy again); on nil the lease is released, unless
// it was acquired again meanwhile (a new lease of the same holder, a later gen,
// stays). A request for a lease that is gone is dropped. Listen returns once the
// subscription is active. go-redis resubscribes after a reconnect.
func (r *Redis) Listen(handle func(PreemptRequest) error) (stop func(), err error) {
	ctx, cancel := context.WithCancel(context.Background())
	ps := r.c.Subscribe(ctx, r.PreemptChannel(r.node))
	if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
		cancel()
		ps.Close()
		return nil, redisErr("listen", err)
	}
	ch := ps.Channel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range ch {
			var req PreemptRequest
			if json.Unmarshal([]byte(m.Payload), &req) != nil || req.Holder == "" {
				continue
			}
			// The lease asked about, by its generation: when handle unloads the model,
			// a request may load it again and acquire a new lease under the same holder
			// before handle returns; that one is not ours to release.
			gen, err := r.c.HGet(ctx, r.devBase(req.Device)+"l:"+req.Holder, "gen").Result()
			if err != nil {
				continue // gone already (redis.Nil), or Redis unreachable: nothing to give up now
			}
			if handle(req) == nil {
				r.releaseGen(ctx, req.Device, req.Holder, gen)
			}
		}
	}()
	return func() { cancel(); ps.Close(); <-done }, nil
}
