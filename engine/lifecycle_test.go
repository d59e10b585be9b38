package engine

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/lmlite/lmlite/engine/lease"
)

// TestLifecycleTrace runs the traces in testdata/lifecycle through decide: models,
// requests, loads ending and foreign leases are scripted at explicit times (seconds),
// and each decide's actions are printed and then applied to the script's state, as
// the janitor would. Rewrite after a deliberate change with:
// go test ./engine -run TestLifecycleTrace -rewrite
//
//	budget bytes=150
//	model id=a bytes=100 [priority=1] [idle=60|never]     unloaded, used at t=0
//	want id=a                  a request waits for a to load
//	request id=a / done id=a t=5 [keep_alive=10]   a request starts / ends (last used at t, its keep-alive)
//	unload id=a                the operator unloads a (Block.Unload)
//	loaded id=a t=3 / failed id=a  a's load ends
//	lease holder=x@other bytes=50 [priority=0] [idle] expires=30   another process's lease
//	budget device=gpu:0 bytes=100   the budget of another device
//	model id=g bytes=50 device=gpu:0   a model leasing on gpu:0
//	lease holder=x@other bytes=50 device=gpu:0 ...  (device: host by default)
//	decide t=61 [gc] [closing] [preempt] [ask=a,5,by] [hold]   preempt: the store can ask other
//	                          processes (lease.Redis); ask: another process asks a to unload for priority 5;
//	                          hold: print the actions but apply them only at the next apply
//	apply                      apply the held actions as the janitor does, each only if its
//	                          precondition still holds (a request may have begun since decide)
//	state
func TestLifecycleTrace(t *testing.T) {
	datadriven.Walk(t, "testdata/lifecycle", func(t *testing.T, path string) {
		const proc = "p"
		var (
			in     = lifeInput{Proc: proc, Budget: 1 << 40}
			leases []lease.Lease
			held   []action // decided with hold, not applied yet
		)
		model := func(d *datadriven.TestData, id string) *lifeModel {
			for i := range in.Models {
				if in.Models[i].ID == id {
					return &in.Models[i]
				}
			}
			d.Fatalf(t, "no model %q", id)
			return nil
		}
		dropLease := func(h string) {
			leases = slices.DeleteFunc(leases, func(l lease.Lease) bool { return l.Holder == h })
		}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			args := map[string]string{}
			for _, a := range d.CmdArgs {
				args[a.Key] = strings.Join(a.Vals, ",")
			}
			num := func(k string) int64 {
				v, ok := args[k]
				if !ok {
					return 0
				}
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					d.Fatalf(t, "%s=%q: %v", k, v, err)
				}
				return n
			}
			at := func() time.Time { return lifeBase.Add(time.Duration(num("t")) * time.Second) }
			_, flag := args["idle"]
			switch d.Cmd {
			case "budget":
				if dev, ok := args["device"]; ok {
					if in.Budgets == nil {
						in.Budgets = map[string]int64{}
					}
					in.Budgets[dev] = num("bytes")
					return fmt.Sprintf("budget %s %d", dev, in.Budgets[dev])
				}
				in.Budget = num("bytes")
				return fmt.Sprintf("budget %d", in.Budget)
			case "model":
				m := lifeModel{ID: args["id"], State: StateUnloaded, LastUsed: lifeBase, Bytes: num("bytes"),
					Priority: int(num("priority")), IdleTimeout: DefaultIdleTimeout, Device: args["device"]}
				switch args["idle"] {
				case "":
				case "never":
					m.IdleTimeout = -1
				default:
					m.IdleTimeout = time.Duration(num("idle")) * time.Second
				}
				in.Models = append(in.Models, m)
				return "ok"
			case "want":
				model(d, args["id"]).Wanted = true
				return "ok"
			case "unload": // the operator's Block.Unload
				m := model(d, args["id"])
				if m.idle() {
					m.State = StateUnloaded
					dropLease(holder(m.ID, proc))
				}
				return string(m.State)
			case "request":
				model(d, args["id"]).Active++
				return "ok"
			case "done":
				m := model(d, args["id"])
				m.Active--
				m.LastUsed = at()
				m.KeepAlive = time.Duration(num("keep_alive")) * time.Second
				return "ok"
			case "loaded", "failed":
				m := model(d, args["id"])
				if m.State != StateLoading {
					d.Fatalf(t, "%s is %s, not loading", m.ID, m.State)
				}
				m.State, m.LastUsed = StateReady, at()
				if d.Cmd == "failed" {
					m.State = StateFailed
					dropLease(holder(m.ID, proc))
				}
				return "ok"
			case "lease":
				leases = append(leases, lease.Lease{Device: cmp.Or(args["device"], lease.HostDevice), Holder: args["holder"], Bytes: num("bytes"),
					Priority: int(num("priority")), Idle: flag, TTL: time.Minute,
					Expires: lifeBase.Add(time.Duration(num("expires")) * time.Second)})
				return "ok"
			case "decide":
				in.Now = at()
				_, in.GC = args["gc"]
				_, in.Closing = args["closing"]
				_, in.Preempt = args["preempt"]
				in.Asked = nil
				if v, ok := args["ask"]; ok {
					f := strings.Split(v, ",")
					p, _ := strconv.Atoi(f[1])
					in.Asked = []asked{{ID: f[0], Priority: p, By: f[2]}}
				}
				for i, l := range leases { // our heartbeats
					if strings.HasSuffix(l.Holder, "@"+proc) {
						leases[i].Expires = in.Now.Add(leaseTTL)
					}
				}
				in.Leases = slices.Clone(leases)
				before := fmt.Sprint(in)
				acts := decide(in)
				if after := fmt.Sprint(in); after != before {
					d.Fatalf(t, "decide changed its input:\n%s\n---\n%s", before, after)
				}
				var b strings.Builder
				if _, hold := args["hold"]; hold {
					held = acts
					for _, a := range acts {
						fmt.Fprintln(&b, a)
					}
					if b.Len() == 0 {
						return "nothing"
					}
					return strings.TrimSuffix(b.String(), "\n")
				}
				for _, a := range acts {
					fmt.Fprintln(&b, a)
					var m *lifeModel
					if a.ID != "" {
						m = model(d, a.ID)
					}
					lifeApply(in.Now, a, m, func(id string) *lifeModel { return model(d, id) }, &leases, proc)
				}
				if b.Len() == 0 {
					return "nothing"
				}
				return strings.TrimSuffix(b.String(), "\n")
			case "apply":
				var b strings.Builder
				for _, a := range held {
					var m *lifeModel
					if a.ID != "" {
						m = model(d, a.ID)
					}
					if why := lifeStale(a, m, func(id string) *lifeModel { return model(d, id) }); why != "" {
						fmt.Fprintf(&b, "skip %s: %s\n", a, why)
						continue
					}
					fmt.Fprintln(&b, a)
					lifeApply(in.Now, a, m, func(id string) *lifeModel { return model(d, id) }, &leases, proc)
				}
				held = nil
				if b.Len() == 0 {
					return "nothing"
				}
				return strings.TrimSuffix(b.String(), "\n")
			case "state":
				var b strings.Builder
				for _, m := range in.Models {
					fmt.Fprintf(&b, "%s %s active=%d wanted=%v\n", m.ID, m.State, m.Active, m.Wanted)
				}
				for _, l := range leases {
					fmt.Fprintf(&b, "lease %s %d bytes priority %d idle=%v expires %ds\n", l.Holder, l.Bytes, l.Priority, l.Idle,
						int(l.Expires.Sub(lifeBase)/time.Second))
				}
				return strings.TrimSuffix(b.String(), "\n")
			}
			d.Fatalf(t, "unknown command %q", d.Cmd)
			return ""
		})
	})
}

var lifeBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// lifeStale is why an apply would skip action a decided before the script's last
// changes ("" when it does not): the preconditions janitor.go's apply checks. (The
// janitor applies in decide's turn, so none fails there; a load with a busy victim
// is skipped here, as the traces' hold/apply cases show.)
func lifeStale(a action, m *lifeModel, byID func(string) *lifeModel) string {
	switch a.Kind {
	case actUnload:
		if !m.idle() {
			return fmt.Sprintf("%s is %s with %d requests", m.ID, m.State, m.Active)
		}
	case actRefuse:
		if m.State != StateUnloaded || !m.Wanted {
			return m.ID + " is no longer waited for"
		}
	case actLoad:
		for _, id := range a.Victims {
			if v := byID(id); !v.idle() {
				return fmt.Sprintf("victim %s is %s with %d requests: decide again", id, v.State, v.Active)
			}
		}
		if m.State != StateUnloaded || !m.Wanted {
			return m.ID + " is no longer waited for"
		}
	}
	return ""
}

// lifeApply is the janitor's apply in the script's terms.
func lifeApply(now time.Time, a action, m *lifeModel, byID func(string) *lifeModel, leases *[]lease.Lease, proc string) {
	drop := func(h string) {
		*leases = slices.DeleteFunc(*leases, func(l lease.Lease) bool { return l.Holder == h })
	}
	switch a.Kind {
	case actExpire:
		*leases = slices.DeleteFunc(*leases, func(l lease.Lease) bool { return !now.Before(l.Expires) })
	case actReset:
		m.State = StateUnloaded
	case actUnload:
		m.State = StateUnloaded
		drop(holder(m.ID, proc))
	case actRefuse:
		m.Wanted = false
	case actLoad:
		for _, id := range a.Victims {
			byID(id).State = StateUnloaded
			drop(holder(id, proc))
		}
		for _, l := range a.Remote { // the other process gave them up
			drop(l.Holder)
		}
		m.State, m.Wanted = StateLoading, false
		*leases = append(*leases, lease.Lease{Device: cmp.Or(m.Device, lease.HostDevice), Holder: holder(m.ID, proc), Bytes: m.Bytes,
			Priority: m.Priority, TTL: leaseTTL, Expires: now.Add(leaseTTL)})
	}
}
