package batch

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lmlite/lmlite/internal/rediscli"
	"github.com/lmlite/lmlite/internal/redistest"
	"github.com/lmlite/lmlite/money"
)

func redisClient(t testing.TB, url string) *redis.Client {
	t.Helper()
	c, err := rediscli.New(rediscli.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// worker is a process's share of a RedisQueue without jobs of its own: it runs lines
// with run until stop.
type worker struct {
	q    *RedisQueue
	stop context.CancelFunc
}

func startWorker(t testing.TB, c redis.UniversalClient, node string, run LineRunner, n int, lease time.Duration, maxDeliveries int) *worker {
	q := NewRedisQueue(c, RedisQueueOptions{Node: node, Lease: lease, MaxDeliveries: maxDeliveries})
	ctx, cancel := context.WithCancel(context.Background())
	q.Run(ctx, run, n, nil)
	w := &worker{q: q, stop: func() { cancel(); q.Wait() }}
	t.Cleanup(w.stop)
	return w
}

// owner is a Manager on a RedisQueue that runs no line itself: every line of its jobs
// runs on the workers.
func owner(t *testing.T, c redis.UniversalClient, dir string, conc int) (*Manager, *Store) {
	t.Helper()
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	q := NewRedisQueue(c, RedisQueueOptions{Node: "owner", Workers: -1, Lease: time.Second})
	m := NewManager(s, nopRunner{}, Options{Checker: price, Concurrency: conc, Queue: q})
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

type nopRunner struct{}

func (nopRunner) RunLine(context.Context, Request) Response {
	panic("the owner runs no line")
}

func totalRuns(fs ...*fakeRunner) (map[string]int, []int) {
	all := map[string]int{}
	var per []int
	for _, f := range fs {
		f.mu.Lock()
		n := 0
		for id, k := range f.runs {
			all[id] += k
			n += k
		}
		f.mu.Unlock()
		per = append(per, n)
	}
	return all, per
}

// Two worker processes (two queues on one Redis) share the lines of a job owned by a
// third that runs none: every line runs once, on one of them, and each ran some.
func TestRedisQueueWorkersShareTheLines(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	c := redisClient(t, rs.URL(0))
	a, b := &fakeRunner{delay: 2 * time.Millisecond}, &fakeRunner{delay: 2 * time.Millisecond}
	startWorker(t, c, "a", a, 4, time.Second, 3)
	startWorker(t, c, "b", b, 4, time.Second, 3)
	m, s := owner(t, c, t.TempDir(), 8)
	j := waitTerminal(t, s, startJob(t, m, 100, 0).ID)
	out, errs := readLines(t, s, j)
	if j.Status != Completed || len(out) != 100 || len(errs) != 0 {
		t.Fatalf("job %s: %d out, %d errors", j.Status, len(out), len(errs))
	}
	runs, per := totalRuns(a, b)
	if len(runs) != 100 || per[0] == 0 || per[1] == 0 {
		t.Fatalf("%d lines ran; per worker %v", len(runs), per)
	}
	for id, n := range runs {
		if n != 1 {
			t.Fatalf("%s ran %d times", id, n)
		}
	}
	// The job's keys go (the driver drops them just after it marks the job ended) and
	// the lines stream empties (a worker acknowledges a line just after its outcome).
	ctx := context.Background()
	var keys, lines int64
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		keys, _ = c.Exists(ctx, "lmlite:batch:{"+j.ID+"}:inflight", "lmlite:batch:{"+j.ID+"}:out").Result()
		lines, _ = c.XLen(ctx, "lmlite:batch:lines").Result()
		if keys == 0 && lines == 0 {
			break
		}
	}
	if keys != 0 || lines != 0 {
		t.Fatalf("%d job keys and %d lines left on the stream", keys, lines)
	}
}

// The cap holds across processes: 200 lines whose worst cases total 4× the cap, run
// by three workers, 16 at once. Spend ≤ cap, every line in exactly one file.
func TestRedisQueueCapAcrossWorkers(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	c := redisClient(t, rs.URL(0))
	var fs []*fakeRunner
	for i := range 3 {
		f := &fakeRunner{delay: time.Millisecond}
		fs = append(fs, f)
		startWorker(t, c, fmt.Sprint("w", i), f, 6, time.Second, 3)
	}
	m, s := owner(t, c, t.TempDir(), 16)
	cap := money.Money(200 * 100 / 4)
	j := waitTerminal(t, s, startJob(t, m, 200, cap).ID)
	out, errs := readLines(t, s, j)
	if j.Status != Cancelled || len(j.Errors) != 1 || j.Errors[0].Code != CodeMaxCost || j.Spent > cap {
		t.Fatalf("job %s spent %d of %d: %+v", j.Status, j.Spent, cap, j.Errors)
	}
	if len(out)+len(errs) != 200 || len(out) < 50 {
		t.Fatalf("%d out + %d errors", len(out), len(errs))
	}
	runs, _ := totalRuns(fs...)
	if len(runs) != len(out) {
		t.Fatalf("%d lines ran, %d in the output", len(runs), len(out))
	}
}

// hangRunner never finishes a line: it holds it until its process dies.
type hangRunner struct{}

func (hangRunner) RunLine(ctx context.Context, _ Request) Response {
	<-ctx.Done()
	return Response{StatusCode: 499}
}

// redisWorkerChild is the child process of TestRedisQueueKilledWorkerProcess: a
// worker on BATCH_REDIS_WORKER that takes two lines and hangs on them until killed.
func redisWorkerChild() {
	c, err := rediscli.New(rediscli.Options{URL: os.Getenv("BATCH_REDIS_WORKER")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	q := NewRedisQueue(c, RedisQueueOptions{Node: "child", Lease: 300 * time.Millisecond})
	var run LineRunner = hangRunner{}
	if ms := os.Getenv("BATCH_REDIS_WORKER_MODELS"); ms != "" { // a process serving these models
		run = placedHang{models: strings.Split(ms, ",")}
	}
	q.Run(context.Background(), run, 2, nil)
	select {}
}

// placedHang is a hangRunner of a process serving models (a Placer).
type placedHang struct {
	hangRunner
	models []string
}

func (p placedHang) LineModel(r Request) string { return lineModel(r) }
func (p placedHang) LineModels() []string       { return p.models }

// lineModel is the model a test line names ("" for "auto": routed by tier).
func lineModel(r Request) string {
	var b struct{ Model string }
	json.Unmarshal(r.Body, &b)
	if b.Model == "auto" {
		return ""
	}
	return b.Model
}

// modelRunner is a fakeRunner of a process serving models (a Placer); it records the
// model of every line it runs.
type modelRunner struct {
	retryRunner
	models []string
	mmu    sync.Mutex
	ran    map[string]int // by the line's model ("auto" for a tier-routed one)
}

func (r *modelRunner) LineModel(req Request) string { return lineModel(req) }
func (r *modelRunner) LineModels() []string         { return r.models }

func (r *modelRunner) RunLine(ctx context.Context, req Request) Response {
	var b struct{ Model string }
	json.Unmarshal(req.Body, &b)
	r.mmu.Lock()
	if r.ran == nil {
		r.ran = map[string]int{}
	}
	r.ran[b.Model]++
	r.mmu.Unlock()
	return r.retryRunner.RunLine(ctx, req)
}

// reset forgets what ran (between two jobs of a test).
func (r *modelRunner) reset() {
	r.mmu.Lock()
	r.ran = nil
	r.mmu.Unlock()
	r.fakeRunner.mu.Lock()
	r.fakeRunner.runs = nil
	r.fakeRunner.mu.Unlock()
}

func (r *modelRunner) count(model string) int {
	r.mmu.Lock()
	defer r.mmu.Unlock()
	return r.ran[model]
}

// placedOwner is an owner whose lines are placed by model (its runner is a Placer,
// as the gateway is); it runs none.
type placedOwner struct{ nopRunner }

func (placedOwner) LineModel(r Request) string { return lineModel(r) }
func (placedOwner) LineModels() []string       { return nil }

// startModelJob starts a job of n lines whose i-th line names models[i%len(models)].
func startModelJob(t *testing.T, m *Manager, n int, models ...string) Job {
	t.Helper()
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"req-%d","method":"POST","url":"/v1/completions","body":{"model":%q,"prompt":"p%d"}}`+"\n", i, models[i%len(models)], i)
	}
	f, err := m.Store().PutFile("t1", "batch", "in.jsonl", strings.NewReader(b.String()), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	j, err := m.Create("t1", "k1", f.ID, "/v1/completions", "24h", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// The lines of a model go only to the processes serving it: X serves m1, Y serves
// m2, and a job's lines name m1, m2 or auto (routed by tier: either may run it).
// Placed by the owner (a Placer) or not (an owner that puts every line on the shared
// stream: a worker moves a line for a model it lacks to its model's stream), every
// line runs once, on a process serving its model, and the job completes.
func TestRedisQueueLinesGoToTheProcessesServingTheirModel(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	c := redisClient(t, rs.URL(0))
	x := &modelRunner{models: []string{"m1"}}
	y := &modelRunner{models: []string{"m2"}}
	x.delay, y.delay = 2*time.Millisecond, 2*time.Millisecond
	startWorker(t, c, "x", x, 4, time.Second, 3)
	startWorker(t, c, "y", y, 4, time.Second, 3)
	for _, placed := range []bool{true, false} {
		s, err := OpenStore(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		var run LineRunner = nopRunner{}
		if placed {
			run = placedOwner{}
		}
		q := NewRedisQueue(c, RedisQueueOptions{Node: fmt.Sprint("owner-", placed), Workers: -1, Lease: time.Second})
		m := NewManager(s, run, Options{Checker: price, Concurrency: 8, Queue: q})
		j := waitTerminal(t, s, startModelJob(t, m, 90, "m1", "m2", "auto").ID)
		out, errs := readLines(t, s, j)
		m.Close()
		s.Close()
		if j.Status != Completed || len(out) != 90 || len(errs) != 0 || j.Counts.Completed != 90 || j.Counts.Failed != 0 {
			t.Fatalf("placed %v: job %s %+v: %d out, %d errors", placed, j.Status, j.Counts, len(out), len(errs))
		}
		if x.count("m2") != 0 || y.count("m1") != 0 {
			t.Fatalf("placed %v: X ran %d lines of m2, Y %d of m1", placed, x.count("m2"), y.count("m1"))
		}
		if x.count("m1") != 30 || y.count("m2") != 30 || x.count("auto")+y.count("auto") != 30 {
			t.Fatalf("placed %v: X ran %v, Y %v", placed, x.ran, y.ran)
		}
		runs, _ := totalRuns(&x.fakeRunner, &y.fakeRunner)
		for id, n := range runs {
			if n != 1 {
				t.Fatalf("placed %v: %s ran %d times", placed, id, n)
			}
		}
		x.reset()
		y.reset()
	}
	for _, k := range []string{"lmlite:batch:lines", "lmlite:batch:lines:m1", "lmlite:batch:lines:m2"} {
		if n, _ := c.XLen(context.Background(), k).Result(); n != 0 {
			t.Fatalf("%d lines left on %s", n, k)
		}
	}
}

// A process serving m2 killed with SIGKILL while it runs two lines of m2: a process
// serving m2 claims them after the lease and runs them (marked Retry), one serving
// only m1 never gets them; every line ends in the output once.
func TestRedisQueueKilledWorkerOfAModel(t *testing.T) {
	if testing.Short() {
		t.Skip("child process")
	}
	rs := redistest.Start(t, redistest.Options{})
	c := redisClient(t, rs.URL(0))
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	q := NewRedisQueue(c, RedisQueueOptions{Node: "owner", Workers: -1, Lease: time.Second})
	m := NewManager(s, placedOwner{}, Options{Checker: price, Concurrency: 2, Queue: q})
	t.Cleanup(func() { m.Close(); s.Close() })
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "BATCH_REDIS_WORKER="+rs.URL(0), "BATCH_REDIS_WORKER_MODELS=m2")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	j := startModelJob(t, m, 20, "m2", "m2", "m2", "m1")
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, err := c.XPending(ctx, "lmlite:batch:lines:m2", "workers").Result()
		if err == nil && p.Consumers["child"] == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the child did not take two lines of m2: %+v %v", p, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-exited
	x := &modelRunner{models: []string{"m1"}}
	y := &modelRunner{models: []string{"m2"}}
	startWorker(t, c, "x", x, 2, 300*time.Millisecond, 3)
	startWorker(t, c, "y", y, 2, 300*time.Millisecond, 3)
	j = waitTerminal(t, s, j.ID)
	out, errs := readLines(t, s, j)
	if j.Status != Completed || len(out) != 20 || len(errs) != 0 {
		t.Fatalf("job %s: %d out, %d errors", j.Status, len(out), len(errs))
	}
	if x.count("m2") != 0 || x.count("m1") != 5 || y.count("m2") != 15 || len(x.retried) != 0 || len(y.retried) != 2 {
		t.Fatalf("X ran %v (retried %v), Y ran %v (retried %v)", x.ran, x.retried, y.ran, y.retried)
	}
	runs, _ := totalRuns(&x.fakeRunner, &y.fakeRunner)
	for id, n := range runs {
		if n != 1 {
			t.Fatalf("%s ran %d times", id, n)
		}
	}
	rsl, _ := s.Results("t1", j.ID)
	var sum money.Money
	for _, r := range rsl {
		sum += money.Money(r.CompletionTokens)
	}
	if sum != j.Spent {
		t.Fatalf("spent %d, sum of usage %d", j.Spent, sum)
	}
}

// A worker process killed with SIGKILL while it runs two lines: another process's
// worker claims them after the lease (XAUTOCLAIM) and runs them, marked Retry; every
// line ends in the output once.
func TestRedisQueueKilledWorkerProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("child process")
	}
	rs := redistest.Start(t, redistest.Options{})
	c := redisClient(t, rs.URL(0))
	m, s := owner(t, c, t.TempDir(), 2)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "BATCH_REDIS_WORKER="+rs.URL(0))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	j := startJob(t, m, 20, 0)
	// Wait until the child holds both lines the owner lets run at once.
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, err := c.XPending(ctx, "lmlite:batch:lines", "workers").Result()
		if err == nil && p.Consumers["child"] == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the child did not take two lines: %+v %v", p, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	held, err := c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: "lmlite:batch:lines", Group: "workers", Start: "-", End: "+", Count: 10}).Result()
	if err != nil || len(held) != 2 {
		t.Fatalf("pending %+v %v", held, err)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-exited
	rr := &retryRunner{}
	startWorker(t, c, "survivor", rr, 2, 300*time.Millisecond, 3)
	j = waitTerminal(t, s, j.ID)
	out, errs := readLines(t, s, j)
	if j.Status != Completed || len(out) != 20 || len(errs) != 0 {
		t.Fatalf("job %s: %d out, %d errors", j.Status, len(out), len(errs))
	}
	runs, _ := totalRuns(&rr.fakeRunner)
	for id, n := range runs {
		if n != 1 {
			t.Fatalf("%s ran %d times", id, n)
		}
	}
	if len(rr.retried) != 2 {
		t.Fatalf("lines claimed from the dead worker: %v (want the 2 it held)", rr.retried)
	}
	rsl, _ := s.Results("t1", j.ID)
	var sum money.Money
	for _, r := range rsl {
		sum += money.Money(r.CompletionTokens)
	}
	if sum != j.Spent {
		t.Fatalf("spent %d, sum of usage %d", j.Spent, sum)
	}
}

// retryRunner is a fakeRunner that records the lines it got marked Retry.
type retryRunner struct {
	fakeRunner
	rmu     sync.Mutex
	retried []string
}

func (r *retryRunner) RunLine(ctx context.Context, req Request) Response {
	if req.Retry {
		r.rmu.Lock()
		r.retried = append(r.retried, req.RequestID)
		r.rmu.Unlock()
	}
	return r.fakeRunner.RunLine(ctx, req)
}

// poisonRunner kills its worker (cancels the worker's context, so the line is left
// pending unacknowledged) whenever it gets the poison line; it runs the others.
type poisonRunner struct {
	fakeRunner
	poison string
	died   chan string // the RequestID of each poisoned run
	kill   context.CancelFunc
}

func (p *poisonRunner) RunLine(ctx context.Context, r Request) Response {
	if strings.Contains(string(r.Body), p.poison) {
		p.died <- r.RequestID
		p.kill()
		<-ctx.Done()
		return Response{StatusCode: 499}
	}
	return p.fakeRunner.RunLine(ctx, r)
}

// A line whose worker dies on every delivery is dead-lettered after MaxDeliveries:
// it goes to the dead-letter stream and to the job's error file (dead_lettered);
// every other line runs once and the job completes.
func TestRedisQueueDeadLettersALineThatKillsItsWorkers(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	c := redisClient(t, rs.URL(0))
	m, s := owner(t, c, t.TempDir(), 4)
	died := make(chan string, 10)
	var workers []*poisonRunner
	start := func(k int) {
		q := NewRedisQueue(c, RedisQueueOptions{Node: fmt.Sprint("w", k), Lease: 200 * time.Millisecond, MaxDeliveries: 2})
		ctx, cancel := context.WithCancel(context.Background())
		pr := &poisonRunner{poison: `"p7"`, died: died, kill: cancel}
		workers = append(workers, pr)
		q.Run(ctx, pr, 1, nil)
		t.Cleanup(func() { cancel(); q.Wait() })
	}
	start(0)
	j := startJob(t, m, 20, 0)
	// Each worker that dies is replaced by a new one, as a supervisor would.
	deaths := 0
	deadline := time.After(20 * time.Second)
wait:
	for {
		select {
		case <-died:
			deaths++
			start(deaths)
		case <-time.After(10 * time.Millisecond):
			if jj, _ := s.Job("t1", j.ID); jj.Status.Terminal() {
				break wait
			}
		case <-deadline:
			t.Fatal("the job did not end")
		}
	}
	j = waitTerminal(t, s, j.ID)
	out, errs := readLines(t, s, j)
	if j.Status != Completed || len(out) != 19 || len(errs) != 1 || errs["req-7"] != CodeDeadLetter {
		t.Fatalf("job %s: %d out, errors %v", j.Status, len(out), errs)
	}
	if deaths != 2 {
		t.Fatalf("the poison line killed %d workers, want MaxDeliveries = 2", deaths)
	}
	dead, err := c.XRange(context.Background(), "lmlite:batch:dead", "-", "+").Result()
	if err != nil || len(dead) != 1 || dead[0].Values["job"] != j.ID || dead[0].Values["i"] != "7" {
		t.Fatalf("dead letters %+v %v", dead, err)
	}
	var fs []*fakeRunner
	for _, w := range workers {
		fs = append(fs, &w.fakeRunner)
	}
	runs, _ := totalRuns(fs...)
	if len(runs) != 19 {
		t.Fatalf("%d lines ran", len(runs))
	}
	for id, n := range runs {
		if n != 1 {
			t.Fatalf("%s ran %d times", id, n)
		}
	}
}

// The owner restarts (its Manager closed while lines are running on the workers):
// the new Manager finds the lines in flight on Redis, counts them as running, and
// commits their outcomes when they come back, each once.
func TestRedisQueueOwnerRestart(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	c := redisClient(t, rs.URL(0))
	f := &fakeRunner{delay: 30 * time.Millisecond}
	startWorker(t, c, "w", f, 4, time.Second, 3)
	dir := t.TempDir()
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	q := NewRedisQueue(c, RedisQueueOptions{Node: "owner", Workers: -1})
	m := NewManager(s, nopRunner{}, Options{Checker: price, Concurrency: 4, Queue: q})
	j := startJob(t, m, 40, 0)
	deadline := time.Now().Add(10 * time.Second)
	for { // some lines done, some in flight
		jj, _ := s.Job("t1", j.ID)
		n, _ := c.HLen(context.Background(), "lmlite:batch:{"+j.ID+"}:inflight").Result()
		if jj.Counts.Completed >= 8 && n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the job did not progress")
		}
		time.Sleep(2 * time.Millisecond)
	}
	m.Close()
	s.Close()
	m2, s2 := owner(t, c, dir, 4)
	if err := m2.Start(); err != nil {
		t.Fatal(err)
	}
	j = waitTerminal(t, s2, j.ID)
	out, errs := readLines(t, s2, j)
	if j.Status != Completed || len(out) != 40 || len(errs) != 0 {
		t.Fatalf("job %s: %d out, %d errors", j.Status, len(out), len(errs))
	}
	runs, _ := totalRuns(f)
	for id, n := range runs {
		if n != 1 {
			t.Fatalf("%s ran %d times", id, n)
		}
	}
}

// TestRedisGroupErrorsMatchedByCode: the replies of a real Redis for a group made
// twice (BUSYGROUP) and a read of a missing group (NOGROUP), also wrapped, are
// recognised; an error that is not a Redis reply is not, even when its text
// names the code.
func TestRedisGroupErrorsMatchedByCode(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	c := redisClient(t, rs.URL(0))
	ctx := context.Background()
	if err := c.XGroupCreateMkStream(ctx, "s", redisGroup, "0").Err(); err != nil {
		t.Fatal(err)
	}
	busy := c.XGroupCreateMkStream(ctx, "s", redisGroup, "0").Err()
	noGroup := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "missing", Consumer: "c", Streams: []string{"s", ">"}, Count: 1, Block: -1}).Err()
	for _, tc := range []struct {
		name        string
		err         error
		busy, nogrp bool
	}{
		{"BUSYGROUP reply", busy, true, false},
		{"BUSYGROUP reply, wrapped", fmt.Errorf("batch: %w", busy), true, false},
		{"NOGROUP reply", noGroup, false, true},
		{"NOGROUP reply, wrapped", fmt.Errorf("batch: %w", noGroup), false, true},
		{"text naming BUSYGROUP", fmt.Errorf("BUSYGROUP: %w", context.Canceled), false, false},
		{"text naming NOGROUP", fmt.Errorf("read: NOGROUP lost: %w", context.DeadlineExceeded), false, false},
		{"nil", nil, false, false},
	} {
		if got := isBusyGroup(tc.err); got != tc.busy {
			t.Errorf("%s (%v): isBusyGroup %v, want %v", tc.name, tc.err, got, tc.busy)
		}
		if got := isNoGroup(tc.err); got != tc.nogrp {
			t.Errorf("%s (%v): isNoGroup %v, want %v", tc.name, tc.err, got, tc.nogrp)
		}
	}
}
