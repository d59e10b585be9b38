package sched

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// The trace tests in testdata/ script arrivals, cancellations and steps at explicit
// times (milliseconds) and hold the expected decisions. Rewrite them after a deliberate
// change with: go test ./engine/sched -run TestTrace -rewrite
//
//	init max-len=256 concurrency=2 timeout=10 step-tokens=64 block-size=16 blocks=32 [batch-chunk=16 [batch-chunk-for=ms]]
//	enqueue t=0 id=1 tenant=A prompt=40 max=4 [weight=2] [class=batch] [chunk=8]
//	plan t=0        the decision, State unchanged
//	step t=0        the decision, applied
//	run t=0 n=10    ten steps at t=0, 1, 2, ... applied
//	cache id=1 tokens=32   the prefix cache holds 32 tokens of 1 (for Plans from now on)
//	evicts id=1 drops=2 to=16   taking 1's prefix (a warm replay) evicts 2's blocks past 16 tokens
//	remove id=1
//	state
func TestTrace(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var s *State
		var cache map[ID]int
		type eviction struct {
			victim ID
			to     int
		}
		evicts := map[ID]eviction{}
		cached := func(id ID) int {
			n := cache[id]
			if e, ok := evicts[id]; ok {
				cache[e.victim] = min(cache[e.victim], e.to) // the Block took id's prefix: the victim's blocks are gone
			}
			return n
		}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			args := map[string]string{}
			for _, a := range d.CmdArgs {
				if len(a.Vals) > 0 {
					args[a.Key] = a.Vals[0]
				} else {
					args[a.Key] = ""
				}
			}
			num := func(k string) int {
				v, ok := args[k]
				if !ok {
					return 0
				}
				n, err := strconv.Atoi(v)
				if err != nil {
					d.Fatalf(t, "%s=%q: %v", k, v, err)
				}
				return n
			}
			at := func() time.Time { return base.Add(time.Duration(num("t")) * time.Millisecond) }
			if d.Cmd != "init" && s == nil {
				d.Fatalf(t, "init first")
			}
			switch d.Cmd {
			case "init":
				var err error
				cache, evicts = map[ID]int{}, map[ID]eviction{}
				s, err = New(Config{
					MaxModelLen: num("max-len"), MaxConcurrency: num("concurrency"),
					BatchTimeout: time.Duration(num("timeout")) * time.Millisecond,
					StepTokens:   num("step-tokens"), BlockSize: num("block-size"), Blocks: num("blocks"),
					BatchChunk:    num("batch-chunk"),
					BatchChunkFor: time.Duration(num("batch-chunk-for")) * time.Millisecond,
				})
				if err != nil {
					return err.Error()
				}
				c := s.Config()
				out := fmt.Sprintf("max-len=%d concurrency=%d timeout=%v step-tokens=%d block-size=%d blocks=%d",
					c.MaxModelLen, c.MaxConcurrency, c.BatchTimeout, c.StepTokens, c.BlockSize, c.Blocks)
				if c.BatchChunk != c.StepTokens {
					out += fmt.Sprintf(" batch-chunk=%d", c.BatchChunk)
				}
				if c.BatchChunkFor > 0 {
					out += fmt.Sprintf(" batch-chunk-for=%v", c.BatchChunkFor)
				}
				return out
			case "enqueue":
				r := Request{ID: ID(num("id")), Tenant: args["tenant"], Prompt: num("prompt"), MaxTokens: num("max"), Chunk: num("chunk")}
				if w, ok := args["weight"]; ok {
					f, err := strconv.ParseFloat(w, 64)
					if err != nil {
						d.Fatalf(t, "weight: %v", err)
					}
					r.Weight = f
				}
				if args["class"] == "batch" {
					r.Class = Batch
				}
				if err := s.Enqueue(at(), r); err != nil {
					kind := "other"
					switch {
					case errors.Is(err, ErrTooLong):
						kind = "ErrTooLong"
					}
					return fmt.Sprintf("error %s: %v", kind, err)
				}
				return "ok"
			case "plan":
				before := dump(s)
				st := s.Plan(at(), cached)
				if after := dump(s); after != before {
					d.Fatalf(t, "Plan changed the state:\n%s\n---\n%s", before, after)
				}
				return formatStep(st)
			case "step":
				st := s.Plan(at(), cached)
				s.Apply(at(), st)
				if err := s.check(); err != nil {
					d.Fatalf(t, "after step: %v", err)
				}
				return formatStep(st)
			case "run":
				// n steps at t, t+1, ...; prints each step that is not idle.
				var b strings.Builder
				for i := 0; i < num("n"); i++ {
					now := at().Add(time.Duration(i) * time.Millisecond)
					st := s.Plan(now, cached)
					s.Apply(now, st)
					if err := s.check(); err != nil {
						d.Fatalf(t, "after step at %v: %v", now, err)
					}
					if !st.Empty() {
						fmt.Fprintf(&b, "t=%d: %s\n", now.Sub(base).Milliseconds(), strings.ReplaceAll(formatStep(st), "\n", "; "))
					}
				}
				if b.Len() == 0 {
					return "idle"
				}
				return strings.TrimSuffix(b.String(), "\n")
			case "cache":
				cache[ID(num("id"))] = num("tokens")
				return "ok"
			case "evicts":
				evicts[ID(num("id"))] = eviction{ID(num("drops")), num("to")}
				return "ok"
			case "remove":
				q, ok := s.Remove(ID(num("id")))
				if !ok {
					return "unknown"
				}
				if err := s.check(); err != nil {
					d.Fatalf(t, "after remove: %v", err)
				}
				if q.Running {
					return fmt.Sprintf("removed running %d: free its %d blocks", q.ID, blocksFor(q.Computed, s.cfg.BlockSize))
				}
				return fmt.Sprintf("removed waiting %d", q.ID)
			case "state":
				return dump(s)
			}
			d.Fatalf(t, "unknown command %q", d.Cmd)
			return ""
		})
	})
}

var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func formatWork(w Work) string {
	s := fmt.Sprintf("work %d [%d,%d)", w.ID, w.Start, w.Start+w.N)
	if w.Sample {
		s += " sample"
	}
	if w.Last {
		s += " last"
	}
	return s
}

func formatStep(st Step) string {
	var b strings.Builder
	ids := func(label string, list []ID) {
		if len(list) == 0 {
			return
		}
		b.WriteString(label)
		for _, id := range list {
			fmt.Fprintf(&b, " %d", id)
		}
		b.WriteString("\n")
	}
	ids("preempt", st.Preempt)
	ids("join", st.Join)
	for _, w := range st.Work {
		b.WriteString(formatWork(w) + "\n")
	}
	if !st.WakeAt.IsZero() {
		fmt.Fprintf(&b, "wake at %dms\n", st.WakeAt.Sub(base).Milliseconds())
	}
	if b.Len() == 0 {
		return "idle"
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// dump prints the State in a stable order.
func dump(s *State) string {
	var b strings.Builder
	fmt.Fprintf(&b, "running:")
	for _, q := range s.running {
		fmt.Fprintf(&b, " %d(%s %d/%d gen=%d)", q.ID, q.Tenant, q.Computed, q.Len, q.Generated)
	}
	fmt.Fprintf(&b, "\nblocks used %d of %d\n", s.UsedBlocks(), s.cfg.Blocks)
	names := make([]string, 0, len(s.tenants))
	for n := range s.tenants {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t := s.tenants[n]
		fmt.Fprintf(&b, "tenant %s weight=%g vtime=%.2f running=%d received=%d waiting:", n, t.weight, t.vtime, t.running, s.received[n])
		for c, list := range t.queue {
			for _, q := range list {
				fmt.Fprintf(&b, " %d", q.ID)
				if Class(c) == Batch {
					b.WriteString("(batch)")
				}
				if q.Preempted > 0 {
					fmt.Fprintf(&b, "(preempted %d/%d)", q.Computed, q.Len)
				}
			}
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "clock %.2f", s.clock)
	return b.String()
}
