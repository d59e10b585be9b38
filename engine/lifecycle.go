package engine

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lmlite/lmlite/engine/lease"
)

// This file is the Block's lifecycle as one pure function: decide looks at a snapshot
// of the models (their states, requests in flight, who waits for a load), the memory
// leases of the device and an explicit time, and returns what to do: which models to
// load, which to unload (idle past their timeout, victims to make room for a load of
// higher priority, or all of them at Close), which waiting loads to refuse (no memory,
// or the Block is closing), and what GC resets. The janitor (janitor.go) takes the
// snapshot, calls decide and applies the actions; nothing else decides. Traces of
// decide are in testdata/lifecycle (lifecycle_test.go).

// lifeModel is one model as decide sees it.
type lifeModel struct {
	ID          string
	State       ModelState
	Active      int  // requests submitted and not finished: the model is busy
	Wanted      bool // a request, Load or New waits for it to load
	LastUsed    time.Time
	IdleTimeout time.Duration // < 0: never unloaded for idleness
	KeepAlive   time.Duration // > 0: the last request's keep-alive, which replaces IdleTimeout
	Priority    int
	Bytes       int64  // what it leases: weights + its replicas' KV pools
	Device      string // where it leases them; "": host
}

// timeout is how long the model may stay idle before it is unloaded (< 0: forever):
// the last request's KeepAlive when it has one, else IdleTimeout. The caller bounds
// a request's KeepAlive (the gateway: docs on lmlite.keep_alive).
func (m *lifeModel) timeout() time.Duration {
	if m.KeepAlive > 0 {
		return m.KeepAlive
	}
	return m.IdleTimeout
}

// idle reports whether the model is loaded and serves nothing: it may be unloaded.
func (m *lifeModel) idle() bool { return m.State == StateReady && m.Active == 0 }

// lifeInput is the snapshot decide works on.
type lifeInput struct {
	Now     time.Time
	Models  []lifeModel      // in configuration order
	Leases  []lease.Lease    // the live leases of the models' devices, of every process
	Budgets map[string]int64 // bytes of each device; a device not in it has Budget
	Budget  int64
	TTL     time.Duration // of a lease; 0: leaseTTL
	Proc    string        // this process, in lease holders: model@proc
	// Preempt: the store can ask another process to unload an idle lease of lower
	// priority (lease.Redis): such leases, idle as their last heartbeat says, may be
	// victims too (action.Remote). Without it another process's lease is never one.
	Preempt bool
	// Asked are the preempt requests of other processes for our models: each model
	// is unloaded if it is idle and of lower priority than the request.
	Asked   []asked
	GC      bool // also collect: expire stale leases, reset failed models
	Closing bool // the Block is closing: unload everything idle, load nothing
}

// asked is another process's request that model ID give up its memory for a load of
// priority Priority (by holder By).
type asked struct {
	ID       string
	Priority int
	By       string
}

// actionKind is what an action does.
type actionKind int

const (
	actUnload actionKind = iota // unload model ID (it is idle)
	actLoad                     // lease Bytes for model ID and load it, after unloading Victims
	actRefuse                   // fail the load model ID's waiters wait for, with Err
	actReset                    // GC: a failed model becomes unloaded, so that the next request retries it
	actExpire                   // GC: drop the leases whose holders stopped beating (Holders)
)

// action is one decision.
type action struct {
	Kind    actionKind
	ID      string
	Reason  string        // why, for logs and traces
	Victims []string      // actLoad: models of this process to unload first (idle, lower priority)
	Remote  []lease.Lease // actLoad: leases of other processes to ask to unload first (Preempt)
	Holders []string      // actExpire: the stale leases
	Err     error         // actRefuse
}

func (a action) String() string {
	switch a.Kind {
	case actUnload:
		return fmt.Sprintf("unload %s: %s", a.ID, a.Reason)
	case actLoad:
		s := "load " + a.ID
		if len(a.Victims) > 0 {
			s += " after unloading " + strings.Join(a.Victims, " ")
		}
		if len(a.Remote) > 0 {
			var hs []string
			for _, l := range a.Remote {
				hs = append(hs, l.Holder)
			}
			s += " after asking " + strings.Join(hs, " ") + " to unload"
		}
		return s
	case actRefuse:
		return fmt.Sprintf("refuse %s: %v", a.ID, a.Err)
	case actReset:
		return "reset " + a.ID + ": failed → unloaded"
	case actExpire:
		if len(a.Holders) == 0 {
			return "expire stale leases"
		}
		return "expire stale leases " + strings.Join(a.Holders, " ")
	}
	return fmt.Sprintf("action(%d)", int(a.Kind))
}

// holder is the lease holder of model id in process proc.
func holder(id, proc string) string { return id + "@" + proc }

// decide is the lifecycle's decision at in.Now. It does not change in. The actions
// come in the order to apply them: GC's, then idle unloads, then loads (each after
// its victims' unloads) and refusals, most important model first.
func decide(in lifeInput) []action {
	var acts []action
	unloaded := map[string]bool{} // unloaded by this decision

	if in.GC {
		// The store drops what has expired at Now (it may know of leases a listing
		// leaves out); the holders seen expired here are for the trace.
		var stale []string
		for _, l := range in.Leases {
			if !in.Now.Before(l.Expires) {
				stale = append(stale, l.Holder)
			}
		}
		slices.Sort(stale)
		acts = append(acts, action{Kind: actExpire, Holders: stale})
		for _, m := range in.Models {
			if m.State == StateFailed {
				acts = append(acts, action{Kind: actReset, ID: m.ID})
			}
		}
	}

	askedBy := map[string]asked{}
	for _, a := range in.Asked {
		if o, ok := askedBy[a.ID]; !ok || a.Priority > o.Priority {
			askedBy[a.ID] = a
		}
	}
	for i := range in.Models {
		m := &in.Models[i]
		a, isAsked := askedBy[m.ID]
		switch {
		case !m.idle():
		case in.Closing:
			acts = append(acts, action{Kind: actUnload, ID: m.ID, Reason: "closing"})
			unloaded[m.ID] = true
		case m.timeout() > 0 && in.Now.Sub(m.LastUsed) >= m.timeout():
			why := fmt.Sprintf("idle for %v (timeout %v)", in.Now.Sub(m.LastUsed), m.timeout())
			if m.timeout() != m.IdleTimeout {
				why = fmt.Sprintf("idle for %v (keep_alive %v)", in.Now.Sub(m.LastUsed), m.timeout())
			}
			acts = append(acts, action{Kind: actUnload, ID: m.ID, Reason: why})
			unloaded[m.ID] = true
		case isAsked && m.Priority < a.Priority:
			acts = append(acts, action{Kind: actUnload, ID: m.ID, Reason: fmt.Sprintf("asked by %s (priority %d)", a.By, a.Priority)})
			unloaded[m.ID] = true
		}
	}

	// Loads, highest priority first (then in configuration order), each against the
	// leases as the loads and unloads decided before it leave them.
	var want []*lifeModel
	for i := range in.Models {
		m := &in.Models[i]
		if !m.Wanted || m.State != StateUnloaded {
			continue
		}
		if in.Closing {
			acts = append(acts, action{Kind: actRefuse, ID: m.ID, Err: ErrClosed})
			continue
		}
		want = append(want, m)
	}
	if len(want) == 0 {
		return acts
	}
	slices.SortStableFunc(want, func(a, b *lifeModel) int { return cmp.Compare(b.Priority, a.Priority) })
	ours := map[string]*lifeModel{}
	for i := range in.Models {
		ours[holder(in.Models[i].ID, in.Proc)] = &in.Models[i]
	}
	var view []lease.Lease
	for _, l := range in.Leases {
		if !in.Now.Before(l.Expires) {
			continue
		}
		if m := ours[l.Holder]; m != nil {
			if unloaded[m.ID] {
				continue
			}
			l.Idle = m.idle() // our own models' idleness is known now, not at the last heartbeat
		} else if !in.Preempt {
			l.Idle = false // another process's model is not ours to unload; it unloads on its own idle timeout
		}
		view = append(view, l)
	}
	ttl := cmp.Or(in.TTL, leaseTTL)
	for _, m := range want {
		dev := cmp.Or(m.Device, lease.HostDevice)
		budget, ok := in.Budgets[dev]
		if !ok {
			budget = in.Budget
		}
		l := lease.Lease{Device: dev, Holder: holder(m.ID, in.Proc), Bytes: m.Bytes, Priority: m.Priority,
			TTL: ttl, Expires: in.Now.Add(ttl)}
		victims, err := lease.Victims(in.Now, budget, view, l)
		if err != nil {
			acts = append(acts, action{Kind: actRefuse, ID: m.ID, Err: fmt.Errorf("%w: model %s: %w", ErrNoMemory, m.ID, err)})
			continue
		}
		a := action{Kind: actLoad, ID: m.ID}
		for _, v := range victims {
			if o := ours[v.Holder]; o != nil {
				a.Victims = append(a.Victims, o.ID)
			} else {
				a.Remote = append(a.Remote, v)
			}
			view = slices.DeleteFunc(view, func(o lease.Lease) bool { return o.Holder == v.Holder })
		}
		view = append(view, l)
		acts = append(acts, a)
	}
	return acts
}
