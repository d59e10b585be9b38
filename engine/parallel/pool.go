// Package parallel runs the engine's matrix work on a persistent pool of workers.
//
// A Pool has one worker per thread; the calling goroutine is worker 0, so a pool of 1
// runs everything inline. Run splits a range of rows into one contiguous part per
// worker, the same way every time for the same range and pool size, and returns when
// all parts are done. A row is always computed whole by one worker, so its value never
// depends on how the range was split: this is what keeps the engine deterministic
// across thread counts.
//
// Dispatch costs no allocation and no goroutine: the task is an interface holding a
// pointer the caller keeps, and idle workers spin briefly on an atomic generation
// counter before parking, as llama.cpp's polling thread pool does, so the hundreds of
// small dispatches of one decoded token don't each pay a scheduler wake-up.
package parallel

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Task is work over a range of rows. RunRange computes rows [start, end); worker is
// the index of the worker running it (for per-worker scratch buffers).
type Task interface {
	RunRange(worker, start, end int)
}

// yieldWaiting is SetYieldWaiting's setting.
var yieldWaiting atomic.Bool

// SetYieldWaiting makes Run's caller, as it waits for the other parts, yield its core
// to the OS (sched_yield) beside Go's scheduler, as idle workers always do. A worker
// process (engine/worker) turns it on: its parent's threads, woken by the worker's
// socket writes, are queued by the kernel on the writer's core, and then run while
// the caller waits anyway instead of preempting a thread that is doing its part (on
// 2 cores: 125m workers mode 0.88x -> 0.93x of in process; docs/PERFORMANCE.md,
// issue 19). In process it stays off.
func SetYieldWaiting(on bool) { yieldWaiting.Store(on) }

// Pool is a set of persistent workers. Its methods must not be called concurrently:
// one Pool serves one model step at a time (the scheduler's goroutine).
type Pool struct {
	n       int
	gen     atomic.Uint64 // bumped once per Run; workers wait for it to change
	pending atomic.Int32  // parts of the current Run not yet finished
	task    Task
	rows    int
	grain   int

	mu     sync.Mutex // guards parked and the wake-up of parked workers
	cond   *sync.Cond
	parked int
	exited sync.WaitGroup
	closed atomic.Bool
}

// New starts a pool of n workers (n <= 0: one per CPU). The caller's goroutine is
// worker 0, so n-1 goroutines are started.
func New(n int) *Pool {
	if n <= 0 {
		n = runtime.NumCPU()
	}
	p := &Pool{n: n}
	p.cond = sync.NewCond(&p.mu)
	for w := 1; w < n; w++ {
		p.exited.Add(1)
		go p.worker(w, 0) // generation 0: no Run yet
	}
	return p
}

// Size is the number of workers.
func (p *Pool) Size() int { return p.n }

// Split returns worker w's part of rows split n ways in units of grain rows: the same
// answer for the same arguments, always.
func Split(rows, grain, n, w int) (start, end int) {
	if grain < 1 {
		grain = 1
	}
	units := (rows + grain - 1) / grain
	per, extra := units/n, units%n
	su := w*per + min(w, extra)
	eu := su + per
	if w < extra {
		eu++
	}
	return min(su*grain, rows), min(eu*grain, rows)
}

// Run computes rows [0, rows) of t on all workers, each taking a contiguous part whose
// size is a multiple of grain (but the last), and returns when every part is done.
func (p *Pool) Run(t Task, rows, grain int) {
	if rows <= 0 {
		return
	}
	if p.n == 1 || rows <= grain {
		t.RunRange(0, 0, rows)
		return
	}
	if p.closed.Load() {
		panic("parallel: Run on a closed Pool")
	}
	p.task, p.rows, p.grain = t, rows, grain
	p.pending.Store(int32(p.n))
	p.gen.Add(1)
	p.mu.Lock()
	if p.parked > 0 {
		p.cond.Broadcast()
	}
	p.mu.Unlock()
	p.runPart(0)
	// Wait for the other parts polling, as the workers do; a Gosched on every poll
	// made the scheduler's lock the hottest thing in a profile of a busy machine.
	for i := 1; p.pending.Load() != 0; i++ {
		if i&63 == 0 {
			runtime.Gosched()
			if raceBuild || yieldWaiting.Load() {
				osYield()
			}
		}
	}
	p.task = nil
}

func (p *Pool) runPart(w int) {
	start, end := Split(p.rows, p.grain, p.n, w)
	if start < end {
		p.task.RunRange(w, start, end)
	}
	p.pending.Add(-1)
}

// worker runs its part of every generation after seen. seen must be passed in, not
// read here: a goroutine that starts late would otherwise skip the first Run.
func (p *Pool) worker(w int, seen uint64) {
	defer p.exited.Done()
	for {
		// Spin for new work, then park until Run or Close wakes us.
		got := false
		for i := 0; i < spinIters; i++ {
			if p.gen.Load() != seen {
				got = true
				break
			}
			if i&63 == 63 {
				runtime.Gosched()
				osYield() // and to other processes' threads (yield_linux.go)
			}
		}
		if !got {
			p.mu.Lock()
			for p.gen.Load() == seen && !p.closed.Load() {
				p.parked++
				p.cond.Wait()
				p.parked--
			}
			p.mu.Unlock()
		}
		if p.closed.Load() {
			return
		}
		seen = p.gen.Load()
		p.runPart(w)
	}
}

// Close stops the workers. The pool must not be used afterwards.
func (p *Pool) Close() {
	if p.closed.Swap(true) {
		return
	}
	p.mu.Lock()
	p.cond.Broadcast()
	p.mu.Unlock()
	p.exited.Wait()
}
