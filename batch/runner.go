package batch

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/lmlite/lmlite/money"
)

// Request is one line to run for a tenant at batch priority.
type Request struct {
	Tenant    string
	KeyID     string
	Endpoint  string
	RequestID string // stable per job and line: the ledger's request id for the line
	Body      []byte
	MaxCost   money.Money // the line's reservation against the job's cap: it must not cost more
	Retry     bool        // the line may have run before a crash (its ledger entry may exist)
}

// Refusal says a line did not run (and cost nothing).
type Refusal int

const (
	Ran           Refusal = iota
	RefusedBudget         // the tenant's budget is spent: pause until Until
	RefusedLoad           // rate limits or overload: retry at Until
)

// Response is a line's outcome.
type Response struct {
	Refused          Refusal
	Until            time.Time // with a refusal: when to try again
	StatusCode       int
	Body             []byte
	PromptTokens     int
	CompletionTokens int
	Cost             money.Money // actual cost, charged to the tenant
	// Code and Message, without a StatusCode: the line did not run and goes to the
	// error file with this error (a queue's dead letter).
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// LineRunner runs one request body for a tenant at batch priority (the gateway
// implements it with the interactive path's admission and routing).
type LineRunner interface {
	RunLine(ctx context.Context, r Request) Response
}

// Options configure a Manager.
type Options struct {
	Concurrency int // lines of one job at once; 0: 4
	// ConcurrencyOf, when set and above 0 for a job's tenant (its plan's
	// batch_max_concurrency), replaces Concurrency for that tenant's jobs.
	ConcurrencyOf func(tenant string) int
	// MaxUnfinishedOf, when set and above 0 for a tenant (its plan's
	// batch_max_unfinished), bounds its jobs not yet ended: Create refuses one more
	// (TooManyError).
	MaxUnfinishedOf func(tenant string) int
	// Unfinished, when set, counts the tenants' unfinished jobs across the processes
	// sharing it (tenancy.RedisShared) for MaxUnfinishedOf; nil: this process's jobs.
	Unfinished UnfinishedSet
	// SweepEvery is how often expired files are deleted (Store.Sweep); 0: a minute.
	SweepEvery time.Duration
	Now        func() time.Time
	Logger     *slog.Logger
	Checker    Checker
	Poll       time.Duration // the longest a job sleeps before deciding again; 0: 1s
	MaxRunning int           // lines running at once over every job; 0: 4 × Concurrency
	// CrashLimit is how many runs (processes) may die while a line is started before
	// the next run fails it with CodeCrashed instead of running it again; 0: 2; below
	// 0: never (a test that kills its processes itself, where no line is to blame).
	CrashLimit int
	// Queue carries the lines to the workers that run them; nil: InProcess. With
	// RedisQueue the lines of this process's jobs run on every process sharing the
	// Redis, and this process runs theirs.
	Queue Queue
}

// Manager runs jobs: one goroutine per unfinished job applies Decide and runs lines
// through the LineRunner. Every state change goes through the Store first.
type Manager struct {
	store *Store
	run   LineRunner
	opts  Options

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	q     Queue
	quiet chan struct{} // closed once the queue delivers nothing more (after Close)

	runID uint64 // this run's id, in the marks of the lines it starts (started.go)

	mu      sync.Mutex // guards active, running, solo and want
	active  map[string]*driverChans
	running int   // lines the drivers started and have not had back
	solo    *solo // a line on probation running alone, nil if none
	want    *solo // a line on probation waiting for the running lines to end, nil if none

	createMu sync.Mutex // held while a job is counted against its tenant's bound and made
}

// driverChans are a running job driver's inputs.
type driverChans struct {
	tenant  string
	cancels chan chan Job // cancel requests
	results chan Outcome  // its lines' outcomes
}

// NewManager returns a manager over store; Start resumes unfinished jobs.
func NewManager(store *Store, run LineRunner, opts Options) *Manager {
	if opts.Concurrency <= 0 {
		opts.Concurrency = 4
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Poll <= 0 {
		opts.Poll = time.Second
	}
	if opts.MaxRunning <= 0 {
		opts.MaxRunning = 4 * opts.Concurrency
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Queue == nil {
		opts.Queue = NewInProcess()
	}
	if opts.CrashLimit == 0 {
		opts.CrashLimit = 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{store: store, run: run, opts: opts, ctx: ctx, cancel: cancel, active: map[string]*driverChans{},
		q: opts.Queue, quiet: make(chan struct{}), runID: newRunID()}
	m.q.Run(ctx, run, opts.MaxRunning, m.deliver)
	return m
}

// concurrency is how many lines of a job of tenant run at once.
func (m *Manager) concurrency(tenant string) int {
	if m.opts.ConcurrencyOf != nil {
		if n := m.opts.ConcurrencyOf(tenant); n > 0 {
			return n
		}
	}
	return m.opts.Concurrency
}

// deliver hands an outcome to its job's driver; one of a job not running here (it
// ended, or a duplicate after the driver moved on) is settled at once.
func (m *Manager) deliver(o Outcome) {
	m.mu.Lock()
	d := m.active[o.Job]
	m.mu.Unlock()
	if d == nil {
		m.settle(o)
		return
	}
	select {
	case d.results <- o:
	case <-m.ctx.Done():
		select { // closing: the driver still takes what fits
		case d.results <- o:
		default:
		}
	}
}

// settle tells the queue an outcome is committed (also while closing).
func (m *Manager) settle(o Outcome) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := m.q.Settled(ctx, o); err != nil {
		m.opts.Logger.Warn("batch: settle on the queue", "job", o.Job, "line", o.Index, "error", err)
	}
}

// Store is the manager's store.
func (m *Manager) Store() *Store { return m.store }

// Start resumes every unfinished job (after a restart: lines without a committed
// result run again, marked Retry).
func (m *Manager) Start() error {
	js, err := m.store.unfinished()
	if err != nil {
		return err
	}
	for i := range js {
		if u := m.opts.Unfinished; u != nil {
			u.HoldJob(js[i].Tenant, js[i].ID)
		}
		m.spawn(js[i], true)
	}
	m.startSweeper()
	return nil
}

// Close stops every job's driver; running lines are cancelled and not committed (they
// run again after the next Start).
func (m *Manager) Close() {
	m.cancel()
	go func() { m.q.Wait(); close(m.quiet) }()
	m.wg.Wait()
	<-m.quiet
}

// Create makes a job of tenant over its input file and starts it (validating).
func (m *Manager) Create(tenant, keyID, inputFileID, endpoint, window string, meta map[string]string, cap money.Money) (Job, error) {
	return m.CreateJob(Job{Tenant: tenant, KeyID: keyID, InputFileID: inputFileID, Endpoint: endpoint,
		CompletionWindow: window, Metadata: meta, Cap: cap})
}

// Cancel asks tenant's job id to stop; it returns the job as it then is.
func (m *Manager) Cancel(tenant, id string) (Job, error) {
	j, err := m.store.Job(tenant, id)
	if err != nil {
		return j, err
	}
	m.mu.Lock()
	d := m.active[id]
	m.mu.Unlock()
	if d == nil {
		return j, nil
	}
	reply := make(chan Job, 1)
	select {
	case d.cancels <- reply:
		return <-reply, nil
	case <-m.ctx.Done():
		return j, nil
	}
}

func (m *Manager) spawn(j Job, resumed bool) {
	ch := &driverChans{tenant: j.Tenant, cancels: make(chan chan Job), results: make(chan Outcome, 2*m.concurrency(j.Tenant))}
	m.mu.Lock()
	m.active[j.ID] = ch
	m.mu.Unlock()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer func() {
			m.mu.Lock()
			delete(m.active, j.ID)
			m.mu.Unlock()
			m.dropWant(j.ID)
			if u := m.opts.Unfinished; u != nil && m.ctx.Err() == nil { // closing: it resumes at the next Start
				u.EndJob(j.Tenant, j.ID)
			}
		}()
		if err := m.drive(&j, ch, resumed); err != nil && m.ctx.Err() == nil {
			m.opts.Logger.Error("batch", "job", j.ID, "error", err)
		}
	}()
}

// drive owns one job until it ends: validation, then Decide and its application.
// The lines it starts go through the queue; their outcomes come back on ch.results.
func (m *Manager) drive(j *Job, ch *driverChans, resumed bool) error {
	st := m.store
	if j.Target != "" { // crashed while writing the files of a terminal status
		return m.finishEnded(j)
	}
	// The input file stays open while the job runs: its lines are read from it as
	// they start (a deleted or swept file is still read; its name is gone).
	in, _, err := st.Open(j.Tenant, j.InputFileID)
	if err != nil {
		j.Status, j.FailedAt = Failed, m.opts.Now().Unix()
		j.Errors = []LineError{{Code: "invalid_input_file", Message: "the input file is gone: " + err.Error()}}
		return st.saveJob(j)
	}
	defer in.Close()
	// Validation prices the lines into the job's plan (plan.go), kept by the store:
	// the job holds none of its lines in memory.
	total, planned, err := st.planned(j.ID)
	if err != nil {
		return err
	}
	var errs []LineError
	validate := func() error {
		if _, err := in.Seek(0, io.SeekStart); err != nil {
			return err
		}
		var err error
		total, errs, err = st.planLines(j, in, m.opts.Checker)
		return err
	}
	if !planned {
		if err := validate(); err != nil {
			return err
		}
	}
	// A job resumed after a restart whose plan was not written (it was made before
	// plans were) validates again, to price its lines. A line
	// naming a model only other processes serve validates once this process's
	// registry sees one of them (a second after its start; longer if they are all
	// down): until then the job waits, answering cancel requests as it is.
	for warned := false; errs != nil && j.Status != Validating; {
		if !warned {
			m.opts.Logger.Warn("batch: the input file of a resumed job does not validate (yet): retrying", "job", j.ID, "error", errs[0].Message)
			warned = true
		}
		t := time.NewTimer(m.opts.Poll)
		select {
		case <-m.ctx.Done():
			t.Stop()
			return m.ctx.Err()
		case reply := <-ch.cancels:
			j.CancelRequested = true
			reply <- *j
		case <-t.C:
		}
		t.Stop()
		if err := validate(); err != nil {
			return fmt.Errorf("the input file: %w", err)
		}
	}
	if j.Status == Validating {
		now := m.opts.Now()
		if errs != nil {
			j.Status, j.FailedAt, j.Errors = Failed, now.Unix(), errs
			return st.saveJob(j)
		}
		j.Status, j.InProgressAt, j.Counts.Total = InProgress, now.Unix(), total
		if err := st.saveJob(j); err != nil {
			return err
		}
	}
	ctx := m.ctx
	// After a restart, the lines the queue still has in flight count as running
	// (their worst case reserved again).
	inflight := map[int]*Line{}
	var reserved money.Money
	if resumed {
		ids, err := m.q.InFlight(ctx, j.ID)
		if err != nil {
			return fmt.Errorf("lines in flight: %w", err)
		}
		for _, i := range ids {
			var l Line
			done, err := st.committed(j.ID, i)
			if err == nil && !done && i >= 0 && i < j.Counts.Total {
				l, err = st.plannedLine(j.ID, i)
			}
			if err != nil || done || i < 0 || i >= j.Counts.Total {
				m.settle(Outcome{Job: j.ID, Index: i})
				continue
			}
			inflight[i] = &l
			reserved += l.Worst
		}
	}
	// Lines that were running when an earlier run died (marked started, neither
	// committed nor in flight), looked up in the plan: started in CrashLimit runs that
	// died, the line is failed (CodeCrashed), not run again; in fewer, it is on
	// probation: it goes first in pending and runs alone (admit).
	suspects := map[int]bool{}
	var probation []*Line
	if resumed {
		idx, runs, err := st.crashes(j.ID)
		if err != nil {
			return err
		}
		var cerr error
		failedIdx, suspectIdx := quarantine(idx, runs, j.Counts.Total, m.opts.CrashLimit, func(i int) bool {
			if inflight[i] != nil || cerr != nil {
				return true
			}
			done, err := st.committed(j.ID, i)
			cerr = err
			return done
		})
		if cerr != nil {
			return cerr
		}
		var failed []Result
		for _, i := range failedIdx {
			l, err := st.plannedLine(j.ID, i)
			if err != nil {
				return err
			}
			failed = append(failed, Result{Index: i, CustomID: l.CustomID, Code: CodeCrashed, Message: crashedMessage})
		}
		if len(failed) > 0 {
			if err := st.commit(j, failed); err != nil {
				return err
			}
			for _, r := range failed {
				m.opts.Logger.Warn("batch: a line was running when the process died in CrashLimit runs: failed, not run again",
					"job", j.ID, "line", r.Index+1, "custom_id", r.CustomID, "code", CodeCrashed)
			}
		}
		for _, i := range suspectIdx {
			l, err := st.plannedLine(j.ID, i)
			if err != nil {
				return err
			}
			suspects[i] = true
			probation = append(probation, &l)
		}
		slices.SortFunc(probation, func(a, b *Line) int { // in run order
			if a.Group != b.Group {
				return a.Group - b.Group
			}
			return a.Index - b.Index
		})
	}
	// pending is the next lines to start, in run order, read from the plan a few at
	// a time (lines on probation first; lines refused for budget or load go back to
	// its front); every line neither committed nor in flight is in it or after the
	// plan's cursor.
	pending := probation
	var cursor []byte
	planEnd := false
	fill := func(n int) error {
		for len(pending) < n && !planEnd {
			ls, cur, end, err := st.nextPlanned(j.ID, cursor, n-len(pending), func(i int) bool {
				return inflight[i] != nil || slices.ContainsFunc(pending, func(l *Line) bool { return l.Index == i })
			})
			if err != nil {
				return err
			}
			cursor, planEnd = cur, end
			for k := range ls {
				pending = append(pending, &ls[k])
			}
		}
		return nil
	}
	var pausedUntil, retryAt time.Time
	var waiting []chan Job
	var leftover []Outcome // taken off ch.results while closing
	ran := map[int]*Line{} // the lines of leftover
	m.mu.Lock()
	m.running += len(inflight) // the lines still in flight after a restart (released below)
	m.mu.Unlock()
	defer func() { // on Close: take the outcomes of lines that ran, and commit them
		var open []int // the lines in flight: not committed below, their marks are taken back
		for i := range inflight {
			open = append(open, i)
		}
		defer func() {
			for _, i := range open {
				m.finished(j.ID, i)
			}
		}()
		take := func(o Outcome) {
			if l := inflight[o.Index]; l != nil && o.Resp.Refused == Ran && o.Resp.StatusCode != 499 {
				leftover = append(leftover, o)
				ran[o.Index] = l
			}
			delete(inflight, o.Index)
		}
		prev := leftover
		leftover = nil
		for _, o := range prev {
			take(o)
		}
	wait:
		for len(inflight) > 0 {
			select {
			case o := <-ch.results:
				take(o)
			case <-m.quiet: // the queue delivers nothing more: take what is there
				for {
					select {
					case o := <-ch.results:
						take(o)
					default:
						break wait
					}
				}
			}
		}
		var rs []Result
		done := map[int]bool{}
		for _, o := range leftover {
			rs = append(rs, m.result(j, ran[o.Index], o.Resp))
			done[o.Index] = true
		}
		if len(rs) > 0 {
			if err := st.commit(j, rs); err != nil {
				m.opts.Logger.Error("batch", "job", j.ID, "error", err)
				return
			}
			for _, o := range leftover {
				m.settle(o)
			}
		}
		var back []int
		for _, i := range open {
			if !done[i] {
				back = append(back, i)
			}
		}
		if err := st.unmarkStarted(j.ID, back, m.runID); err != nil {
			m.opts.Logger.Error("batch", "job", j.ID, "error", err)
		}
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := m.opts.Now()
		conc := m.concurrency(j.Tenant)
		if err := fill(conc); err != nil {
			return err
		}
		v := View{Status: j.Status, CancelRequested: j.CancelRequested, ExpiresAt: time.Unix(j.ExpiresAt, 0),
			Cap: j.Cap, Spent: j.Spent, Reserved: reserved, PendingCount: j.Counts.Total - j.Counts.Completed - j.Counts.Failed - len(inflight),
			Running: len(inflight), Concurrency: conc, PausedUntil: pausedUntil, RetryAt: retryAt}
		for i := 0; i < len(pending) && i < v.Concurrency; i++ {
			v.Pending = append(v.Pending, pending[i].Worst)
		}
		d := Decide(v, now)
		paused := d.Paused
		if d.Status != j.Status || paused != j.PausedReason {
			j.PausedReason = paused
			if d.Status == Cancelling && j.CancellingAt == 0 {
				j.CancellingAt = now.Unix()
			}
			if d.Status != Cancelling && d.Status != InProgress {
				if err := m.end(j, d, now); err != nil {
					return err
				}
				for _, w := range waiting {
					w <- *j
				}
				return m.finishEnded(j)
			}
			j.Status = d.Status
			if err := st.saveJob(j); err != nil {
				return err
			}
		}
		for _, w := range waiting {
			w <- *j
		}
		waiting = waiting[:0]
		// The lines to start: a line on probation only when no line runs, and alone.
		var starting []*Line
		for n := 0; n < d.Start && n < len(pending); n++ {
			l := pending[n]
			if !m.admit(j.ID, l.Index, suspects[l.Index]) {
				break
			}
			starting = append(starting, l)
			if suspects[l.Index] {
				break
			}
		}
		// Marked started before they run, so that a death while they run is counted.
		var idx []int
		for _, l := range starting {
			idx = append(idx, l.Index)
		}
		if len(idx) > 0 {
			if err := st.markStarted(j.ID, idx, m.runID); err != nil {
				for _, l := range starting {
					m.finished(j.ID, l.Index)
				}
				return err
			}
		}
		// unstart releases the lines of starting from k on, not submitted.
		unstart := func(k int) {
			for _, l := range starting[k:] {
				m.finished(j.ID, l.Index)
			}
			if err := st.unmarkStarted(j.ID, idx[k:], m.runID); err != nil {
				m.opts.Logger.Error("batch", "job", j.ID, "error", err)
			}
		}
		for k, l := range starting {
			body, err := l.Read(in)
			if err != nil {
				unstart(k)
				return err
			}
			req := Request{Tenant: j.Tenant, KeyID: j.KeyID, Endpoint: j.Endpoint, RequestID: fmt.Sprintf("%s-%d", j.ID, l.Index),
				Body: body, MaxCost: l.Worst, Retry: resumed}
			if err := m.q.Submit(ctx, Task{Job: j.ID, Index: l.Index, Req: req}); err != nil {
				unstart(k)
				if ctx.Err() != nil {
					return ctx.Err()
				}
				m.opts.Logger.Warn("batch: submit", "job", j.ID, "error", err)
				retryAt = now.Add(time.Second)
				break
			}
			pending = pending[1:]
			inflight[l.Index] = l
			reserved += l.Worst
		}
		wake := m.opts.Poll // decide again at least this often (a clock that jumps, a pause that ends)
		if !d.Wake.IsZero() {
			wake = min(wake, max(d.Wake.Sub(now), time.Millisecond))
		}
		timer.Reset(wake)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case reply := <-ch.cancels:
			if !j.CancelRequested {
				j.CancelRequested = true
			}
			waiting = append(waiting, reply)
		case o := <-ch.results:
			batch := []Outcome{o}
		more:
			for {
				select {
				case o := <-ch.results:
					batch = append(batch, o)
				default:
					break more
				}
			}
			if ctx.Err() != nil { // closing: the deferred function commits the lines that ran
				leftover = batch
				return ctx.Err()
			}
			var rs []Result
			var refused []*Line
			var settled []Outcome
			for _, o := range batch {
				l := inflight[o.Index]
				if l == nil { // a line run twice, or committed before a restart
					m.settle(o)
					continue
				}
				delete(inflight, o.Index)
				m.finished(j.ID, o.Index)
				reserved -= l.Worst
				settled = append(settled, o)
				switch o.Resp.Refused {
				case RefusedBudget, RefusedLoad:
					refused = append(refused, l)
					if o.Resp.Refused == RefusedBudget {
						pausedUntil = o.Resp.Until
					} else {
						retryAt = o.Resp.Until
					}
					continue
				}
				rs = append(rs, m.result(j, l, o.Resp))
			}
			if len(refused) > 0 { // back to the front of the queue, in their run order, unmarked (they did not run)
				pending = append(refused, pending...)
				var idx []int
				for _, l := range refused {
					idx = append(idx, l.Index)
				}
				if err := st.unmarkStarted(j.ID, idx, m.runID); err != nil {
					return err
				}
			}
			if len(rs) > 0 {
				if err := st.commit(j, rs); err != nil {
					return err
				}
			}
			for _, o := range settled {
				m.settle(o)
			}
		case <-timer.C:
		}
	}
}

// finishEnded writes the files of an ended job, then lets the queue forget it.
func (m *Manager) finishEnded(j *Job) error {
	if err := m.finish(j); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := m.q.Ended(ctx, j.ID); err != nil {
		m.opts.Logger.Warn("batch: queue", "job", j.ID, "error", err)
	}
	return nil
}

// end records a terminal decision: the unrun lines drained to the error file with the
// decision's code (read from the plan and committed a chunk at a time, the last
// chunk in the same transaction as the job's new target status).
func (m *Manager) end(j *Job, d Decision, now time.Time) error {
	var rs []Result
	if d.Drain != "" {
		msg := map[string]string{
			CodeMaxCost:   "the batch's max_cost_usd was reached before this request ran",
			CodeExpired:   "the batch expired before this request ran",
			CodeCancelled: "the batch was cancelled before this request ran",
		}[d.Drain]
		var cursor []byte
		for end := false; !end; {
			if len(rs) > 0 {
				if err := m.store.commit(j, rs); err != nil {
					return err
				}
				rs = rs[:0]
			}
			var ls []Line
			var err error
			if ls, cursor, end, err = m.store.nextPlanned(j.ID, cursor, planChunk, func(int) bool { return false }); err != nil {
				return err
			}
			for _, l := range ls {
				rs = append(rs, Result{Index: l.Index, CustomID: l.CustomID, Code: d.Drain, Message: msg})
			}
		}
	}
	switch d.Status {
	case Cancelled:
		if d.Drain == CodeMaxCost {
			j.Errors = []LineError{{Code: CodeMaxCost, Message: fmt.Sprintf("the batch stopped: its cap of %s was reached (spent %s)", j.Cap, j.Spent)}}
			j.CancellingAt = now.Unix()
		}
	case Finalizing, Completed:
		j.FinalizingAt = now.Unix()
		d.Status = Completed
	}
	j.Target = d.Status
	j.PausedReason = ""
	return m.store.commit(j, rs)
}

// finish writes the files of a job whose terminal status is decided and records it.
func (m *Manager) finish(j *Job) error {
	now := m.opts.Now()
	switch j.Target {
	case Completed:
		if j.FinalizingAt == 0 {
			j.FinalizingAt = now.Unix()
		}
		j.CompletedAt = now.Unix()
	case Cancelled:
		if j.CancellingAt == 0 {
			j.CancellingAt = now.Unix()
		}
		j.CancelledAt = now.Unix()
	case Expired:
		j.ExpiredAt = now.Unix()
	}
	j.Status, j.Target = j.Target, ""
	return m.store.writeFiles(j, now)
}

// result is a line's committed result: its cost never more than it reserved against
// the cap.
func (m *Manager) result(j *Job, l *Line, resp Response) Result {
	r := Result{Index: l.Index, CustomID: l.CustomID, StatusCode: resp.StatusCode,
		Body: resp.Body, Cost: min(resp.Cost, l.Worst),
		PromptTokens: resp.PromptTokens, CompletionTokens: resp.CompletionTokens, Code: resp.Code, Message: resp.Message}
	if resp.StatusCode != 0 {
		r.RequestID = fmt.Sprintf("%s-%d", j.ID, l.Index)
	}
	return r
}
