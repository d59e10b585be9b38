package batch

import (
	"context"
	"fmt"
	"log/slog"
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
}

// LineRunner runs one request body for a tenant at batch priority (the gateway
// implements it with the interactive path's admission and routing).
type LineRunner interface {
	RunLine(ctx context.Context, r Request) Response
}

// Options configure a Manager.
type Options struct {
	Concurrency int // lines of one job at once; 0: 4
	Now         func() time.Time
	Logger      *slog.Logger
	Checker     Checker
	Poll        time.Duration // the longest a job sleeps before deciding again; 0: 1s
	MaxRunning  int           // lines running at once over every job; 0: 4 × Concurrency
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

	slots chan struct{} // MaxRunning: a line holds one while it runs

	mu     sync.Mutex
	active map[string]chan chan Job // cancel requests to a job's driver
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
	ctx, cancel := context.WithCancel(context.Background())
	return &Manager{store: store, run: run, opts: opts, ctx: ctx, cancel: cancel, active: map[string]chan chan Job{},
		slots: make(chan struct{}, opts.MaxRunning)}
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
		m.spawn(js[i], true)
	}
	return nil
}

// Close stops every job's driver; running lines are cancelled and not committed (they
// run again after the next Start).
func (m *Manager) Close() {
	m.cancel()
	m.wg.Wait()
}

// Create makes a job of tenant over its input file and starts it (validating).
func (m *Manager) Create(tenant, keyID, inputFileID, endpoint, window string, meta map[string]string, cap money.Money) (Job, error) {
	if _, err := m.store.File(tenant, inputFileID); err != nil {
		return Job{}, err
	}
	now := m.opts.Now()
	j := Job{ID: newID("batch_", now), Tenant: tenant, KeyID: keyID, InputFileID: inputFileID, Endpoint: endpoint,
		CompletionWindow: window, Metadata: meta, Cap: cap, Status: Validating, CreatedAt: now.Unix(),
		ExpiresAt: now.Add(24 * time.Hour).Unix()}
	if err := m.store.saveJob(&j); err != nil {
		return Job{}, err
	}
	m.spawn(j, false)
	return j, nil
}

// Cancel asks tenant's job id to stop; it returns the job as it then is.
func (m *Manager) Cancel(tenant, id string) (Job, error) {
	j, err := m.store.Job(tenant, id)
	if err != nil {
		return j, err
	}
	m.mu.Lock()
	ch := m.active[id]
	m.mu.Unlock()
	if ch == nil {
		return j, nil
	}
	reply := make(chan Job, 1)
	select {
	case ch <- reply:
		return <-reply, nil
	case <-m.ctx.Done():
		return j, nil
	}
}

func (m *Manager) spawn(j Job, resumed bool) {
	ch := make(chan chan Job)
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
		}()
		if err := m.drive(&j, ch, resumed); err != nil && m.ctx.Err() == nil {
			m.opts.Logger.Error("batch", "job", j.ID, "error", err)
		}
	}()
}

// done is a finished line.
type done struct {
	line *Line
	resp Response
}

// drive owns one job until it ends: validation, then Decide and its application.
func (m *Manager) drive(j *Job, cancels chan chan Job, resumed bool) error {
	st := m.store
	if j.Target != "" { // crashed while writing the files of a terminal status
		return m.finish(j)
	}
	f, _, err := st.Open(j.Tenant, j.InputFileID)
	if err != nil {
		j.Status, j.FailedAt = Failed, m.opts.Now().Unix()
		j.Errors = []LineError{{Code: "invalid_input_file", Message: "the input file is gone: " + err.Error()}}
		return st.saveJob(j)
	}
	lines, errs := Validate(f, j.Tenant, j.Endpoint, m.opts.Checker)
	f.Close()
	if j.Status == Validating {
		now := m.opts.Now()
		if errs != nil {
			j.Status, j.FailedAt, j.Errors = Failed, now.Unix(), errs
			return st.saveJob(j)
		}
		j.Status, j.InProgressAt, j.Counts.Total = InProgress, now.Unix(), len(lines)
		if err := st.saveJob(j); err != nil {
			return err
		}
	} else if errs != nil {
		return fmt.Errorf("input file no longer validates: %v", errs[0].Message)
	}
	// The lines not yet committed, in order.
	committed := map[int]bool{}
	if err := st.results(j.ID, func(r Result) error { committed[r.Index] = true; return nil }); err != nil {
		return err
	}
	var pending []*Line
	for _, l := range RunOrder(lines) {
		if !committed[l.Index] {
			pending = append(pending, l)
		}
	}
	results := make(chan done, m.opts.Concurrency)
	running := 0
	var reserved money.Money
	var pausedUntil, retryAt time.Time
	var waiting []chan Job
	ctx := m.ctx
	defer func() { // on Close: let the running lines end, and commit those that ran
		var rs []Result
		for ; running > 0; running-- {
			r := <-results
			if r.resp.Refused == Ran && r.resp.StatusCode != 499 {
				rs = append(rs, m.result(j, r))
			}
		}
		if len(rs) > 0 {
			if err := st.commit(j, rs); err != nil {
				m.opts.Logger.Error("batch", "job", j.ID, "error", err)
			}
		}
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := m.opts.Now()
		v := View{Status: j.Status, CancelRequested: j.CancelRequested, ExpiresAt: time.Unix(j.ExpiresAt, 0),
			Cap: j.Cap, Spent: j.Spent, Reserved: reserved, PendingCount: len(pending), Running: running,
			Concurrency: m.opts.Concurrency, PausedUntil: pausedUntil, RetryAt: retryAt}
		for i := 0; i < len(pending) && i < m.opts.Concurrency; i++ {
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
				if err := m.end(j, d, pending, now); err != nil {
					return err
				}
				for _, w := range waiting {
					w <- *j
				}
				return m.finish(j)
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
		for range d.Start {
			l := pending[0]
			pending = pending[1:]
			running++
			reserved += l.Worst
			req := Request{Tenant: j.Tenant, KeyID: j.KeyID, Endpoint: j.Endpoint, RequestID: fmt.Sprintf("%s-%d", j.ID, l.Index),
				Body: l.Body, MaxCost: l.Worst, Retry: resumed}
			go func() {
				select {
				case m.slots <- struct{}{}:
				case <-ctx.Done():
					results <- done{line: l, resp: Response{StatusCode: 499}} // not run, not committed
					return
				}
				resp := m.run.RunLine(ctx, req)
				<-m.slots
				results <- done{line: l, resp: resp}
			}()
		}
		wake := m.opts.Poll // decide again at least this often (a clock that jumps, a pause that ends)
		if !d.Wake.IsZero() {
			wake = min(wake, max(d.Wake.Sub(now), time.Millisecond))
		}
		timer.Reset(wake)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case reply := <-cancels:
			if !j.CancelRequested {
				j.CancelRequested = true
			}
			waiting = append(waiting, reply)
		case r := <-results:
			batch := []done{r}
		more:
			for {
				select {
				case r := <-results:
					batch = append(batch, r)
				default:
					break more
				}
			}
			if ctx.Err() != nil { // closing: commit the lines that ran, not those cancelled
				var rs []Result
				for _, r := range batch {
					running--
					if r.resp.Refused == Ran && r.resp.StatusCode != 499 {
						rs = append(rs, m.result(j, r))
					}
				}
				if len(rs) > 0 {
					if err := st.commit(j, rs); err != nil {
						return err
					}
				}
				return ctx.Err()
			}
			var rs []Result
			var refused []*Line
			for _, r := range batch {
				running--
				reserved -= r.line.Worst
				switch r.resp.Refused {
				case RefusedBudget, RefusedLoad:
					refused = append(refused, r.line)
					if r.resp.Refused == RefusedBudget {
						pausedUntil = r.resp.Until
					} else {
						retryAt = r.resp.Until
					}
					continue
				}
				rs = append(rs, m.result(j, r))
			}
			if len(refused) > 0 { // back to the front of the queue, in their run order
				pending = append(refused, pending...)
			}
			if len(rs) > 0 {
				if err := st.commit(j, rs); err != nil {
					return err
				}
			}
		case <-timer.C:
		}
	}
}

// end records a terminal decision: the unrun lines drained to the error file with the
// decision's code (in the same transaction as the job's new target status).
func (m *Manager) end(j *Job, d Decision, pending []*Line, now time.Time) error {
	var rs []Result
	if d.Drain != "" {
		msg := map[string]string{
			CodeMaxCost:   "the batch's max_cost_usd was reached before this request ran",
			CodeExpired:   "the batch expired before this request ran",
			CodeCancelled: "the batch was cancelled before this request ran",
		}[d.Drain]
		for _, l := range pending {
			rs = append(rs, Result{Index: l.Index, CustomID: l.CustomID, Code: d.Drain, Message: msg})
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
func (m *Manager) result(j *Job, r done) Result {
	return Result{Index: r.line.Index, CustomID: r.line.CustomID, StatusCode: r.resp.StatusCode,
		RequestID: fmt.Sprintf("%s-%d", j.ID, r.line.Index), Body: r.resp.Body, Cost: min(r.resp.Cost, r.line.Worst),
		PromptTokens: r.resp.PromptTokens, CompletionTokens: r.resp.CompletionTokens}
}
