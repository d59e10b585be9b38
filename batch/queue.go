package batch

import (
	"context"
	"sync"
)

// Task is a line a job's driver started: its worst case is reserved against the job's
// cap until the line's Outcome is committed.
type Task struct {
	Job   string
	Index int
	Req   Request
}

// Outcome is a task's response on its way back to the job's driver.
type Outcome struct {
	Job   string
	Index int
	Resp  Response
	Token string // the queue's handle of the outcome (Settled's argument)
}

// Queue carries the lines a job's driver starts to the workers that run them, and
// their outcomes back. The Manager's driver of a job is the only one that reserves
// and settles its lines against the cap, so the cap stays exact wherever the lines
// run. InProcess runs them in this process; RedisQueue on a Redis Stream with a
// consumer group shared by every process (redisqueue.go).
type Queue interface {
	// Run starts the queue's workers, which run lines with run (at most workers at
	// once) and hand every outcome to deliver, until ctx ends. Wait returns once they
	// have stopped and nothing more will be delivered.
	Run(ctx context.Context, run LineRunner, workers int, deliver func(Outcome))
	Wait()
	// Submit hands a started line to the workers.
	Submit(ctx context.Context, t Task) error
	// InFlight lists the lines of job submitted (before a restart) whose outcome was
	// not settled: they are still running somewhere, or their outcome is on its way.
	InFlight(ctx context.Context, job string) ([]int, error)
	// Settled says the driver committed (or dropped) an outcome: the queue forgets it.
	Settled(ctx context.Context, o Outcome) error
	// Ended says the job ended: the queue drops whatever it holds of it.
	Ended(ctx context.Context, job string) error
}

// Placer is what a LineRunner may also be for a queue that several processes share
// (RedisQueue): it says which model a line needs and which models this process runs,
// so that each line goes only to a process that serves its model.
type Placer interface {
	// LineModel is the model the line names; "": any process may run it (a line
	// routed by tier runs on the tiers of the process that takes it).
	LineModel(r Request) string
	// LineModels is the models this process runs lines of.
	LineModels() []string
}

// InProcess is the Queue of one process: each submitted line runs on its own
// goroutine once it gets one of the workers' slots. A restart forgets every line in
// flight (they run again, marked Retry).
type InProcess struct {
	ctx     context.Context
	run     LineRunner
	deliver func(Outcome)
	slots   chan struct{}
	mu      sync.Mutex // orders Submit's wg.Add before Wait (after ctx is cancelled)
	wg      sync.WaitGroup
}

// NewInProcess returns an in-process queue.
func NewInProcess() *InProcess { return &InProcess{} }

func (q *InProcess) Run(ctx context.Context, run LineRunner, workers int, deliver func(Outcome)) {
	q.ctx, q.run, q.deliver, q.slots = ctx, run, deliver, make(chan struct{}, max(workers, 1))
}

// Wait waits for the lines submitted; call it once ctx is cancelled: no Submit adds
// one after.
func (q *InProcess) Wait() {
	q.mu.Lock()
	q.mu.Unlock() // a Submit that began before has added its line
	q.wg.Wait()
}

func (q *InProcess) Submit(_ context.Context, t Task) error {
	q.mu.Lock()
	if err := q.ctx.Err(); err != nil { // closing: Wait may be waiting
		q.mu.Unlock()
		return err
	}
	q.wg.Add(1)
	q.mu.Unlock()
	go func() {
		defer q.wg.Done()
		o := Outcome{Job: t.Job, Index: t.Index}
		select {
		case q.slots <- struct{}{}:
		case <-q.ctx.Done():
			o.Resp = Response{StatusCode: 499} // not run, not committed
			q.deliver(o)
			return
		}
		o.Resp = q.run.RunLine(q.ctx, t.Req)
		<-q.slots
		q.deliver(o)
	}()
	return nil
}

func (q *InProcess) InFlight(context.Context, string) ([]int, error) { return nil, nil }
func (q *InProcess) Settled(context.Context, Outcome) error          { return nil }
func (q *InProcess) Ended(context.Context, string) error             { return nil }
