package engine

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/lmlite/lmlite/engine/grammar"
)

// This file keeps grammar work out of the batch's step. A constrained sequence's
// mask for its next token is a function of its grammar state alone, known once its
// last token is accepted. A mask the vocabulary's cache holds is taken at once (a map
// lookup); any other is computed by a goroutine of the sequence's own, started right
// after the token's acceptance (or at intake, for the first), while the batch goes
// on: until it is ready the runner holds the sequence (sched.State.Hold), so the
// step runs the other sequences without waiting for it, and the sequence joins the
// first step after its mask is ready. Its tokens are the same bits either way: a mask
// is the same whoever computes it and when, and which step computes a token never
// changes its value.
//
// Each request has a grammar budget: the steps of one token's mask and of the whole
// request (grammar.MaskWithin's count, the same on every machine), past which the
// request ends with ErrGrammarBudget. The work is counted in its Usage (GrammarTime,
// GrammarSteps).

// Defaults of ModelConfig's grammar budget. A step costs about 35 ns here (quiet): a
// mask of 2^20 steps ~40 ms, a request of 2^25 ~1.2 s. Over Llama 2's 32,000-token
// vocabulary the widest state of one alternative, a string's body (every token
// allowed), is ~57,000 steps (~2 ms), so an object of 64 optional properties stays far
// below the mask budget; 32 anyOf alternatives still alive inside a string take ~1.8
// million, past it (TestGrammarBudgetStopsPathologicalSchema). A vocabulary of
// 128,000 tokens takes about four times as many steps for the same state.
const (
	DefaultGrammarMaskSteps    = 1 << 20
	DefaultGrammarRequestSteps = 1 << 25
)

// maskWorkers bounds the masks a replica computes at once, so that grammar work takes
// at most half of the processors from the forward passes.
var maskWorkers = max(1, runtime.GOMAXPROCS(0)/2)

// grammarLimit is a budget's value in effect: 0 takes def, a negative value none (0).
func grammarLimit(v, def int64) int64 {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// jobMask is a constrained job's mask state, owned by the runner's loop.
type jobMask struct {
	bits  []uint64  // the mask of the matcher's current state, when ready
	n     int       // its tokens
	ready bool      // bits is the current state's mask
	work  *maskWork // a computation in flight (the matcher is its until done)

	maskLimit, requestLimit int64 // steps, 0: none
}

// maskWork is one mask computed off the loop. The goroutine sets the result fields and
// then closes done.
type maskWork struct {
	done chan struct{}
	quit chan struct{} // closed by the runner when the job ends
	stop atomic.Bool   // set with quit: the walk stops soon

	limit int64 // the budget it ran with
	bits  []uint64
	n     int
	steps int64
	dur   time.Duration
	err   error
}

// maskReady reports whether job j's mask for its next token is ready, taking it from
// the cache or from a finished computation; if neither, it starts the computation. An
// error ends the job (its grammar budget is spent).
func (r *runner) maskReady(j *job) (bool, error) {
	g := &j.mask
	if g.ready {
		return true, nil
	}
	if w := g.work; w != nil {
		select {
		case <-w.done:
		default:
			return false, nil
		}
		return true, j.takeMask(w)
	}
	if bits, n, ok := j.gm.CachedMask(); ok {
		g.bits, g.n, g.ready = bits, n, true
		return true, nil
	}
	limit, err := j.maskBudget()
	if err != nil {
		return false, err
	}
	w := &maskWork{done: make(chan struct{}), quit: make(chan struct{}), limit: limit}
	g.work = w
	go w.run(j.gm, r.maskSlots, r.wake)
	return false, nil
}

// run computes the matcher's mask once a worker slot is free, then wakes the loop.
func (w *maskWork) run(gm *grammar.Matcher, slots chan struct{}, wake chan struct{}) {
	select {
	case slots <- struct{}{}:
	case <-w.quit:
		w.err = grammar.ErrStopped
		close(w.done)
		return
	}
	t0 := time.Now()
	w.bits, w.n, w.steps, w.err = gm.MaskWithin(w.limit, &w.stop)
	w.dur = time.Since(t0)
	<-slots
	close(w.done)
	signal(wake) // after done: the loop, woken, finds the mask ready
}

// maskBudget is the steps the next mask may take: the per-mask limit, or what is left
// of the request's budget if less (0: no limit).
func (j *job) maskBudget() (int64, error) {
	g := &j.mask
	limit := g.maskLimit
	if g.requestLimit > 0 {
		left := g.requestLimit - j.u.GrammarSteps
		if left <= 0 {
			return 0, fmt.Errorf("%w: the request's %d steps are spent", ErrGrammarBudget, g.requestLimit)
		}
		if limit == 0 || left < limit {
			limit = left
		}
	}
	return limit, nil
}

// takeMask takes a finished computation's result and counts its work.
func (j *job) takeMask(w *maskWork) error {
	g := &j.mask
	g.work = nil
	j.u.GrammarTime += w.dur
	j.u.GrammarSteps += w.steps
	if errors.Is(w.err, grammar.ErrBudget) {
		if g.requestLimit > 0 && j.u.GrammarSteps > g.requestLimit {
			return fmt.Errorf("%w: the request's %d steps are spent", ErrGrammarBudget, g.requestLimit)
		}
		return fmt.Errorf("%w: one token's mask takes more than %d steps", ErrGrammarBudget, w.limit)
	}
	if w.err != nil {
		return fmt.Errorf("engine: grammar: %w", w.err)
	}
	g.bits, g.n, g.ready = w.bits, w.n, true
	return nil
}

// waitMask makes the mask ready on the loop's goroutine: it waits for a computation
// in flight, or computes the mask here. The loop holds a sequence until its mask is
// ready, so this runs only if that failed; it keeps the matcher to one goroutine.
func (j *job) waitMask() error {
	g := &j.mask
	if g.work == nil {
		limit, err := j.maskBudget()
		if err != nil {
			return err
		}
		w := &maskWork{done: make(chan struct{}), limit: limit}
		t0 := time.Now()
		w.bits, w.n, w.steps, w.err = j.gm.MaskWithin(limit, nil)
		w.dur = time.Since(t0)
		close(w.done)
		g.work = w
	}
	<-g.work.done
	return j.takeMask(g.work)
}

// nextMask is called after job j accepted a token and goes on: its mask is stale, and
// the next one is taken from the cache or started now.
func (r *runner) nextMask(j *job) error {
	j.mask.ready, j.mask.bits = false, nil
	_, err := r.maskReady(j)
	return err
}

// masks holds the constrained sequences whose next mask is not ready (and releases
// those whose mask is), before the step is planned; a sequence whose grammar budget
// is spent ends with its error.
func (r *runner) masks() {
	for id, j := range r.gjobs {
		ready, err := r.maskReady(j)
		if err != nil {
			r.st.Remove(id)
			r.end(id, j, "", err)
			continue
		}
		r.st.Hold(id, !ready)
	}
}

// stopMask stops job j's computation in flight, if any (the job ended).
func (j *job) stopMask() {
	if w := j.mask.work; w != nil && w.quit != nil {
		w.stop.Store(true)
		close(w.quit)
		j.mask.work = nil
	}
}
