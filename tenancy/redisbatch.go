package tenancy

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// admitBatchScript admits n requests of one tenant in order, each all or nothing and
// decided exactly as if it ran alone at the same time after the ones before it
// (TestRedisBatchAdmitMatchesSequential checks this against the one-request script): a
// concurrency slot (leased until now + ttl), tokens/min (the prompt's tokens must be
// left, none taken), requests/s (one taken), and the reservation of the request's
// worst case (total) against the day's and month's budgets. The tenant's state (its
// expired reservations reaped, slots, the two GCRA states, spend, held money) is read
// once and written once for the whole batch.
//
// It answers 4 values per request: {1, roomD, roomM, 0} admitted, or the first refusal
// (the request took nothing): {0, 0, 0, 0} concurrency, {2, 0, 0, tokens left}
// tokens/min, {3, 0, 0, retry after in s (a string)} requests/s, {4, roomD, roomM, 0}
// money. A room of -1 means no ceiling.
//
// KEYS: spentD spentM held res resamt slots rps tpm
// ARGV: n ttlms ceilD ceilM maxConc rpsBurst rpsRate rpsPeriod tpmBurst tpmRate
// tpmPeriod (the tenant's quota, the same for the batch), then 3 per request: id total
// need
var admitBatchScript = redis.NewScript(luaLib + luaGCRA + admitBatchLua)

const admitBatchLua = `
local t = redis.call('TIME')
local now = tonumber(t[1])*1000 + math.floor(tonumber(t[2])/1000)
reap(KEYS[3], KEYS[4], KEYS[5], now)
local n, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local cd, cm, max = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local rpsB, rpsR, rpsP = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local tpmB, tpmR, tpmP = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
local ids = {}
for i = 1, n do ids[i] = ARGV[9 + i*3] end
local nslots, inslot = 0, {}
if max > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now)
  nslots = redis.call('ZCARD', KEYS[6])
  local sc = redis.call('ZMSCORE', KEYS[6], unpack(ids))
  for i = 1, n do if sc[i] then inslot[ids[i]] = true end end
end
local amt = {}
local cur = redis.call('HMGET', KEYS[5], unpack(ids))
for i = 1, n do if amt[ids[i]] == nil then amt[ids[i]] = num(cur[i]) end end
local sd, sm, held0 = num(redis.call('GET', KEYS[1])), num(redis.call('GET', KEYS[2])), num(redis.call('GET', KEYS[3]))
local held, moved = held0, false
local gnow = gcra_now(t)
local tpmv, rpsv, tpmd, rpsd
local tpmread, rpsread = false, false
local slotted, resop, out = {}, {}, {}
for i = 1, n do
  local o = 9 + i*3
  local id, total = ids[i], tonumber(ARGV[o+1])
  local code, r1, r2, r3 = 1, 0, 0, 0
  local tpm, rps
  if max > 0 and not inslot[id] and nslots >= max then code = 0 end
  if code == 1 and tpmR > 0 then
    if not tpmread then tpmv, tpmread = redis.call('GET', KEYS[8]), true end
    tpm = gcra_allow_n_at(tpmv, KEYS[8], tpmB, tpmR, tpmP, 0, gnow)
    if tpm.remaining < tonumber(ARGV[o+2]) then code, r3 = 2, math.floor(tpm.remaining) end
  end
  if code == 1 and rpsR > 0 then
    if not rpsread then rpsv, rpsread = redis.call('GET', KEYS[7]), true end
    rps = gcra_allow_n_at(rpsv, KEYS[7], rpsB, rpsR, rpsP, 1, gnow)
    if rps.allowed == 0 then code, r3 = 3, tostring(rps.retry) end
  end
  local delta = 0
  if code == 1 then
    delta = total - amt[id]
    if delta > 0 and ((cd > 0 and sd + held + delta > cd) or (cm > 0 and sm + held + delta > cm)) then
      code, r1, r2 = 4, room(sd, cd, held), room(sm, cm, held)
    end
  end
  if code == 1 then
    if tpm and tpm.ex > 0 then tpmv, tpmd = tpm.tat, tpm end
    if rps and rps.ex > 0 then rpsv, rpsd = rps.tat, rps end
    if max > 0 then
      if not inslot[id] then nslots, inslot[id] = nslots + 1, true end
      slotted[#slotted+1] = id
    end
    if delta ~= 0 then held, moved = held + delta, true end
    if total > 0 then
      amt[id] = total
      resop[#resop+1] = id
    elseif amt[id] ~= 0 then
      amt[id] = 0
      resop[#resop+1] = id
    end
    r1, r2 = room(sd, cd, held), room(sm, cm, held)
  end
  out[#out+1], out[#out+2], out[#out+3], out[#out+4] = code, r1, r2, r3
end
gcra_apply(tpmd)
gcra_apply(rpsd)
local exp = tostring(now + ttl) -- converted once, not once per member
if #slotted > 0 then
  local z = {}
  for _, id in ipairs(slotted) do z[#z+1] = exp z[#z+1] = id end
  redis.call('ZADD', KEYS[6], unpack(z))
end
if moved then redis.call('INCRBY', KEYS[3], held - held0) end
if #resop > 0 then
  local hs, zs, del = {}, {}, {}
  local seen = {}
  for j = #resop, 1, -1 do
    local id = resop[j]
    if not seen[id] then
      seen[id] = true
      if amt[id] > 0 then
        hs[#hs+1] = id hs[#hs+1] = amt[id]
        zs[#zs+1] = exp zs[#zs+1] = id
      else
        del[#del+1] = id
      end
    end
  end
  if #hs > 0 then
    redis.call('HSET', KEYS[5], unpack(hs))
    redis.call('ZADD', KEYS[4], unpack(zs))
  end
  if #del > 0 then
    redis.call('HDEL', KEYS[5], unpack(del))
    redis.call('ZREM', KEYS[4], unpack(del))
  end
end
return out
`

// settleBatchScript settles n tickets of one tenant in the same day and month windows,
// in order, each exactly as if settled alone at the same time after the ones before it
// (TestRedisBatchSettleMatchesSequential): a ticket settled before (its done key
// exists: a retry) charges nothing more and answers what it charged; otherwise its
// reservation is replaced by its actual cost, added to the day and month, its slot
// freed, the tokens used charged to tokens/min (redis_rate's allowAtMost), and its
// done key written. The tenant's state is read once and written once.
//
// It answers what each settlement charged.
//
// KEYS: spentD spentM held res resamt slots tpm, then done:ID of each request
// ARGV: n expD expM tpmBurst tpmRate tpmPeriod (the tenant's, the same for the batch),
// then 4 per request: id actual tokens keepSeconds
var settleBatchScript = redis.NewScript(luaLib + luaGCRA + settleBatchLua)

const settleBatchLua = `
local n = tonumber(ARGV[1])
local tpmB, tpmR, tpmP = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local ids, dk = {}, {}
for i = 1, n do ids[i], dk[i] = ARGV[3 + i*4], KEYS[7+i] end
local cur = redis.call('HMGET', KEYS[5], unpack(ids))
local prevs = redis.call('MGET', unpack(dk))
local amt, done = {}, {}
for i = 1, n do
  if amt[ids[i]] == nil then amt[ids[i]] = num(cur[i]) end
  if prevs[i] and done[dk[i]] == nil then done[dk[i]] = prevs[i] end
end
local dheld, moved, add = 0, false, 0
local tpmv, tpmd, gnow
local sets, out = {}, {}
for i = 1, n do
  local o = 3 + i*4
  local id, a, tokens, keep = ids[i], tonumber(ARGV[o+1]), tonumber(ARGV[o+2]), tonumber(ARGV[o+3])
  local c = amt[id]
  if c ~= 0 then dheld, moved = dheld - c, true end
  amt[id] = 0
  local prev = done[dk[i]]
  if prev then
    -- Settled before (a retried command, or a batch line run again after its worker
    -- died): charge nothing more, give back what a new reservation under id holds.
    out[i] = tonumber(prev)
  else
    if a > 0 then add = add + a end
    if tokens > 0 and tpmR > 0 then
      if not gnow then gnow, tpmv = gcra_now(redis.call('TIME')), redis.call('GET', KEYS[7]) end
      local d = gcra_allow_at_most_at(tpmv, KEYS[7], tpmB, tpmR, tpmP, tokens, gnow)
      if d.ex > 0 then tpmv, tpmd = d.tat, d end
    end
    -- A batch line's settlement (kept longer) is remembered only when it charged: a
    -- line refused or failed at no cost runs again later under the same id and must
    -- be charged then.
    local line = keep > 3600
    if a > 0 or (not line and (c ~= 0 or tokens > 0)) then
      done[dk[i]] = a
      sets[#sets+1] = i
    end
    out[i] = a
  end
end
if moved then redis.call('DECRBY', KEYS[3], -dheld) end
redis.call('HDEL', KEYS[5], unpack(ids))
redis.call('ZREM', KEYS[4], unpack(ids))
redis.call('ZREM', KEYS[6], unpack(ids))
if add > 0 then
  redis.call('INCRBY', KEYS[1], add)
  redis.call('EXPIREAT', KEYS[1], ARGV[2])
  redis.call('INCRBY', KEYS[2], add)
  redis.call('EXPIREAT', KEYS[2], ARGV[3])
end
gcra_apply(tpmd)
for _, i in ipairs(sets) do
  redis.call('SET', dk[i], ARGV[3 + i*4 + 1], 'EX', ARGV[3 + i*4 + 3])
end
return out
`

// batchPipe coalesces the admissions and settlements of concurrent requests: each of
// its senders takes a call and every other one waiting, groups them by script and
// tenant (and budget windows), and sends each group as ONE script carrying all its
// requests' arguments (admitBatchScript, settleBatchScript), all groups in one
// pipeline. Redis reads and writes each tenant's state once per group instead of once
// per request, and this process pays one write and one read per flush. A call alone
// goes out at once; each request still waits for one round trip.
type batchPipe struct {
	c     redis.UniversalClient
	calls chan *batchCall
	stop  chan struct{}
}

// batchGroup is what the calls of one script share: the script, the tenant's budget
// windows (its keys) and its quota.
type batchGroup struct {
	settle     bool
	day, month string // the spent keys
	q          Quota
}

// batchCall is one request's share of a batch script.
type batchCall struct {
	s     *redis.Script
	group batchGroup // calls of one group go in one script
	keys  []string   // the group's KEYS (taken from its first call)
	key   string     // this call's own key, appended to KEYS ("": none)
	head  []any      // the group's arguments after n: its quota (taken from its first call)
	args  []any      // this call's arguments
	per   int        // answers per call
	res   []any      // this call's answers
	err   error
	done  chan struct{}
}

// batchSenders is how many flushes may be in flight at once; batchMax the most calls
// in one flush.
const (
	batchSenders = 2
	batchMax     = 256
)

func newBatchPipe(c redis.UniversalClient) *batchPipe {
	p := &batchPipe{c: c, calls: make(chan *batchCall, 1024), stop: make(chan struct{})}
	for range batchSenders {
		go p.send()
	}
	return p
}

func (p *batchPipe) close() { close(p.stop) }

// run runs call in the next flush (at once, alone, once the pipe is closed) and
// returns its answers.
func (p *batchPipe) run(call *batchCall) ([]any, error) {
	call.done = make(chan struct{})
	select {
	case p.calls <- call:
		<-call.done
	case <-p.stop:
		p.exec([]*batchCall{call})
	}
	return call.res, call.err
}

func (p *batchPipe) send() {
	batch := make([]*batchCall, 0, batchMax)
	for {
		batch = batch[:0]
		select {
		case <-p.stop:
			return
		case call := <-p.calls:
			batch = append(batch, call)
		}
	more:
		for len(batch) < batchMax {
			select {
			case call := <-p.calls:
				batch = append(batch, call)
			default:
				break more
			}
		}
		p.exec(batch)
	}
}

// script is one group's script: its calls in the order taken.
type script struct {
	calls []*batchCall
	cmd   *redis.Cmd
}

func (s *script) keysArgs() ([]string, []any) {
	first := s.calls[0]
	keys := make([]string, 0, len(first.keys)+len(s.calls))
	keys = append(keys, first.keys...)
	args := make([]any, 0, 1+len(first.head)+len(s.calls)*len(first.args))
	args = append(args, len(s.calls))
	args = append(args, first.head...)
	for _, c := range s.calls {
		if c.key != "" {
			keys = append(keys, c.key)
		}
		args = append(args, c.args...)
	}
	return keys, args
}

// exec sends the calls' scripts, one per group, in one pipeline, and hands each call
// its answers.
func (p *batchPipe) exec(batch []*batchCall) {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var scripts []*script
	byGroup := make(map[batchGroup]*script, 4)
	for _, call := range batch {
		s := byGroup[call.group]
		if s == nil {
			s = &script{}
			byGroup[call.group] = s
			scripts = append(scripts, s)
		}
		s.calls = append(s.calls, call)
	}
	if len(scripts) == 1 {
		s := scripts[0]
		keys, args := s.keysArgs()
		s.cmd = s.calls[0].s.Run(c, p.c, keys, args...)
	} else {
		pipe := p.c.Pipeline()
		for _, s := range scripts {
			keys, args := s.keysArgs()
			s.cmd = s.calls[0].s.EvalSha(c, pipe, keys, args...)
		}
		_, _ = pipe.Exec(c) // each script has its own answer or error
		for _, s := range scripts {
			if redis.HasErrorPrefix(s.cmd.Err(), "NOSCRIPT") { // Redis restarted or flushed its scripts
				keys, args := s.keysArgs()
				s.cmd = s.calls[0].s.Run(c, p.c, keys, args...)
			}
		}
	}
	for _, s := range scripts {
		v, err := s.cmd.Slice()
		per := s.calls[0].per
		if err == nil && len(v) != per*len(s.calls) {
			err = fmt.Errorf("tenancy: batch script answered %d values for %d calls", len(v), len(s.calls))
		}
		for i, call := range s.calls {
			if err != nil {
				call.err = err
			} else {
				call.res = v[i*per : (i+1)*per : (i+1)*per]
			}
			close(call.done)
		}
	}
}
