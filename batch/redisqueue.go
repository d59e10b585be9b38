package batch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
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
// driver starts go on Redis Streams read by one consumer group each, so every process
// runs lines of every job; outcomes go back on a stream per job that only the job's
// driver reads. A line naming a model goes on that model's stream, which only the
// processes serving the model read (their LineRunner is a Placer); a line routed by
// tier (or every line, without a Placer) goes on the shared stream, which every
// process reads. With P the key prefix, J a job id and M a model:
//
//	P batch:lines          stream, group "workers": one entry per started line (job, i, the request)
//	P batch:lines:M        the same, for the lines naming model M
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
// lines in flight (InFlight) and their outcomes still on the stream. A line for a
// model this process does not serve that reaches it on the shared stream (put there
// by a process without a Placer) is moved to its model's stream.
type RedisQueue struct {
	c    redis.UniversalClient
	opts RedisQueueOptions

	ctx     context.Context
	run     LineRunner
	deliver func(Outcome)
	wg      sync.WaitGroup

	place   Placer          // nil: every line on the shared stream
	serves  map[string]bool // the models this process runs lines of (place.LineModels)
	streams []string        // the streams this process's workers read: the shared one, then its models'
	grouped bool            // the fetcher made sure every stream's group exists (it is lost with the stream)

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
func (q *RedisQueue) modelKey(model string) string {
	return q.opts.KeyPrefix + "batch:lines:" + model
}

// LinesKey is the stream of the lines of model ("": the shared stream).
func (q *RedisQueue) LinesKey(model string) string {
	if model == "" {
		return q.linesKey()
	}
	return q.modelKey(model)
}

// streamOf is the stream a line goes on.
func (q *RedisQueue) streamOf(r *Request) string {
	if q.place == nil {
		return q.linesKey()
	}
	return q.LinesKey(q.place.LineModel(*r))
}
func (q *RedisQueue) deadKey() string { return q.opts.KeyPrefix + "batch:dead" }
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
	q.streams = []string{q.linesKey()}
	if p, ok := run.(Placer); ok {
		q.place, q.serves = p, map[string]bool{}
		for _, m := range p.LineModels() {
			if !q.serves[m] {
				q.serves[m] = true
				q.streams = append(q.streams, q.modelKey(m))
			}
		}
	}
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

// groups makes sure the consumer group of every stream this process reads exists
// (it is lost when Redis loses the stream); once, and again after a NOGROUP error.
func (q *RedisQueue) groups(ctx context.Context) error {
	if q.grouped {
		return nil
	}
	for _, st := range q.streams {
		err := q.c.XGroupCreateMkStream(ctx, st, redisGroup, "0").Err()
		if err != nil && !isBusyGroup(err) {
			return err
		}
	}
	q.grouped = true
	return nil
}

// noGroup notes an error of a read: a missing group is made again before the next.
func (q *RedisQueue) noGroup(err error) {
	if isNoGroup(err) {
		q.grouped = false
	}
}

// isBusyGroup and isNoGroup match Redis's error replies by their code (a
// redis.Error, through errors.As: redis.HasErrorPrefix), never other errors that
// happen to mention the word: BUSYGROUP, the group exists already; NOGROUP, the
// stream or its group is gone.
func isBusyGroup(err error) bool { return redis.HasErrorPrefix(err, "BUSYGROUP") }

func isNoGroup(err error) bool { return redis.HasErrorPrefix(err, "NOGROUP") }

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
	err = q.c.XAdd(ctx, &redis.XAddArgs{Stream: q.streamOf(&t.Req), Values: []any{"job", t.Job, "i", idx, "req", req}}).Err()
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

// line is a stream entry handed to a worker: claimed when it was taken from a worker
// that stopped renewing it.
type line struct {
	stream  string
	msg     redis.XMessage
	claimed bool
}

// fetch hands lines to up to workers goroutines: whenever some are free it claims
// lines whose worker died, else reads new ones, from as many of its streams as
// workers are free (at most one line per stream). It alone blocks on Redis (one
// connection), however many workers run.
func (q *RedisQueue) fetch(ctx context.Context, workers int) {
	block := min(q.opts.Lease/2, 500*time.Millisecond)
	cursors := make([]string, len(q.streams)) // XAUTOCLAIM scans each stream's pending lines from here
	for i := range cursors {
		cursors[i] = "0-0"
	}
	slots := make(chan struct{}, workers)
	for turn := 0; ctx.Err() == nil; turn++ {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		free := 1
	more:
		for free < len(q.streams) {
			select {
			case slots <- struct{}{}:
				free++
			default:
				break more
			}
		}
		lines := q.next(ctx, cursors, turn, free, block)
		for range free - len(lines) {
			<-slots
		}
		for _, l := range lines {
			q.wg.Add(1)
			go func() {
				defer q.wg.Done()
				defer func() { <-slots }()
				if err := q.handle(ctx, l); err != nil && ctx.Err() == nil {
					q.opts.Logger.Warn("batch: a line", "stream", l.stream, "id", l.msg.ID, "error", err)
				}
			}()
		}
	}
}

// next is at most n lines to run, from n of the streams taken in turn from turn:
// ones idle for the lease (claimed), else new ones.
func (q *RedisQueue) next(ctx context.Context, cursors []string, turn, n int, block time.Duration) []line {
	if err := q.groups(ctx); err != nil {
		if ctx.Err() == nil {
			q.opts.Logger.Warn("batch: consumer group", "error", err)
			sleep(ctx, time.Second)
		}
		return nil
	}
	idx := make([]int, 0, n)
	for k := 0; k < len(q.streams) && len(idx) < n; k++ {
		idx = append(idx, (turn+k)%len(q.streams))
	}
	claims := make([]*redis.XAutoClaimCmd, len(idx))
	q.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, i := range idx {
			claims[k] = p.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: q.streams[i], Group: redisGroup,
				Consumer: q.opts.Node, MinIdle: q.opts.Lease, Start: cursors[i], Count: 1})
		}
		return nil
	})
	var out []line
	for k, i := range idx {
		msgs, next, err := claims[k].Result()
		q.noGroup(err)
		if err == nil {
			cursors[i] = next
			if len(msgs) > 0 {
				out = append(out, line{stream: q.streams[i], msg: msgs[0], claimed: true})
			}
		}
	}
	if len(out) > 0 {
		return out
	}
	keys := make([]string, 0, 2*len(idx))
	for _, i := range idx {
		keys = append(keys, q.streams[i])
	}
	for range idx {
		keys = append(keys, ">")
	}
	ss, err := q.c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: redisGroup, Consumer: q.opts.Node,
		Streams: keys, Count: 1, Block: block}).Result()
	if err != nil {
		q.noGroup(err)
		if !errors.Is(err, redis.Nil) && ctx.Err() == nil {
			q.opts.Logger.Warn("batch: reading lines", "error", err)
			sleep(ctx, 200*time.Millisecond)
		}
		return nil
	}
	for _, s := range ss {
		for _, m := range s.Messages {
			out = append(out, line{stream: s.Stream, msg: m})
		}
	}
	return out
}

// handle runs one line (or acknowledges one whose outcome is already out, or
// dead-letters one delivered too often, or moves one for a model this process does
// not serve to that model's stream).
func (q *RedisQueue) handle(ctx context.Context, l line) error {
	msg := l.msg
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
		return q.ack(ctx, l.stream, msg.ID)
	}
	state, err := q.c.HGet(ctx, q.inflightKey(job), idx).Result()
	if errors.Is(err, redis.Nil) || state == "done" { // committed, or its outcome is out
		return q.ack(ctx, l.stream, msg.ID)
	}
	if err != nil {
		return err
	}
	if q.place != nil && l.stream == q.linesKey() {
		if m := q.place.LineModel(req); m != "" && !q.serves[m] {
			// Added, then acknowledged here: a crash in between leaves it on both
			// streams, and whichever runs second finds its outcome out (or runs it
			// again, as a line claimed from a stalled worker may: charged once).
			if err := q.c.XAdd(ctx, &redis.XAddArgs{Stream: q.modelKey(m), Values: msg.Values}).Err(); err != nil {
				return err
			}
			return q.ack(ctx, l.stream, msg.ID)
		}
	}
	if l.claimed {
		ps, err := q.c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: l.stream, Group: redisGroup,
			Start: msg.ID, End: msg.ID, Count: 1}).Result()
		if err != nil {
			return err
		}
		if len(ps) == 1 && ps[0].RetryCount > int64(q.opts.MaxDeliveries) {
			return q.deadLetter(ctx, l, job, i, ps[0].RetryCount-1)
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
				q.c.XClaimJustID(lctx, &redis.XClaimArgs{Stream: l.stream, Group: redisGroup,
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
	return q.out(ctx, l.stream, msg.ID, job, i, resp)
}

// out writes a line's outcome and marks it done in one transaction, then
// acknowledges the line.
func (q *RedisQueue) out(ctx context.Context, stream, id, job string, i int, resp Response) error {
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
	return q.ack(ctx, stream, id)
}

func (q *RedisQueue) ack(ctx context.Context, stream, id string) error {
	_, err := q.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.XAck(ctx, stream, redisGroup, id)
		p.XDel(ctx, stream, id)
		return nil
	})
	return err
}

// deadLetter moves a line delivered more than MaxDeliveries times to the dead-letter
// stream, and gives its job an outcome that puts it in the error file.
func (q *RedisQueue) deadLetter(ctx context.Context, l line, job string, i int, failed int64) error {
	msg := l.msg
	if err := q.c.XAdd(ctx, &redis.XAddArgs{Stream: q.deadKey(), Values: []any{"job", job, "i", strconv.Itoa(i),
		"deliveries", failed, "req", msg.Values["req"]}}).Err(); err != nil {
		return err
	}
	q.opts.Logger.Warn("batch: a line dead-lettered", "job", job, "line", i, "deliveries", failed)
	return q.out(ctx, l.stream, msg.ID, job, i, Response{Code: CodeDeadLetter,
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
