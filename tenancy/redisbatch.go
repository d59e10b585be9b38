package tenancy

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// flushScript runs one flush's admissions and settlements of one tenant (same quota,
// same day and month windows) as ONE script: first the settlements in order, then the
// admissions in order, each decided exactly as if it ran alone at the same time after
// the ones before it (TestRedisFlushScriptMatchesOneByOne checks this against the
// one-request scripts). The tenant's state (spend, held money, the reservations of the
// flush's tickets, the two GCRA states) is read once and written once.
//
// A settlement: a ticket settled before (its done key exists: a retry) charges nothing
// more and answers what it charged; otherwise its reservation is replaced by its actual
// cost, added to the day and month, its slot freed, the tokens used charged to
// tokens/min (redis_rate's allowAtMost), and its done key written. It answers 2 values:
// {what it charged, 0}, or {what the earlier settlement charged, 1} when a batch
// line's ticket was settled before by another settlement (another run of the line:
// its by key holds another settler's token). A settlement found done by the same
// token (this command retried after a lost reply), and any ticket not a batch line's
// (settled by one request only), answers 0: the charge is its own.
//
// An admission, all or nothing, after the tenant's expired reservations are reaped
// (their money back): a concurrency slot (leased until now + ttl), tokens/min (the
// prompt's tokens must be left, none taken), requests/s (one taken), and the
// reservation of the request's worst case (total) against the day's and month's
// budgets. It answers 4 values: {1, roomD, roomM, 0} admitted, or the first refusal
// (the request took nothing): {0, 0, 0, 0} concurrency, {2, 0, 0, tokens left}
// tokens/min, {3, 0, 0, retry after in s (a string)} requests/s, {4, roomD, roomM, 0}
// money. A room of -1 means no ceiling.
//
// The answers: the admissions' (4 each), then the settlements' (2 each).
//
// KEYS: spentD spentM s z (RedisShared's keys), then done:ID and by:ID of each
// settlement (a ticket not a batch line's passes done:ID twice and an empty token:
// its by key is never read or written)
// ARGV: nA ttlms ceilD ceilM maxConc rpsBurst rpsRate rpsPeriod tpmBurst tpmRate
// tpmPeriod (the tenant's quota) nS expD expM, then 3 per admission: id total need,
// then 5 per settlement: id actual tokens keepSeconds token (unique per settlement
// command, the same when it is retried)
var flushScript = redis.NewScript(luaBase + luaGCRAAt + flushLua)

//go:embed lua/flush.lua
var flushLua string

// batchPipe coalesces the admissions and settlements of concurrent requests: its
// sender takes a call and every other one waiting, groups them by tenant, quota and
// budget windows, and sends each group as ONE flushScript carrying all its requests'
// arguments, settlements and admissions together, every group of the flush in one
// pipeline. Redis reads and writes each tenant's state once per group instead of once
// per request, and this process pays one write and one read per flush. A call alone
// goes out at once; calls that arrive while a flush is in flight go out together in
// the next one when it returns (group commit): each request waits for at most two
// round trips.
type batchPipe struct {
	c     redis.UniversalClient
	ttl   time.Duration // of reservations and slots
	calls chan *batchCall
	stop  chan struct{}
}

// batchGroup is what the calls of one script share: the tenant's budget windows (its
// spent keys) and its quota.
type batchGroup struct {
	day, month string
	q          Quota
}

// batchCall is one request's share of a flush script.
type batchCall struct {
	group  batchGroup // calls of one group go in one script
	settle bool       // a settlement (else an admission)
	keys   []string   // the group's KEYS (taken from its first call)
	exp    [2]int64   // settlement: when the day's and month's keys expire (unix s)
	key    [2]string  // settlement: its done and by keys, appended to KEYS
	args   []any      // this call's arguments
	res    []any      // this call's answers
	err    error
	done   chan struct{}
}

// batchSenders is how many flushes may be in flight at once; batchMax the most calls
// in one flush.
const (
	batchSenders = 1
	batchMax     = 256
)

func newBatchPipe(c redis.UniversalClient, ttl time.Duration) *batchPipe {
	p := &batchPipe{c: c, ttl: ttl, calls: make(chan *batchCall, 1024), stop: make(chan struct{})}
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

// script is one group's script: its admissions and settlements in the order taken.
type script struct {
	admits, settles []*batchCall
	cmd             *redis.Cmd
}

func (s *script) first() *batchCall {
	if len(s.admits) > 0 {
		return s.admits[0]
	}
	return s.settles[0]
}

// keysArgs are the script's KEYS and ARGV (see flushScript).
func (s *script) keysArgs(ttl time.Duration) ([]string, []any) {
	first := s.first()
	keys := make([]string, 0, len(first.keys)+2*len(s.settles))
	keys = append(keys, first.keys...)
	args := make([]any, 0, 14+3*len(s.admits)+5*len(s.settles))
	args = append(args, len(s.admits))
	args = append(args, admitHead(&first.group.q, ttl)...)
	var exp [2]int64
	if len(s.settles) > 0 {
		exp = s.settles[0].exp
	}
	args = append(args, len(s.settles), exp[0], exp[1])
	for _, c := range s.admits {
		args = append(args, c.args...)
	}
	for _, c := range s.settles {
		keys = append(keys, c.key[0], c.key[1])
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
		if call.settle {
			s.settles = append(s.settles, call)
		} else {
			s.admits = append(s.admits, call)
		}
	}
	if len(scripts) == 1 {
		s := scripts[0]
		keys, args := s.keysArgs(p.ttl)
		s.cmd = flushScript.Run(c, p.c, keys, args...)
	} else {
		pipe := p.c.Pipeline()
		for _, s := range scripts {
			keys, args := s.keysArgs(p.ttl)
			s.cmd = flushScript.EvalSha(c, pipe, keys, args...)
		}
		_, _ = pipe.Exec(c) // each script has its own answer or error
		for _, s := range scripts {
			if redis.HasErrorPrefix(s.cmd.Err(), "NOSCRIPT") { // Redis restarted or flushed its scripts
				keys, args := s.keysArgs(p.ttl)
				s.cmd = flushScript.Run(c, p.c, keys, args...)
			}
		}
	}
	for _, s := range scripts {
		v, err := s.cmd.Slice()
		if err == nil && len(v) != 4*len(s.admits)+2*len(s.settles) {
			err = fmt.Errorf("tenancy: flush script answered %d values for %d admissions and %d settlements", len(v), len(s.admits), len(s.settles))
		}
		for i, call := range s.admits {
			if err != nil {
				call.err = err
			} else {
				call.res = v[i*4 : (i+1)*4 : (i+1)*4]
			}
			close(call.done)
		}
		for i, call := range s.settles {
			if err != nil {
				call.err = err
			} else {
				j := 4*len(s.admits) + 2*i
				call.res = v[j : j+2 : j+2]
			}
			close(call.done)
		}
	}
}
