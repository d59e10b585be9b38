package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/engine/lease"
	"github.com/lmlite/lmlite/engine/model"
)

// The janitor is the goroutine that applies the lifecycle's decisions (lifecycle.go):
// each second, when a model is wanted (kick), when a load or a preemption reports
// its end (ended), and when GC, Close or a test asks (reqs), it takes a snapshot of
// the models and the leases, calls decide, and applies the actions. It owns the
// lifecycle: no other goroutine loads or unloads a model (the operator's Unload is
// a request to it too), refuses a load, or changes a model's state. A load and a preemption run off the janitor (they take seconds) and
// report back on ended; what is in progress is the janitor's own (janitorState),
// behind no lock. An action's precondition is checked again when it is applied (a
// request may have made a victim busy since the snapshot); if it fails, the janitor
// decides again.

// janitorState is what only the janitor goroutine reads and writes.
type janitorState struct {
	loading map[*instance]bool // loads in progress (off the janitor), until their lifeEnd
	asking  map[*instance]bool // loads waiting for other processes to unload (preempt), until their lifeEnd
}

// lifeEnd is the report of a load or a preemption that ran off the janitor.
type lifeEnd struct {
	in *instance
	la *loadAttempt
	// A load's end: the loaded model (err nil) and how long the load took.
	load bool
	f    *gguf.File
	m    *model.Model
	reps []*runner
	took time.Duration
	// err: the load failed, or the preemption did not free the memory.
	err error
}

// report sends a load's or a preemption's end to the janitor. The janitor takes it
// until it stops, and it stops only once nothing is in progress (closeModels).
// (Only a New that fails after the janitor started may stop it with one in flight.)
func (b *Block) report(e lifeEnd) {
	select {
	case b.ended <- e:
	case <-b.stop:
	}
}

// passReq asks the janitor for one pass; done is closed after it.
type passReq struct {
	gc, closing bool
	ask         *asked    // another process asks a model of ours to unload (Redis preemption)
	unload      *instance // the operator unloads it (Block.Unload), instead of a pass
	err         *error    // unload's result
	done        chan struct{}
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
	b.request(passReq{ask: &asked{ID: id, Priority: req.Priority, By: req.By}})
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.lease.Holder == req.Holder && in.lease.Device == req.Device {
		return fmt.Errorf("engine: model %s is busy or of priority %d ≥ %d: not unloaded", id, in.cfg.Priority, req.Priority)
	}
	return nil
}

// request runs a pass on the janitor and waits for it; after Close it does nothing.
func (b *Block) request(r passReq) {
	r.done = make(chan struct{})
	select {
	case b.reqs <- r:
		<-r.done
	case <-b.stop:
	}
}

func (b *Block) runJanitor() {
	defer b.janitor.Done()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-tick.C:
			b.pass(false, nil)
			b.heartbeat(b.now())
		case <-b.kick:
			b.pass(false, nil)
		case e := <-b.ended:
			b.end(e)
			b.pass(false, nil) // the memory is free now, or a model is ready
		case r := <-b.reqs:
			switch {
			case r.closing:
				b.closeModels()
			case r.unload != nil:
				*r.err = b.unloadNow(r.unload)
			default:
				b.pass(r.gc, r.ask)
			}
			close(r.done)
		}
	}
}

// pass decides once and applies the decisions. A load whose victim a request made
// busy since the snapshot is not applied; the janitor decides again on its next
// turn (kick), with that request in its snapshot.
func (b *Block) pass(gc bool, ask *asked) {
	now := b.now()
	in := b.snapshot(now, gc, false)
	if ask != nil {
		in.Asked = []asked{*ask}
	}
	if b.apply(now, decide(in)) {
		signal(b.kick)
	}
	b.sweepAdapters(now)
}

// unloadNow is the operator's Unload: the model unloads now if no request is using it.
func (b *Block) unloadNow(in *instance) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.active > 0 {
		return fmt.Errorf("engine: model %s has %d requests in flight", in.cfg.ID, in.active)
	}
	in.unloadLocked()
	return nil
}

// closeModels is Close's pass: refuse the loads waited for, unload every model, and
// wait for the loads and preemptions in progress to end (then unload or refuse
// those too).
func (b *Block) closeModels() {
	for {
		now := b.now()
		b.apply(now, decide(b.snapshot(now, false, true)))
		if len(b.life.loading) == 0 && len(b.life.asking) == 0 {
			return
		}
		b.end(<-b.ended)
	}
}

// end applies the report of a load or a preemption.
func (b *Block) end(e lifeEnd) {
	in, la := e.in, e.la
	if !e.load {
		delete(b.life.asking, in)
		if e.err == nil {
			return // the memory is free: the next decide loads the model
		}
		in.mu.Lock()
		if in.attempt == la && in.state == StateUnloaded {
			err := fmt.Errorf("%w: model %s: %w", ErrNoMemory, in.cfg.ID, e.err)
			in.log.Warn("model not loaded", "err", err)
			la.finish(err)
			in.attempt = nil
		}
		in.mu.Unlock()
		return
	}
	delete(b.life.loading, in)
	in.mu.Lock()
	in.loadTime = e.took
	in.attempt = nil
	if e.err != nil {
		if err := b.leases.Release(context.Background(), in.lease.Device, in.lease.Holder); err != nil && !errors.Is(err, lease.ErrNotHeld) {
			in.log.Warn("releasing the memory lease", "err", err)
		}
		in.lease = lease.Lease{}
		in.state, in.err = StateFailed, e.err
		in.log.Error("model failed to load", "err", e.err)
	} else {
		in.file, in.model, in.replicas = e.f, e.m, e.reps
		in.loads++
		in.state, in.lastUsed = StateReady, b.now()
		in.log.Info("model ready", "load_ms", in.loadTime.Milliseconds(), "replicas", in.cfg.Replicas)
	}
	in.mu.Unlock()
	la.finish(e.err)
}

// snapshot is decide's input at now.
func (b *Block) snapshot(now time.Time, gc, closing bool) lifeInput {
	in := lifeInput{Now: now, Budgets: b.budgets, TTL: b.ttl, Proc: b.proc, GC: gc, Closing: closing}
	_, in.Preempt = b.leases.(preempter)
	var devices []string
	for _, id := range b.order {
		m := b.models[id]
		m.mu.Lock()
		in.Models = append(in.Models, lifeModel{ID: id, State: m.state, Active: m.active,
			Wanted: m.state == StateUnloaded && m.attempt != nil && !b.life.asking[m], LastUsed: m.lastUsed,
			IdleTimeout: m.cfg.IdleTimeout, KeepAlive: m.keep, Priority: m.cfg.Priority, Bytes: m.leaseBytes(), Device: m.device()})
		m.mu.Unlock()
		if !slices.Contains(devices, m.device()) {
			devices = append(devices, m.device())
		}
	}
	for _, d := range devices {
		leases, err := b.leases.List(context.Background(), now, d)
		if err != nil {
			// decide sees no leases then; the store's Acquire still checks the budget.
			b.log.Warn("listing memory leases", "device", d, "err", err)
		}
		in.Leases = append(in.Leases, leases...)
	}
	return in
}

// apply carries out the actions in order. It reports whether a precondition failed,
// so that the janitor decides again.
func (b *Block) apply(now time.Time, acts []action) (again bool) {
	for _, a := range acts {
		in := b.models[a.ID]
		switch a.Kind {
		case actExpire:
			if expired, err := b.leases.Expire(context.Background(), now); err != nil {
				b.log.Warn("expiring memory leases", "err", err)
			} else if len(expired) > 0 {
				b.log.Info("expired stale memory leases", "count", len(expired))
			}
		case actReset:
			in.mu.Lock()
			if in.state == StateFailed {
				in.state, in.err = StateUnloaded, nil
			}
			in.mu.Unlock()
		case actUnload:
			in.mu.Lock()
			if in.state == StateReady && in.active == 0 {
				in.log.Info("unloading", "reason", a.Reason)
				in.unloadLocked()
			}
			in.mu.Unlock()
		case actRefuse:
			in.mu.Lock()
			if in.state == StateUnloaded && in.attempt != nil {
				in.log.Warn("model not loaded", "err", a.Err)
				in.attempt.finish(a.Err)
				in.attempt = nil
			}
			in.mu.Unlock()
		case actLoad:
			ok := true
			for _, id := range a.Victims {
				v := b.models[id]
				v.mu.Lock()
				if v.state == StateReady && v.active == 0 {
					v.log.Info("unloading", "reason", "room for "+a.ID)
					v.unloadLocked()
				} else {
					ok = false
				}
				v.mu.Unlock()
			}
			if !ok {
				again = true
				continue
			}
			if len(a.Remote) > 0 {
				b.preempt(in, a.Remote)
				continue
			}
			b.start(in, now)
		}
	}
	return again
}

// preempt asks the other processes holding remote to unload them (through the
// store's preempt channel), off the janitor (the wait is up to the store's
// PreemptWait); its end comes back on ended, and the next decide starts the load
// (or end refuses it). While it runs the model is in life.asking and not wanted in
// snapshots, so that no second preemption starts.
func (b *Block) preempt(in *instance, remote []lease.Lease) {
	p := b.leases.(preempter)
	in.mu.Lock()
	la := in.attempt
	if in.state != StateUnloaded || la == nil || b.life.asking[in] {
		in.mu.Unlock()
		return
	}
	in.mu.Unlock()
	b.life.asking[in] = true
	want := lease.Lease{Device: in.device(), Holder: holder(in.cfg.ID, in.b.proc), Bytes: in.leaseBytes(), Priority: in.cfg.Priority, TTL: in.b.ttl}
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
		b.report(lifeEnd{in: in, la: la, err: err})
	}()
}

// loadAttempt is one load: done is closed when it ends, with err set if it failed.
type loadAttempt struct {
	done chan struct{}
	err  error
}

func newLoadAttempt() *loadAttempt { return &loadAttempt{done: make(chan struct{})} }

func (la *loadAttempt) finish(err error) {
	la.err = err
	close(la.done)
}

// start leases the model's memory and starts loading it off the janitor, if it is
// still wanted; the load's end comes back on ended. A lease the store refuses
// (another process took the memory) ends the attempt with ErrNoMemory.
func (b *Block) start(in *instance, now time.Time) {
	in.mu.Lock()
	la := in.attempt
	reload := in.loads > 0
	if in.state != StateUnloaded || la == nil {
		in.mu.Unlock()
		return
	}
	in.mu.Unlock()
	want := lease.Lease{Device: in.device(), Holder: holder(in.cfg.ID, in.b.proc), Bytes: in.leaseBytes(),
		Priority: in.cfg.Priority, TTL: in.b.ttl}
	l, err := in.b.leases.Acquire(context.Background(), now, want, in.b.budgets[want.Device])
	in.mu.Lock()
	defer in.mu.Unlock()
	if err != nil {
		if errors.Is(err, lease.ErrNoMemory) {
			err = fmt.Errorf("%w: model %s: %w", ErrNoMemory, in.cfg.ID, err)
		} else {
			err = fmt.Errorf("engine: model %s: %w", in.cfg.ID, err)
		}
		in.log.Warn("model not loaded", "err", err)
		la.finish(err)
		in.attempt = nil
		return
	}
	in.state, in.err, in.lease = StateLoading, nil, l
	b.life.loading[in] = true
	go in.load(la, reload)
}

// load maps the file, builds the replicas and, on the first load only, warms each up
// with a forward pass (the model is ready only after that). A reload is for a request
// that waits: that request is the warm-up, a pass before it would only delay it. Its
// lease is held already. It changes no state: the janitor applies its report (end).
func (in *instance) load(la *loadAttempt, reload bool) {
	start := time.Now()
	f, m, reps, err := in.open(!reload)
	in.b.report(lifeEnd{in: in, la: la, load: true, f: f, m: m, reps: reps, took: time.Since(start), err: err})
}

// heartbeat renews the leases of the loading and loaded models, telling the store
// which are idle. A lease the store no longer holds (it expired: Redis unreachable
// for longer than its TTL, or restarted without persistence) is acquired again; if
// the memory has been taken meanwhile, the model is unloaded when it is idle (until
// then each beat tries again).
func (b *Block) heartbeat(now time.Time) {
	for _, id := range b.order {
		in := b.models[id]
		in.mu.Lock()
		l, idle := in.lease, in.active == 0 && in.state == StateReady
		in.mu.Unlock()
		if l.Holder == "" {
			continue
		}
		err := b.leases.Heartbeat(context.Background(), now, l.Device, l.Holder, idle)
		if err == nil {
			continue
		}
		if !errors.Is(err, lease.ErrNotHeld) {
			in.log.Warn("memory lease heartbeat", "err", err)
			continue
		}
		l.Idle = idle
		nl, aerr := b.leases.Acquire(context.Background(), now, l, b.budgets[l.Device])
		in.mu.Lock()
		switch {
		case in.lease.Holder != l.Holder: // unloaded meanwhile
		case aerr == nil:
			in.lease = nl
			in.log.Warn("memory lease was lost; acquired again", "device", l.Device)
		case in.state == StateReady && in.active == 0:
			in.log.Warn("memory lease was lost and the memory is taken: unloading", "err", aerr)
			in.unloadLocked()
		default:
			in.log.Warn("memory lease was lost and the memory is taken: unloading once idle", "err", aerr)
		}
		in.mu.Unlock()
	}
}

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

// unloadLocked stops the replicas and releases the mapping and the KV memory. No
// request may be in flight.
func (in *instance) unloadLocked() {
	if in.state != StateReady || in.active > 0 {
		return
	}
	for _, r := range in.replicas {
		r.close()
	}
	in.model, in.replicas = nil, nil
	in.unloadAdaptersLocked()
	if in.file != nil {
		in.file.Close()
		in.file = nil
	}
	if err := in.b.leases.Release(context.Background(), in.lease.Device, in.lease.Holder); err != nil && !errors.Is(err, lease.ErrNotHeld) {
		in.log.Warn("releasing the memory lease", "err", err)
	}
	in.lease = lease.Lease{}
	in.state = StateUnloaded
	in.unloads++
	in.log.Info("model unloaded")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
