package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/engine/lease"
	"github.com/lmlite/lmlite/engine/model"
)

// The janitor is the one goroutine that owns each model's lifecycle (lifeState:
// state, load attempt, lease, requests in flight, last use, keep-alive, replicas).
// Everything else sends it messages and waits for its answer where it needs one:
//
//   - a request's begin (Generate, Embed, LoadAdapter; Load is a begin that counts
//     no request) gets a grant back: the replicas of a ready model, or the load
//     attempt to wait for, or an error (closed, queue full);
//   - a request's end gives the model back (its last use and keep-alive);
//   - a load, a preemption and the lease store's answers report back as calls run
//     on the janitor (leaseIO);
//   - Unload, GC, Close, the store's preempt requests and the status readers
//     (Models, Ready) are calls too.
//
// Each second, when a model is wanted, and when a load ends, the janitor asks the
// lease store for the devices' leases (off its goroutine), then calls decide
// (lifecycle.go) with them and the state it owns, and applies the actions at once:
// no message comes between decide and apply. The janitor never waits for I/O:
// loads, preemptions and the lease store's calls run off it (a Redis outage does not
// hold a request's begin), and the store's calls run one at a time in the order the
// janitor asked them (a release before the next acquire of the same holder).

// lifeState is one model's lifecycle. Only the janitor goroutine reads and writes
// it (after the janitor stops, anyone may read it).
type lifeState struct {
	state    ModelState
	err      error        // StateFailed: why
	attempt  *loadAttempt // StateLoading: the load in progress; StateUnloaded: the load someone waits for (the model is wanted)
	lease    lease.Lease  // held (or being acquired: leasing) while loading and loaded
	active   int          // requests begun and not ended
	lastUsed time.Time
	keep     time.Duration // the KeepAlive of the last request that ended (0: none)
	reps     *replicaSet   // StateReady: the loaded model
	file     *gguf.File
	loads    uint64
	unloads  uint64
	loadTime time.Duration // of the last load
	leasing  bool          // StateLoading: its lease is being acquired
	loading  bool          // StateLoading: the load runs off the janitor
	asking   bool          // StateUnloaded: other processes are asked to unload for it (preempt)
}

// replicaSet is a loaded model as a request sees it: the grant's handle. It stays
// loaded while the request is in flight (a model with requests is never unloaded).
type replicaSet struct {
	model *model.Model
	reps  []*runner
	rr    atomic.Uint64 // round-robin cursor (pick)
}

// janitorState is the janitor's own state beside the models'.
type janitorState struct {
	closing bool          // Close was called: begins are refused, the models unload once idle
	closed  chan struct{} // closing: closed when everything is unloaded
	listing bool          // a listing of the leases is in flight: the pass waits for it
	pending bool          // a pass is wanted after the one in flight
	gc      bool          // the next pass also collects
	asks    []asked       // the next pass's preempt requests
	afters  []func()      // run after the next pass
}

// grant is the janitor's answer to a begin.
type grant struct {
	h   *replicaSet  // the model is ready: run on it
	la  *loadAttempt // else: wait for this load (la.h once it is done)
	err error        // refused
}

// beginReq is a begin message: n requests (0: Load, which counts none) of model in.
type beginReq struct {
	in      *instance
	n       int
	noLimit bool // not held to max_queue (LoadAdapter)
	reply   chan grant
}

var beginPool = sync.Pool{New: func() any { return &beginReq{reply: make(chan grant, 1)} }}

// endMsg is an end message: n requests of model in ended at now.
type endMsg struct {
	in      *instance
	n       int
	now     time.Time
	keep    time.Duration
	setKeep bool // a Generate's end: keep is its KeepAlive
}

// begin sends a begin to the janitor and returns its grant.
func (b *Block) begin(in *instance, n int, noLimit bool) grant {
	r := beginPool.Get().(*beginReq)
	r.in, r.n, r.noLimit = in, n, noLimit
	var g grant
	select {
	case b.begins <- r:
		g = <-r.reply
	case <-b.done:
		g = grant{err: ErrClosed}
	}
	r.in = nil
	beginPool.Put(r)
	return g
}

// end sends an end to the janitor. Close waits for every request's end, so the
// janitor is there to take it.
func (b *Block) end(m endMsg) {
	select {
	case b.ends <- m:
	case <-b.done:
	}
}

// call runs f on the janitor and waits for it; after the janitor stopped, f runs
// here (the lifecycle no longer changes).
func (b *Block) call(f func()) {
	done := make(chan struct{})
	select {
	case b.calls <- func() { f(); close(done) }:
		<-done
	case <-b.done:
		f()
	}
}

// report runs f on the janitor without waiting (a load's or a lease call's end).
func (b *Block) report(f func()) {
	select {
	case b.calls <- f:
	case <-b.done:
	}
}

func (b *Block) runJanitor() {
	defer close(b.done)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			b.tick()
		case <-b.kick:
			b.wantPass(false, nil, nil)
		case r := <-b.begins:
			r.reply <- b.onBegin(r)
		case m := <-b.ends:
			b.onEnd(m)
		case f := <-b.calls:
			f()
		}
		if b.life.closing && b.closeStep() {
			return
		}
	}
}

// tick is the janitor's second: a pass and the leases' heartbeats.
func (b *Block) tick() {
	b.wantPass(false, nil, nil)
	b.heartbeat(b.now())
}

// onBegin is a begin: a ready model's replicas, or the load to wait for (the model
// becomes wanted), or a refusal. The requests count as in flight from here, waiting
// or not, until their end.
func (b *Block) onBegin(r *beginReq) grant {
	in, l := r.in, &r.in.life
	if r.n > 0 || l.state != StateReady {
		if b.life.closing {
			return grant{err: ErrClosed}
		}
	}
	if !r.noLimit && r.n > 0 && l.active+r.n > in.cfg.MaxQueue {
		return grant{err: fmt.Errorf("%w: model %s has %d requests in flight (max_queue %d)", ErrQueueFull, in.cfg.ID, l.active, in.cfg.MaxQueue)}
	}
	l.active += r.n
	switch l.state {
	case StateReady:
		return grant{h: l.reps}
	case StateFailed:
		la := newLoadAttempt()
		la.finish(nil, l.err)
		return grant{la: la}
	}
	if l.attempt == nil {
		l.attempt = newLoadAttempt() // wanted: the next pass loads it or refuses
		b.wantPass(false, nil, nil)
	}
	return grant{la: l.attempt}
}

// onEnd is an end: the requests are no longer in flight.
func (b *Block) onEnd(m endMsg) {
	l := &m.in.life
	l.active -= m.n
	l.lastUsed = m.now
	if m.setKeep {
		l.keep = m.keep
	}
}

// wantPass asks for a pass: the janitor lists the leases (off its goroutine) and
// decides when they come back. Passes asked for while a listing is in flight are
// one pass after it (with every gc, ask and after asked for).
func (b *Block) wantPass(gc bool, ask *asked, after func()) {
	j := &b.life
	j.gc = j.gc || gc
	if ask != nil {
		j.asks = append(j.asks, *ask)
	}
	if after != nil {
		j.afters = append(j.afters, after)
	}
	if j.listing {
		j.pending = true
		return
	}
	j.listing, j.pending = true, false
	gc, asks, afters := j.gc, j.asks, j.afters
	j.gc, j.asks, j.afters = false, nil, nil
	var devices []string
	for _, id := range b.order {
		if d := b.models[id].device(); !slices.Contains(devices, d) {
			devices = append(devices, d)
		}
	}
	now := b.now()
	b.lio.do("list", func() func() {
		var leases []lease.Lease
		for _, d := range devices {
			ls, err := b.leases.List(context.Background(), now, d)
			if err != nil {
				// decide sees none of them then; the store's Acquire still checks the budget.
				b.log.Warn("listing memory leases", "device", d, "err", err)
			}
			leases = append(leases, ls...)
		}
		return func() {
			j.listing = false
			b.pass(leases, gc, asks)
			for _, f := range afters {
				f()
			}
			if j.pending {
				b.wantPass(false, nil, nil)
			}
		}
	})
}

// pass decides once, with the leases listed, and applies the decisions.
func (b *Block) pass(leases []lease.Lease, gc bool, asks []asked) {
	now := b.now()
	b.apply(now, decide(b.snapshot(now, leases, gc, false, asks)))
	b.sweepAdapters(now)
}

// closeStep is Close's work on each turn of the janitor: once no request is in
// flight, unload every model, refuse the loads waited for, and wait for the loads,
// preemptions and lease calls in progress to end. It reports whether it is done.
func (b *Block) closeStep() bool {
	for _, id := range b.order {
		if b.models[id].life.active > 0 {
			return false
		}
	}
	now := b.now()
	b.apply(now, decide(b.snapshot(now, nil, false, true, nil)))
	for _, id := range b.order {
		l := &b.models[id].life
		if l.leasing || l.loading || l.asking {
			return false
		}
	}
	if b.life.listing {
		return false
	}
	close(b.life.closed)
	return true
}

// unloadReq is the operator's Unload: the model unloads now if no request is using it.
func (b *Block) unloadReq(in *instance) error {
	if in.life.active > 0 {
		return fmt.Errorf("engine: model %s has %d requests in flight", in.cfg.ID, in.life.active)
	}
	b.unload(in, "unload asked")
	return nil
}

// loaded applies a load's end.
func (b *Block) loaded(in *instance, la *loadAttempt, f *gguf.File, h *replicaSet, took time.Duration, err error) {
	l := &in.life
	l.loading, l.loadTime, l.attempt = false, took, nil
	if err != nil {
		b.release(in)
		l.state, l.err = StateFailed, err
		in.log.Error("model failed to load", "err", err)
		la.finish(nil, err)
		b.wantPass(false, nil, nil) // the memory is free
		return
	}
	l.file, l.reps = f, h
	l.loads++
	l.state, l.lastUsed = StateReady, b.now()
	in.log.Info("model ready", "load_ms", took.Milliseconds(), "replicas", in.cfg.Replicas)
	la.finish(h, nil)
	b.wantPass(false, nil, nil) // another model may wait for memory
}

// snapshot is decide's input at now: the state the janitor owns, and the leases of
// other processes as listed. Our own leases are the janitor's: the listing may be
// older than a release or an acquire it asked for.
func (b *Block) snapshot(now time.Time, listed []lease.Lease, gc, closing bool, asks []asked) lifeInput {
	in := lifeInput{Now: now, Budgets: b.budgets, TTL: b.ttl, Proc: b.proc, GC: gc, Closing: closing, Asked: asks}
	_, in.Preempt = b.leases.(preempter)
	ours := map[string]bool{}
	for _, id := range b.order {
		m := b.models[id]
		l := &m.life
		in.Models = append(in.Models, lifeModel{ID: id, State: l.state, Active: l.active,
			Wanted: l.state == StateUnloaded && l.attempt != nil && !l.asking, LastUsed: l.lastUsed,
			IdleTimeout: m.cfg.IdleTimeout, KeepAlive: l.keep, Priority: m.cfg.Priority, Bytes: m.leaseBytes(), Device: m.device()})
		ours[holder(id, b.proc)] = true
		if l.lease.Holder != "" {
			ol := l.lease
			ol.Expires = now.Add(b.ttlOr())
			in.Leases = append(in.Leases, ol)
		}
	}
	for _, l := range listed {
		if !ours[l.Holder] {
			in.Leases = append(in.Leases, l)
		}
	}
	return in
}

func (b *Block) ttlOr() time.Duration {
	if b.ttl > 0 {
		return b.ttl
	}
	return leaseTTL
}

// apply carries out the actions in order. The state they were decided on is the
// janitor's, unchanged since decide; the checks below are the actions' preconditions.
func (b *Block) apply(now time.Time, acts []action) {
	for _, a := range acts {
		in := b.models[a.ID]
		switch a.Kind {
		case actExpire:
			b.lio.do("expire", func() func() {
				if expired, err := b.leases.Expire(context.Background(), now); err != nil {
					b.log.Warn("expiring memory leases", "err", err)
				} else if len(expired) > 0 {
					b.log.Info("expired stale memory leases", "count", len(expired))
				}
				return nil
			})
		case actReset:
			if in.life.state == StateFailed {
				in.life.state, in.life.err = StateUnloaded, nil
			}
		case actUnload:
			b.unload(in, a.Reason)
		case actRefuse:
			if l := &in.life; l.state == StateUnloaded && l.attempt != nil {
				in.log.Warn("model not loaded", "err", a.Err)
				l.attempt.finish(nil, a.Err)
				l.attempt = nil
			}
		case actLoad:
			for _, id := range a.Victims {
				b.unload(b.models[id], "room for "+a.ID)
			}
			if len(a.Remote) > 0 {
				b.preempt(in, a.Remote)
				continue
			}
			b.start(in, now)
		}
	}
}

// preempt asks the other processes holding remote to unload them (through the
// store's preempt channel), off the janitor (the wait is up to the store's
// PreemptWait); its end comes back as a report, and the next decide starts the load
// (or the report refuses it). While it runs the model is asking and not wanted in
// snapshots, so that no second preemption starts.
func (b *Block) preempt(in *instance, remote []lease.Lease) {
	l := &in.life
	la := l.attempt
	if l.state != StateUnloaded || la == nil || l.asking {
		return
	}
	l.asking = true
	p := b.leases.(preempter)
	want := lease.Lease{Device: in.device(), Holder: holder(in.cfg.ID, b.proc), Bytes: in.leaseBytes(), Priority: in.cfg.Priority, TTL: b.ttl}
	// Local victims are decide's (action.Victims): a local one here is a lease of
	// this process that decide did not know as a model of ours.
	unload := p.Unload(want, func(v lease.Lease) error { return fmt.Errorf("engine: %s is not a model of this Block", v.Holder) })
	go func() {
		var err error
		for _, v := range remote {
			in.log.Info("asking another process to unload", "holder", v.Holder, "bytes", v.Bytes, "priority", v.Priority)
			if err = unload(v); err != nil {
				break
			}
		}
		b.report(func() {
			l.asking = false
			if err != nil && l.attempt == la && l.state == StateUnloaded {
				err := fmt.Errorf("%w: model %s: %w", ErrNoMemory, in.cfg.ID, err)
				in.log.Warn("model not loaded", "err", err)
				la.finish(nil, err)
				l.attempt = nil
			}
			b.wantPass(false, nil, nil) // the memory is free: the next decide loads the model
		})
	}()
}

// loadAttempt is one load: done is closed when it ends, with the loaded model (h)
// or the error.
type loadAttempt struct {
	done chan struct{}
	h    *replicaSet
	err  error
}

func newLoadAttempt() *loadAttempt { return &loadAttempt{done: make(chan struct{})} }

func (la *loadAttempt) finish(h *replicaSet, err error) {
	la.h, la.err = h, err
	close(la.done)
}

// start leases the model's memory (off the janitor) and then loads it (off the
// janitor too); both report back. A lease the store refuses (another process took
// the memory) ends the attempt with ErrNoMemory.
func (b *Block) start(in *instance, now time.Time) {
	l := &in.life
	la := l.attempt
	if l.state != StateUnloaded || la == nil {
		return
	}
	reload := l.loads > 0
	want := lease.Lease{Device: in.device(), Holder: holder(in.cfg.ID, b.proc), Bytes: in.leaseBytes(),
		Priority: in.cfg.Priority, TTL: b.ttl}
	budget := b.budgets[want.Device]
	l.state, l.err, l.lease, l.leasing = StateLoading, nil, want, true
	b.lio.do("acquire "+want.Holder, func() func() {
		got, err := b.leases.Acquire(context.Background(), now, want, budget)
		return func() {
			l.leasing = false
			if err != nil {
				if errors.Is(err, lease.ErrNoMemory) {
					err = fmt.Errorf("%w: model %s: %w", ErrNoMemory, in.cfg.ID, err)
				} else {
					err = fmt.Errorf("engine: model %s: %w", in.cfg.ID, err)
				}
				in.log.Warn("model not loaded", "err", err)
				l.state, l.lease, l.attempt = StateUnloaded, lease.Lease{}, nil
				la.finish(nil, err)
				return
			}
			l.lease, l.loading = got, true
			b.startLoad(in, la, reload)
		}
	})
}

// load maps the file, builds the replicas and, on the first load only, warms each up
// with a forward pass (the model is ready only after that). A reload is for a request
// that waits: that request is the warm-up, a pass before it would only delay it. Its
// lease is held already. It changes no state: the janitor applies its report (loaded).
func (in *instance) load(la *loadAttempt, reload bool) {
	start := time.Now() // a load's duration: real time (Config.Clock is the lifecycle's)
	f, m, reps, err := in.open(!reload)
	took := time.Since(start)
	var h *replicaSet
	if err == nil {
		h = &replicaSet{model: m, reps: reps}
	}
	in.b.report(func() { in.b.loaded(in, la, f, h, took, err) })
}

// heartbeat renews the leases of the loading and loaded models, telling the store
// which are idle (off the janitor). A lease the store no longer holds (it expired:
// Redis unreachable for longer than its TTL, or restarted without persistence) is
// acquired again; if the memory has been taken meanwhile, the model is unloaded when
// it is idle (until then each beat tries again).
func (b *Block) heartbeat(now time.Time) {
	type beat struct {
		in   *instance
		l    lease.Lease
		idle bool
	}
	var beats []beat
	for _, id := range b.order {
		in := b.models[id]
		if l := &in.life; l.lease.Holder != "" && !l.leasing {
			beats = append(beats, beat{in, l.lease, l.active == 0 && l.state == StateReady})
		}
	}
	if len(beats) == 0 {
		return
	}
	b.lio.do("heartbeat", func() func() {
		type lost struct {
			beat
			nl  lease.Lease
			err error
		}
		var losts []lost
		for _, bt := range beats {
			err := b.leases.Heartbeat(context.Background(), now, bt.l.Device, bt.l.Holder, bt.idle)
			if err == nil {
				continue
			}
			if !errors.Is(err, lease.ErrNotHeld) {
				bt.in.log.Warn("memory lease heartbeat", "err", err)
				continue
			}
			l := bt.l
			l.Idle = bt.idle
			nl, aerr := b.leases.Acquire(context.Background(), now, l, b.budgets[l.Device])
			losts = append(losts, lost{bt, nl, aerr})
		}
		if len(losts) == 0 {
			return nil
		}
		return func() {
			for _, x := range losts {
				in, l := x.in, &x.in.life
				switch {
				case l.lease.Holder != x.l.Holder: // unloaded meanwhile (its release runs after this acquire)
				case x.err == nil:
					l.lease = x.nl
					in.log.Warn("memory lease was lost; acquired again", "device", x.l.Device)
				case l.state == StateReady && l.active == 0:
					in.log.Warn("memory lease was lost and the memory is taken: unloading", "err", x.err)
					b.unload(in, "memory lease lost")
				default:
					in.log.Warn("memory lease was lost and the memory is taken: unloading once idle", "err", x.err)
				}
			}
		}
	})
}

// release gives the model's lease back (off the janitor).
func (b *Block) release(in *instance) {
	l := in.life.lease
	in.life.lease = lease.Lease{}
	if l.Holder == "" {
		return
	}
	b.lio.do("release "+l.Holder, func() func() {
		if err := b.leases.Release(context.Background(), l.Device, l.Holder); err != nil && !errors.Is(err, lease.ErrNotHeld) {
			in.log.Warn("releasing the memory lease", "err", err)
		}
		return nil
	})
}

// unload stops the replicas and releases the mapping, the KV memory and the lease,
// if the model is ready and no request is in flight.
func (b *Block) unload(in *instance, reason string) {
	l := &in.life
	if l.state != StateReady || l.active > 0 {
		return
	}
	in.log.Info("unloading", "reason", reason)
	for _, r := range l.reps.reps {
		r.close()
	}
	l.reps = nil
	in.mu.Lock()
	in.unloadAdaptersLocked()
	in.mu.Unlock()
	if l.file != nil {
		l.file.Close()
		l.file = nil
	}
	b.release(in)
	l.state = StateUnloaded
	l.unloads++
	in.log.Info("model unloaded")
}

// leaseIO runs the lease store's calls off the janitor, one at a time in the order
// asked. A call returns what to run on the janitor with its result (or nil).
type leaseIO struct {
	mu   sync.Mutex // guards q
	q    []ioCall
	wake chan struct{} // cap 1
}

// ioCall is one queued call; its name is for traces.
type ioCall struct {
	name string
	f    func() func()
}

// do queues a call; it never blocks (the janitor must not).
func (q *leaseIO) do(name string, f func() func()) {
	q.mu.Lock()
	q.q = append(q.q, ioCall{name, f})
	q.mu.Unlock()
	signal(q.wake)
}

// take removes the queued calls.
func (q *leaseIO) take() []ioCall {
	q.mu.Lock()
	defer q.mu.Unlock()
	fs := q.q
	q.q = nil
	return fs
}

// empty reports whether no call is queued.
func (q *leaseIO) empty() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.q) == 0
}

// runLeaseIO is the lease calls' goroutine; it ends when the janitor has stopped
// and the calls are done.
func (b *Block) runLeaseIO() {
	defer b.leaseDone.Done()
	for {
		fs := b.lio.take()
		for _, f := range fs {
			if after := f.f(); after != nil {
				b.report(after)
			}
		}
		if len(fs) > 0 {
			continue
		}
		select {
		case <-b.lio.wake:
		case <-b.done:
			if b.lio.empty() {
				return
			}
		}
	}
}

// preempter is a lease store that can ask other processes to unload an idle lease and
// hears their requests (lease.Redis).
type preempter interface {
	Unload(by lease.Lease, local func(lease.Lease) error) func(lease.Lease) error
	Listen(handle func(lease.PreemptRequest) error) (stop func(), err error)
}

// onPreempt is the handler of the store's preempt requests (Listen): the janitor
// decides (the model is unloaded if it is idle and of lower priority than the
// request); nil when the model's lease is given up, an error to refuse.
func (b *Block) onPreempt(req lease.PreemptRequest) error {
	id, ok := strings.CutSuffix(req.Holder, "@"+b.proc)
	in := b.models[id]
	if !ok || in == nil {
		return fmt.Errorf("engine: %s is not held here", req.Holder)
	}
	var err error
	done := make(chan struct{})
	b.report(func() {
		b.wantPass(false, &asked{ID: id, Priority: req.Priority, By: req.By}, func() {
			if l := in.life.lease; l.Holder == req.Holder && l.Device == req.Device {
				err = fmt.Errorf("engine: model %s is busy or of priority %d ≥ %d: not unloaded", id, in.cfg.Priority, req.Priority)
			}
			close(done)
		})
	})
	select {
	case <-done:
	case <-b.done:
	}
	return err
}

// GC unloads idle models past their timeout, drops expired memory leases (of holders
// that stopped beating: a crashed process), and resets failed models to unloaded so
// that the next request retries them: one pass of the janitor, waited for.
func (b *Block) GC() { b.passWait(true) }

// passWait runs a pass and waits for it (and for the lease calls it asked).
func (b *Block) passWait(gc bool) {
	done := make(chan struct{})
	b.report(func() {
		b.wantPass(gc, nil, func() {
			// The pass's own lease calls (expire, release) are queued now: one more
			// call through leaseIO comes after them.
			b.lio.do("pass done", func() func() { return func() { close(done) } })
		})
	})
	select {
	case <-done:
	case <-b.done:
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
func (in *instance) open(warmUp bool) (*gguf.File, *model.Model, []*runner, error) {
	t0 := time.Now()
	var tMap, tModel, tKV, tWarm time.Duration
	defer func() {
		in.log.Debug("load phases", "map_ms", ms(tMap), "model_ms", ms(tModel), "kv_ms", ms(tKV), "warm_up_ms", ms(tWarm), "total_ms", ms(time.Since(t0)))
	}()
	// The header was parsed by New (the tokenizer and the template came from it);
	// a load maps the file again without parsing it, unless the file has changed.
	f, err := in.hdr.Remap(in.cfg.Path)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("engine: model %s: %w", in.cfg.ID, err)
	}
	tMap = time.Since(t0)
	m, err := model.Load(f)
	if err != nil {
		f.Close()
		return nil, nil, nil, fmt.Errorf("engine: model %s: %w", in.cfg.ID, err)
	}
	tModel = time.Since(t0) - tMap
	warm := max(in.tok.BOS(), 0)
	var reps []*runner
	fail := func(err error) (*gguf.File, *model.Model, []*runner, error) {
		for _, r := range reps {
			r.pool.Close()
		}
		f.Close()
		return nil, nil, nil, fmt.Errorf("engine: model %s: %w", in.cfg.ID, err)
	}
	for i := range in.cfg.Replicas {
		t := time.Now()
		r, err := newRunner(i, in.cfg.ID, m, in.tok, in.rc, &in.stats)
		tKV += time.Since(t)
		if err != nil {
			return fail(err)
		}
		reps = append(reps, r)
		if !warmUp {
			continue
		}
		t = time.Now()
		err = r.warmUp(warm)
		tWarm += time.Since(t)
		if err != nil {
			return fail(fmt.Errorf("warm-up: %w", err))
		}
	}
	for _, r := range reps {
		go r.loop()
	}
	return f, m, reps, nil
}
