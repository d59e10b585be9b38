package respstore

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The trace test of ledger mode: every interleaving of a few Puts' steps (decide,
// ledger write, publish), the applier's commits and a Delete, each run step by step
// from one goroutine on a fresh store, with the store's state checked against a
// model after every step:
//
//   - the limit holds in every outcome: after the run (every Put resolved, bbolt
//     holding everything) the tenant's usage is within its limits, whichever Puts
//     were refused, failed or stored, in whatever order;
//   - Usage is exact after every step: the responses published (by their Put, or by
//     the applier that committed them first) and not deleted, no more, no less;
//   - Get finds exactly those;
//   - a Put whose ledger write failed leaves nothing.
//
// The steps are the code's own (decideLedger, AppendSide+SideWritten, resolve,
// applyQueued, Delete), so an interleaving here is one the goroutines can make:
// each step is one critical section of the store.

// traceStep is one step of one thread of a trace.
type traceStep struct {
	thread int
	kind   string // "decide", "write", "fail", "publish", "apply", "delete"
	name   string // the Put's (or the deleted response's) name
}

// traceCase is a scenario: a tenant with limits, responses stored before, Puts
// (each decide → write or fail → publish), applier commits and deletes.
type traceCase struct {
	name    string
	lim     Limits
	before  map[string]int // responses stored before (applied): name → pad
	puts    []tracePut
	applies int      // applier commits, anywhere
	deletes []string // responses deleted (once no Put is held), anywhere
}

type tracePut struct {
	name  string // the response's id (a name of before: a replacement)
	pad   int    // its size, by gcRec's pad
	fail  bool   // its ledger write fails
	quick bool   // written and published in one step (fewer interleavings)
}

// threads returns each thread's steps, in its own order.
func (c *traceCase) threads() [][]traceStep {
	var ts [][]traceStep
	for _, p := range c.puts {
		w := "write"
		if p.fail {
			w = "fail"
		}
		i := len(ts)
		if p.quick {
			ts = append(ts, []traceStep{{i, "decide", p.name}, {i, w + "+publish", p.name}})
			continue
		}
		ts = append(ts, []traceStep{{i, "decide", p.name}, {i, w, p.name}, {i, "publish", p.name}})
	}
	for range c.applies {
		ts = append(ts, []traceStep{{len(ts), "apply", ""}})
	}
	for _, d := range c.deletes {
		ts = append(ts, []traceStep{{len(ts), "delete", d}})
	}
	return ts
}

// interleavings calls fn with every interleaving of threads' steps.
func interleavings(threads [][]traceStep, fn func([]traceStep)) {
	at := make([]int, len(threads))
	total := 0
	for _, t := range threads {
		total += len(t)
	}
	var seq []traceStep
	var rec func()
	rec = func() {
		if len(seq) == total {
			fn(seq)
			return
		}
		for i, t := range threads {
			if at[i] == len(t) {
				continue
			}
			seq = append(seq, t[at[i]])
			at[i]++
			rec()
			at[i]--
			seq = seq[:len(seq)-1]
		}
	}
	rec()
}

var traceCases = []traceCase{
	{ // two new Puts for one place: exactly one stored, whatever the order
		name: "count limit, two Puts for the last place", lim: Limits{MaxCount: 2},
		before: map[string]int{"r0": 10}, puts: []tracePut{{name: "a", pad: 10}, {name: "b", pad: 10}}, applies: 1,
	},
	{ // a failed write leaves nothing, and holds no room
		name: "a failed write", lim: Limits{MaxCount: 2},
		before: map[string]int{"r0": 10}, puts: []tracePut{{name: "a", pad: 10, fail: true}, {name: "b", pad: 10}}, applies: 1,
	},
	{ // a Delete (once nothing is held) makes room, and a Put refused before it fits after
		name: "a delete", lim: Limits{MaxCount: 1},
		before: map[string]int{"r0": 10}, puts: []tracePut{{name: "a", pad: 10}}, applies: 1, deletes: []string{"r0"},
	},
	{ // a held shrink of r0 must not let b in: the shrink may fail
		name: "bytes limit, a held shrink that fails", lim: Limits{MaxBytes: 2*gcSize(100) + gcSize(10)},
		before: map[string]int{"r0": 100, "r1": 100}, puts: []tracePut{{name: "r0", pad: 10, fail: true}, {name: "b", pad: 100}}, applies: 1,
	},
	{ // a Put held while the applier commits its tenant's others still counts
		name: "three Puts for two places, commits between", lim: Limits{MaxCount: 3},
		before: map[string]int{"r0": 10}, puts: []tracePut{{name: "a", pad: 10, quick: true}, {name: "b", pad: 10}, {name: "c", pad: 10, quick: true}}, applies: 1,
	},
	{ // two Puts of one key: the second waits for the first (parked), counted once
		name: "two Puts of one key", lim: Limits{MaxCount: 2},
		before: map[string]int{"r0": 10}, puts: []tracePut{{name: "a", pad: 10}, {name: "a", pad: 50}}, applies: 1,
	},
}

// gcSize is the Record.Size of gcRec with pad.
func gcSize(pad int) int64 { r := gcRec("t1", "resp_xx", pad); return r.Size() }

func TestLedgerTraces(t *testing.T) {
	for _, c := range traceCases {
		t.Run(c.name, func(t *testing.T) {
			// One store for the case, each interleaving a tenant of its own.
			s, err := openBoltLedger(filepath.Join(t.TempDir(), "r.db"), Options{}, time.Hour, time.Hour) // the applier commits when a step says
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			s.db.NoSync = true // thousands of commits
			runs := 0
			interleavings(c.threads(), func(steps []traceStep) {
				runs++
				if err := runTrace(s, fmt.Sprintf("t%d", runs), &c, steps); err != nil {
					t.Fatalf("%s\n%v", traceString(steps), err)
				}
			})
			t.Logf("%d interleavings", runs)
		})
	}
}

func traceString(steps []traceStep) string {
	var b strings.Builder
	for i, s := range steps {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(s.kind)
		if s.name != "" {
			b.WriteString(" " + s.name)
		}
	}
	return b.String()
}

// runTrace runs one interleaving on s, for tenant (new), and checks it after every
// step; an interleaving no goroutines can make (a Delete while a Put is held, which
// waits) is skipped.
func runTrace(s *Bolt, tenant string, c *traceCase, steps []traceStep) error {
	ctx := context.Background()
	id := func(name string) string { return "resp_" + name }
	model := map[string]int64{} // what is stored, as the readers must see it: name → size
	for name, pad := range c.before {
		rec, err := s.o.prepare(gcRec(tenant, id(name), pad))
		if err != nil {
			return err
		}
		if err := s.db.Update(func(tx *boltTx) error {
			return applyTx(tx, &putOp{rec: rec, val: appendRecord(nil, &rec), size: rec.Size()})
		}); err != nil {
			return err
		}
		model[name] = rec.Size()
	}
	ops := make([]*putOp, len(c.puts))
	state := make([]string, len(c.puts)) // "", "held", "refused", "parked", "written", "failed", "visible" (published), "gone" (failed, resolved)
	defer func() {                       // a trace left early: end its Puts, so that Close does not wait for them
		for i, op := range ops {
			switch state[i] {
			case "held":
				op.AppendSide(nil)
				op.SideWritten(errors.New("ended"))
				s.resolve(op)
			case "written", "failed":
				s.resolve(op)
			}
		}
	}()
	byName := func(i int) string { return c.puts[i].name }
	makeVisible := func(i int) { model[byName(i)] = ops[i].size; state[i] = "visible" }
	check := func(after string) error {
		var want Usage
		for _, n := range model {
			want.Count++
			want.Bytes += n
		}
		u, err := s.Usage(ctx, tenant)
		if err != nil || u != want {
			return fmt.Errorf("after %s: usage %+v (%v), want %+v", after, u, err, want)
		}
		names := map[string]bool{}
		for n := range model {
			names[n] = true
		}
		for _, p := range c.puts {
			names[p.name] = true
		}
		for n := range names {
			_, err := s.Get(ctx, tenant, id(n), time.Now())
			if _, ok := model[n]; ok != (err == nil) {
				return fmt.Errorf("after %s: Get %s: %v, stored: %v", after, n, err, ok)
			}
		}
		return nil
	}
	// publishParked: a Put parked behind another of its key is decided once that one
	// resolved (the owner's unpark).
	unpark := func() error {
		for i := range ops {
			if state[i] == "parked" {
				if parked := s.decideLedger(ops[i]); parked {
					continue
				}
				state[i] = "held"
				if ops[i].err != nil {
					state[i] = "refused"
				}
			}
		}
		return nil
	}
	var expanded []traceStep
	for _, st := range steps {
		if w, ok := strings.CutSuffix(st.kind, "+publish"); ok {
			expanded = append(expanded, traceStep{st.thread, w, st.name}, traceStep{st.thread, "publish", st.name})
			continue
		}
		expanded = append(expanded, st)
	}
	steps = expanded
	for k, st := range steps {
		after := traceString(steps[:k+1])
		i := st.thread
		switch st.kind {
		case "decide":
			p := c.puts[i]
			rec, err := s.o.prepare(gcRec(tenant, id(p.name), p.pad))
			if err != nil {
				return err
			}
			ops[i] = &putOp{rec: rec, lim: c.lim, val: appendRecord(nil, &rec), size: rec.Size(), done: make(chan struct{}), st: s}
			switch parked := s.decideLedger(ops[i]); {
			case parked:
				state[i] = "parked"
			case ops[i].err != nil:
				var le *LimitError
				if !errors.As(ops[i].err, &le) {
					return fmt.Errorf("after %s: %v", after, ops[i].err)
				}
				state[i] = "refused"
			default:
				state[i] = "held"
			}
		case "write", "fail":
			if state[i] == "parked" {
				return nil // its Put waits in PutCarried: a later trace has it decided first
			}
			if state[i] != "held" {
				continue
			}
			ops[i].AppendSide(nil)
			if st.kind == "write" {
				ops[i].SideWritten(nil)
				state[i] = "written"
			} else {
				ops[i].SideWritten(errors.New("injected"))
				state[i] = "failed"
			}
		case "publish":
			if state[i] == "parked" {
				return nil
			}
			if state[i] != "written" && state[i] != "failed" && state[i] != "visible" {
				continue
			}
			err := s.resolve(ops[i])
			if (err == nil) != (state[i] != "failed") {
				return fmt.Errorf("after %s: resolve %s: %v", after, byName(i), err)
			}
			if state[i] == "written" {
				makeVisible(i)
			} else if state[i] == "failed" {
				state[i] = "gone"
			}
			if err := unpark(); err != nil {
				return err
			}
		case "apply":
			s.qmu.Lock()
			queued := append([]*putOp(nil), s.queue...)
			s.qmu.Unlock()
			if len(queued) == 0 {
				continue
			}
			if err := s.applyQueued(); err != nil {
				return err
			}
			for j, op := range ops {
				for _, q := range queued {
					if q == op && state[j] == "written" {
						makeVisible(j) // committed before its Put came back: readers see it
					}
				}
			}
			if err := unpark(); err != nil {
				return err
			}
		case "delete":
			s.mu.RLock()
			held := s.held
			s.mu.RUnlock()
			if held > 0 {
				return nil // Delete waits for the held Puts: not this order
			}
			if err := s.Delete(ctx, tenant, id(st.name), time.Now()); err != nil {
				return fmt.Errorf("after %s: %v", after, err)
			}
			delete(model, st.name)
		}
		if err := check(after); err != nil {
			return err
		}
	}
	// The end: everything resolved, bbolt holds it all; within the limits, exact.
	if err := s.drain(); err != nil {
		return err
	}
	if err := check("the end"); err != nil {
		return err
	}
	var bu Usage
	s.db.View(func(tx *boltTx) error { bu = getUsage(tx, tenant); return nil })
	if lim := c.lim; lim.MaxCount > 0 && bu.Count > lim.MaxCount || lim.MaxBytes > 0 && bu.Bytes > lim.MaxBytes {
		return fmt.Errorf("at the end: usage %+v passes the limits %+v", bu, lim)
	}
	return nil
}

type boltTx = bolt.Tx
