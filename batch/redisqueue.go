package batch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// CodeDeadLetter is the error-file code of a line whose workers died MaxDeliveries
// times while running it.
const CodeDeadLetter = "dead_lettered"

// RedisQueueOptions configure a RedisQueue.
type RedisQueueOptions struct {
	KeyPrefix string // of every key; "" : "lmlite:"
	Node      string // this process's consumer name in the group (unique per process)
	// Lease is how long a line may go without its worker's heartbeat before another
	// process claims it (XAUTOCLAIM); 0: 30s. A worker renews its line every Lease/3.
	Lease time.Duration
	// MaxDeliveries is how many workers may die on a line before it is dead-lettered
	// (to the dead-letter stream and the job's error file); 0: 3.
	MaxDeliveries int
	// Workers runs this many lines at once here; 0: the Manager's MaxRunning; < 0:
	// none (this process only owns jobs).
	Workers int
	Logger  *slog.Logger
}

// RedisQueue is the Queue of several processes sharing one Redis: the lines every
// driver starts go on one Redis Stream read by one consumer group, so every process
// runs lines of every job; outcomes go back on a stream per job that only the job's
// driver reads. With P the key prefix and J a job id:
//
//	P batch:lines          stream, group "workers": one entry per started line (job, i, the request)
//	P batch:{J}:inflight   hash: line index → "q" while queued or running, "done" once its outcome is out
//	P batch:{J}:out        stream: outcomes not yet committed by the driver (i, the response)
//	P batch:dead           stream: dead-lettered lines (job, i, deliveries, the request)
//
// A worker renews its line's idle time every Lease/3 (XCLAIM JUSTID); a line idle for
// Lease (its worker died) is claimed by another process's worker (XAUTOCLAIM), which
// runs it again unless its outcome is already out, or dead-letters it once it has
// been delivered more than MaxDeliveries times. Writing an outcome and marking its
// line done is one transaction on the job's keys; a line is acknowledged after that,
// so a worker that dies in between leaves a line that the next claim only
// acknowledges. The driver commits an outcome to its store before it deletes it
// (Settled), and skips an outcome of a line it already committed, so each line has
// exactly one result whichever process ran it, and a restarted driver finds its
// lines in flight (InFlight) and their outcomes still on the stream.
type RedisQueue struct {
	c    redis.UniversalClient
	opts RedisQueueOptions

	ctx     context.Context
	run     LineRunner
	deliver func(Outcome)
	wg      sync.WaitGroup

	mu    sync.Mutex
	watch map[string]string // job → the last outcome id read
}

// NewRedisQueue returns a queue on c; Run creates the consumer group if needed.
func NewRedisQueue(c redis.UniversalClient, opts RedisQueueOptions) *RedisQueue {
	if opts.KeyPrefix == "" {
		opts.KeyPrefix = "lmlite:"
	}
	if opts.Lease <= 0 {
		opts.Lease = 30 * time.Second
	}
	if opts.MaxDeliveries <= 0 {
		opts.MaxDeliveries = 3
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &RedisQueue{c: c, opts: opts, watch: map[string]string{}}
}

const redisGroup = "workers"

func (q *RedisQueue) linesKey() string { return q.opts.KeyPrefix + "batch:lines" }
func (q *RedisQueue) deadKey() string  { return q.opts.KeyPrefix + "batch:dead" }
func (q *RedisQueue) inflightKey(job string) string {
	return q.opts.KeyPrefix + "batch:{" + job + "}:inflight"
}
func (q *RedisQueue) outKey(job string) string { return q.opts.KeyPrefix + "batch:{" + job + "}:out" }

// DeadKey is the dead-letter stream's key.
func (q *RedisQueue) DeadKey() string { return q.deadKey() }

// Run creates the consumer group (if missing), starts the workers and the reader of
// this process's jobs' outcomes.
func (q *RedisQueue) Run(ctx context.Context, run LineRunner, workers int, deliver func(Outcome)) {
	q.ctx, q.run, q.deliver = ctx, run, deliver
	if q.opts.Workers != 0 {
		workers = q.opts.Workers
	}
	if workers > 0 {
		q.wg.Add(1)
		go func() { defer q.wg.Done(); q.fetch(ctx, workers) }()
	}
	if deliver != nil {
		q.wg.Add(1)
		go func() { defer q.wg.Done(); q.read(ctx) }()
	}
}

func (q *RedisQueue) Wait() { q.wg.Wait() }

// group makes sure the consumer group exists (it is lost when Redis loses the stream).
func (q *RedisQueue) group(ctx context.Context) error {
	err := q.c.XGroupCreateMkStream(ctx, q.linesKey(), redisGroup, "0").Err()
	if err != nil && strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return nil
	}
	return err
}

func (q *RedisQueue) watchJob(job string) {
	q.mu.Lock()
	if _, ok := q.watch[job]; !ok {
		q.watch[job] = "0"
	}
	q.mu.Unlock()
}

func (q *RedisQueue) Submit(ctx context.Context, t Task) error {
	q.watchJob(t.Job)
	req, err := json.Marshal(&t.Req)
	if err != nil {
		return err
	}
	idx := strconv.Itoa(t.Index)
	if err := q.c.HSet(ctx, q.inflightKey(t.Job), idx, "q").Err(); err != nil {
		return err
	}
	err = q.c.XAdd(ctx, &redis.XAddArgs{Stream: q.linesKey(), Values: []any{"job", t.Job, "i", idx, "req", req}}).Err()
	if err != nil {
		q.c.HDel(context.WithoutCancel(ctx), q.inflightKey(t.Job), idx)
	}
	return err
}

func (q *RedisQueue) InFlight(ctx context.Context, job string) ([]int, error) {
	q.watchJob(job)
	ks, err := q.c.HKeys(ctx, q.inflightKey(job)).Result()
	if err != nil {
		return nil, err
	}
	var ids []int
	for _, k := range ks {
		if i, err := strconv.Atoi(k); err == nil {
			ids = append(ids, i)
		}
	}
	return ids, nil
}

func (q *RedisQueue) Settled(ctx context.Context, o Outcome) error {
	_, err := q.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HDel(ctx, q.inflightKey(o.Job), strconv.Itoa(o.Index))
		if o.Token != "" {
			p.XDel(ctx, q.outKey(o.Job), o.Token)
		}
		return nil
	})
	return err
}

func (q *RedisQueue) Ended(ctx context.Context, job string) error {
	q.mu.Lock()
	delete(q.watch, job)
	q.mu.Unlock()
	return q.c.Del(ctx, q.inflightKey(job), q.outKey(job)).Err()
}

// read delivers the outcomes of the watched jobs, in order, each once per process
// start (a restarted driver reads them again from the first).
func (q *RedisQueue) read(ctx context.Context) {
	for ctx.Err() == nil {
		q.mu.Lock()
		var keys, ids []string
		jobs := map[string]string{}
		for job, id := range q.watch {
			keys = append(keys, q.outKey(job))
			ids = append(ids, id)
			jobs[q.outKey(job)] = job
		}
		q.mu.Unlock()
		if len(keys) == 0 {
			sleep(ctx, 50*time.Millisecond)
			continue
		}
		ss, err := q.c.XRead(ctx, &redis.XReadArgs{Streams: append(keys, ids...), Count: 100, Block: 200 * time.Millisecond}).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				q.opts.Logger.Warn("batch: reading outcomes", "error", err)
				sleep(ctx, 200*time.Millisecond)
			}
			continue
		}
		for _, s := range ss {
			job := jobs[s.Stream]
			for _, msg := range s.Messages {
				o := Outcome{Job: job, Token: msg.ID}
				i, err1 := strconv.Atoi(fmt.Sprint(msg.Values["i"]))
				err2 := json.Unmarshal([]byte(fmt.Sprint(msg.Values["resp"])), &o.Resp)
				q.mu.Lock()
				if _, ok := q.watch[job]; ok {
					q.watch[job] = msg.ID
				}
				q.mu.Unlock()
				if err1 != nil || err2 != nil {
					q.opts.Logger.Warn("batch: a malformed outcome", "job", job, "id", msg.ID)
					continue
				}
				o.Index = i
				q.deliver(o)
			}
		}
	}
}

// fetch hands lines to up to workers goroutines: whenever one is free it claims a
// line whose worker died, else reads a new one. It alone blocks on Redis (one
// connection), however many workers run.
func (q *RedisQueue) fetch(ctx context.Context, workers int) {
	block := min(q.opts.Lease/2, 500*time.Millisecond)
	cursor := "0-0" // XAUTOCLAIM scans the pending lines from here
	slots := make(chan struct{}, workers)
	for ctx.Err() == nil {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		msg, claimed, ok := q.next(ctx, &cursor, block)
		if !ok {
			<-slots
			continue
		}
		q.wg.Add(1)
		go func() {
			defer q.wg.Done()
			defer func() { <-slots }()
			if err := q.handle(ctx, msg, claimed); err != nil && ctx.Err() == nil {
				q.opts.Logger.Warn("batch: a line", "id", msg.ID, "error", err)
			}
		}()
	}
}

// next is a line to run: one idle for the lease (claimed), else a new one.
func (q *RedisQueue) next(ctx context.Context, cursor *string, block time.Duration) (redis.XMessage, bool, bool) {
	if err := q.group(ctx); err != nil {
		if ctx.Err() == nil {
			q.opts.Logger.Warn("batch: consumer group", "error", err)
			sleep(ctx, time.Second)
		}
		return redis.XMessage{}, false, false
	}
	msgs, next, err := q.c.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: q.linesKey(), Group: redisGroup,
		Consumer: q.opts.Node, MinIdle: q.opts.Lease, Start: *cursor, Count: 1}).Result()
	if err == nil {
		*cursor = next
		if len(msgs) > 0 {
			return msgs[0], true, true
		}
	}
	ss, err := q.c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: redisGroup, Consumer: q.opts.Node,
		Streams: []string{q.linesKey(), ">"}, Count: 1, Block: block}).Result()
	if err != nil {
		if !errors.Is(err, redis.Nil) && ctx.Err() == nil {
			q.opts.Logger.Warn("batch: reading lines", "error", err)
			sleep(ctx, 200*time.Millisecond)
		}
		return redis.XMessage{}, false, false
	}
	for _, s := range ss {
		if len(s.Messages) > 0 {
			return s.Messages[0], false, true
		}
	}
	return redis.XMessage{}, false, false
}

// handle runs one line (or acknowledges one whose outcome is already out, or
// dead-letters one delivered too often).
func (q *RedisQueue) handle(ctx context.Context, msg redis.XMessage, claimed bool) error {
	job, _ := msg.Values["job"].(string)
	idx, _ := msg.Values["i"].(string)
	raw, _ := msg.Values["req"].(string)
	var req Request
	i, err := strconv.Atoi(idx)
	if err == nil {
		err = json.Unmarshal([]byte(raw), &req)
	}
	if job == "" || err != nil {
		q.opts.Logger.Warn("batch: a malformed line: dropped", "id", msg.ID)
		return q.ack(ctx, msg.ID)
	}
	state, err := q.c.HGet(ctx, q.inflightKey(job), idx).Result()
	if errors.Is(err, redis.Nil) || state == "done" { // committed, or its outcome is out
		return q.ack(ctx, msg.ID)
	}
	if err != nil {
		return err
	}
	if claimed {
		ps, err := q.c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: q.linesKey(), Group: redisGroup,
			Start: msg.ID, End: msg.ID, Count: 1}).Result()
		if err != nil {
			return err
		}
		if len(ps) == 1 && ps[0].RetryCount > int64(q.opts.MaxDeliveries) {
			return q.deadLetter(ctx, msg, job, i, ps[0].RetryCount-1)
		}
		req.Retry = true // it may have run, and been charged, on the worker that died
	}
	// Renew the line while it runs, so that no other process claims it.
	lctx, stop := context.WithCancel(ctx)
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		t := time.NewTicker(q.opts.Lease / 3)
		defer t.Stop()
		for {
			select {
			case <-lctx.Done():
				return
			case <-t.C:
				q.c.XClaimJustID(lctx, &redis.XClaimArgs{Stream: q.linesKey(), Group: redisGroup,
					Consumer: q.opts.Node, MinIdle: 0, Messages: []string{msg.ID}})
			}
		}
	}()
	resp := q.run.RunLine(ctx, req)
	stop()
	<-renewed
	if ctx.Err() != nil { // stopping: the line stays pending, for another process to claim
		return nil
	}
	return q.out(ctx, msg.ID, job, i, resp)
}

// out writes a line's outcome and marks it done in one transaction, then
// acknowledges the line.
func (q *RedisQueue) out(ctx context.Context, id, job string, i int, resp Response) error {
	b, err := json.Marshal(&resp)
	if err != nil {
		return err
	}
	idx := strconv.Itoa(i)
	_, err = q.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XAdd(ctx, &redis.XAddArgs{Stream: q.outKey(job), Values: []any{"i", idx, "resp", b}})
		p.HSet(ctx, q.inflightKey(job), idx, "done")
		return nil
	})
	if err != nil {
		return err
	}
	return q.ack(ctx, id)
}

func (q *RedisQueue) ack(ctx context.Context, id string) error {
	_, err := q.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.XAck(ctx, q.linesKey(), redisGroup, id)
		p.XDel(ctx, q.linesKey(), id)
		return nil
	})
	return err
}

// deadLetter moves a line delivered more than MaxDeliveries times to the dead-letter
// stream, and gives its job an outcome that puts it in the error file.
func (q *RedisQueue) deadLetter(ctx context.Context, msg redis.XMessage, job string, i int, failed int64) error {
	if err := q.c.XAdd(ctx, &redis.XAddArgs{Stream: q.deadKey(), Values: []any{"job", job, "i", strconv.Itoa(i),
		"deliveries", failed, "req", msg.Values["req"]}}).Err(); err != nil {
		return err
	}
	q.opts.Logger.Warn("batch: a line dead-lettered", "job", job, "line", i, "deliveries", failed)
	return q.out(ctx, msg.ID, job, i, Response{Code: CodeDeadLetter,
		Message: fmt.Sprintf("the workers running this request stopped %d times; it was not run again", failed)})
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
