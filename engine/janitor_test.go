package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/lmlite/lmlite/engine/lease"
)

// TestJanitorProtocol runs the traces in testdata/janitor through the janitor's own
// message handlers (onBegin, onEnd, tick, the lease calls' reports, loaded, Unload,
// Close's step), in the order the script gives, with the test as the janitor
// goroutine: the lease store's calls (a real lease.Memory) run only when the script
// says io, and a load ends only when it says loaded or failed, so that every
// interleaving of messages with the work off the janitor can be written down.
// Rewrite after a deliberate change with:
// go test ./engine -run TestJanitorProtocol -rewrite
//
//	budget bytes=150
//	model id=a bytes=100 [priority=1] [idle=60|never] [max_queue=4]
//	begin id=a [n=1] [as=r1]    a request begins (n=0: Load); prints the grant
//	end id=a t=5 [keep_alive=10] [n=1]   a request ends at t
//	waiter as=r1               what the waiter of a grant sees now
//	tick t=10                  the janitor's second: a pass and the heartbeats
//	gc t=10                    GC's pass
//	io                         run the queued lease calls (and what they report)
//	loaded id=a t=3 / failed id=a   a's load ends
//	unload id=a                the operator's Unload
//	close                      Close: refuse begins, unload once idle
//	state                      the models and the store's leases
func TestJanitorProtocol(t *testing.T) {
	datadriven.Walk(t, "testdata/janitor", func(t *testing.T, path string) {
		clock := lifeBase
		b := newBlock(Config{Clock: func() time.Time { return clock }}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		b.proc = "p"
		store := &lease.Memory{}
		b.leases = store
		b.budgets = map[string]int64{lease.HostDevice: 1 << 40}
		type loadRun struct {
			la     *loadAttempt
			reload bool
		}
		loads := map[*instance]loadRun{}
		var events []string
		b.startLoad = func(in *instance, la *loadAttempt, reload bool) {
			loads[in] = loadRun{la, reload}
			events = append(events, fmt.Sprintf("load %s started (reload=%v)", in.cfg.ID, reload))
		}
		grants := map[string]grant{}
		closed := false
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			args := map[string]string{}
			for _, a := range d.CmdArgs {
				args[a.Key] = strings.Join(a.Vals, ",")
			}
			num := func(k string, def int64) int64 {
				v, ok := args[k]
				if !ok {
					return def
				}
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					d.Fatalf(t, "%s=%q: %v", k, v, err)
				}
				return n
			}
			if _, ok := args["t"]; ok {
				clock = lifeBase.Add(time.Duration(num("t", 0)) * time.Second)
			}
			model := func() *instance {
				in := b.models[args["id"]]
				if in == nil {
					d.Fatalf(t, "no model %q", args["id"])
				}
				return in
			}
			events = nil
			var out string
			switch d.Cmd {
			case "budget":
				b.budgets[lease.HostDevice] = num("bytes", 0)
				return "ok"
			case "model":
				mc := ModelConfig{ID: args["id"], Priority: int(num("priority", 0)), IdleTimeout: DefaultIdleTimeout,
					MaxQueue: int(num("max_queue", 4)), Replicas: 1}
				switch args["idle"] {
				case "":
				case "never":
					mc.IdleTimeout = -1
				default:
					mc.IdleTimeout = time.Duration(num("idle", 0)) * time.Second
				}
				in := &instance{b: b, cfg: mc, log: b.log, fileSize: num("bytes", 0), life: lifeState{state: StateUnloaded, lastUsed: clock}}
				b.models[mc.ID] = in
				b.order = append(b.order, mc.ID)
				return "ok"
			case "begin":
				g := b.onBegin(&beginReq{in: model(), n: int(num("n", 1))})
				if as := args["as"]; as != "" {
					grants[as] = g
				}
				out = grantString(g)
			case "waiter":
				out = grantString(grants[args["as"]])
			case "end":
				b.onEnd(endMsg{in: model(), n: int(num("n", 1)), now: clock, keep: time.Duration(num("keep_alive", 0)) * time.Second, setKeep: true})
				out = "ok"
			case "tick":
				b.tick()
				out = "ok"
			case "gc":
				b.wantPass(true, nil, nil)
				out = "ok"
			case "io":
				var ran []string
				for {
					calls := b.lio.take()
					if len(calls) == 0 {
						break
					}
					for _, c := range calls {
						ran = append(ran, c.name)
						if after := c.f(); after != nil {
							after()
						}
					}
				}
				out = strings.Join(ran, "\n")
				if out == "" {
					out = "nothing"
				}
			case "loaded", "failed":
				in := model()
				run, ok := loads[in]
				if !ok {
					d.Fatalf(t, "no load of %s running", in.cfg.ID)
				}
				delete(loads, in)
				var err error
				var h *replicaSet
				if d.Cmd == "failed" {
					err = fmt.Errorf("engine: model %s: bad file", in.cfg.ID)
				} else {
					h = &replicaSet{}
				}
				b.loaded(in, run.la, nil, h, time.Second, err)
				out = "ok"
			case "unload":
				if err := b.unloadReq(model()); err != nil {
					out = errKind(err) + ": " + err.Error()
				} else {
					out = string(model().life.state)
				}
			case "close":
				b.life.closing, b.life.closed = true, make(chan struct{})
				out = "closing"
			case "state":
				var sb strings.Builder
				for _, id := range b.order {
					l := &b.models[id].life
					fmt.Fprintf(&sb, "%s %s active=%d wanted=%v", id, l.state, l.active, l.attempt != nil)
					for _, f := range []struct {
						on   bool
						name string
					}{{l.leasing, "leasing"}, {l.loading, "loading"}, {l.asking, "asking"}, {l.lease.Holder != "", "holds its lease"}} {
						if f.on {
							sb.WriteString(" " + f.name)
						}
					}
					sb.WriteString("\n")
				}
				ls, _ := store.List(context.Background(), clock, lease.HostDevice)
				for _, l := range ls {
					fmt.Fprintf(&sb, "store: %s %d bytes idle=%v\n", l.Holder, l.Bytes, l.Idle)
				}
				return strings.TrimSuffix(sb.String(), "\n")
			default:
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			// The janitor's loop: Close's step after every message.
			if b.life.closing && !closed && b.closeStep() {
				closed = true
				events = append(events, "closed")
			}
			for _, e := range events {
				out += "\n" + e
			}
			return out
		})
	})
}

// grantString is a grant as the requester sees it: a refusal or a failed load with
// its error's kind (errKind) and text.
func grantString(g grant) string {
	switch {
	case g.err != nil:
		return "refused " + errKind(g.err) + ": " + g.err.Error()
	case g.h != nil:
		return "ready"
	}
	select {
	case <-g.la.done:
		if g.la.err != nil {
			return "wait: load failed " + errKind(g.la.err) + ": " + g.la.err.Error()
		}
		return "wait: loaded"
	default:
		return "wait: loading"
	}
}

// BenchmarkBeginEnd is a request's lifecycle messages on a ready model: a begin
// answered by the janitor goroutine (the grant with the replicas) and an end.
func BenchmarkBeginEnd(bm *testing.B) {
	b := newBlock(Config{Clock: time.Now}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	in := &instance{b: b, cfg: ModelConfig{ID: "m", MaxQueue: 1 << 30, IdleTimeout: -1}, log: b.log,
		life: lifeState{state: StateReady, reps: &replicaSet{}}}
	b.models["m"], b.order = in, []string{"m"}
	b.leaseDone.Add(1)
	go b.runLeaseIO()
	go b.runJanitor()
	defer b.Close()
	bm.ReportAllocs()
	for bm.Loop() {
		g := b.begin(in, 1, false)
		if g.h == nil {
			bm.Fatal(g)
		}
		b.end(endMsg{in: in, n: 1, now: b.now()})
	}
}

// errKind names the engine's error kind that err matches with errors.Is ("other"
// for none), so a trace shows the kind, not only the text.
func errKind(err error) string {
	for _, k := range []struct {
		err  error
		name string
	}{
		{ErrClosed, "ErrClosed"}, {ErrNoMemory, "ErrNoMemory"}, {ErrUnknownModel, "ErrUnknownModel"},
		{ErrQueueFull, "ErrQueueFull"}, {ErrRestarting, "ErrRestarting"}, {ErrConfig, "ErrConfig"},
		{ErrAdapterBusy, "ErrAdapterBusy"}, {ErrTooLong, "ErrTooLong"},
	} {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	return "other"
}
