package sched

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestFairShare: two tenants, one sending ten times as many requests as the other,
// both backlogged; each receives its weighted share of output tokens (decode steps)
// within 10%.
func TestFairShare(t *testing.T) {
	for _, tc := range []struct {
		name       string
		wA, wB     float64
		interleave bool
	}{
		{"equal weights", 1, 1, false},
		{"B weighs 3", 1, 3, false},
		{"A weighs 2", 2, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(Config{MaxModelLen: 256, MaxConcurrency: 4, StepTokens: 64, BlockSize: 16})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			next := ID(1)
			send := func(now time.Time, tenant string, w float64) {
				err := s.Enqueue(now, Request{ID: next, Tenant: tenant, Weight: w, Prompt: 4 + rng.IntN(40), MaxTokens: 5 + rng.IntN(40)})
				if err != nil {
					t.Fatal(err)
				}
				next++
			}
			const steps, warm = 6000, 1000
			var a0, b0 int
			for i := range steps {
				now := base.Add(time.Duration(i) * time.Millisecond)
				if i%4 == 0 { // A sends 10 requests per 4 steps, B one; both outrun 4 slots
					for range 10 {
						send(now, "A", tc.wA)
					}
					send(now, "B", tc.wB)
				}
				if i == warm {
					a0, b0 = s.Received("A"), s.Received("B")
				}
				st := s.Plan(now, nil)
				s.Apply(now, st)
			}
			if err := s.check(); err != nil {
				t.Fatal(err)
			}
			a, b := float64(s.Received("A")-a0), float64(s.Received("B")-b0)
			wantA := tc.wA / (tc.wA + tc.wB)
			gotA := a / (a + b)
			t.Logf("A %v tokens, B %v tokens: A's share %.3f, want %.3f", a, b, gotA, wantA)
			if a+b < steps { // the batch must have been busy: ~4 tokens a step
				t.Fatalf("only %v tokens in %d steps", a+b, steps-warm)
			}
			for _, share := range [][2]float64{{gotA, wantA}, {1 - gotA, 1 - wantA}} {
				if math.Abs(share[0]-share[1]) > 0.1*share[1] {
					t.Errorf("share %.3f, want %.3f ± 10%%", share[0], share[1])
				}
			}
			// B's queue stayed short: nothing of B waited behind A's flood.
			if s.Waiting() < 1000 {
				t.Errorf("A's flood should still be queued, %d waiting", s.Waiting())
			}
		})
	}
}

func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults", Config{MaxModelLen: 2048}, true},
		{"no max len", Config{}, false},
		{"negative concurrency", Config{MaxModelLen: 64, MaxConcurrency: -1}, false},
		{"step budget below concurrency", Config{MaxModelLen: 64, MaxConcurrency: 16, StepTokens: 8}, false},
		{"pool smaller than one sequence", Config{MaxModelLen: 64, BlockSize: 16, Blocks: 4}, false},
		{"pool of exactly one sequence", Config{MaxModelLen: 63, BlockSize: 16, Blocks: 4}, true},
		{"negative timeout", Config{MaxModelLen: 64, BatchTimeout: -time.Second}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.cfg)
			if (err == nil) != tc.ok {
				t.Fatalf("New(%+v): %v", tc.cfg, err)
			}
			if err == nil {
				c := s.Config()
				if c.MaxConcurrency <= 0 || c.BlockSize <= 0 || c.StepTokens < c.MaxConcurrency || c.Blocks <= 0 {
					t.Fatalf("defaults not filled: %+v", c)
				}
			}
		})
	}
}

func TestEnqueueLimits(t *testing.T) {
	s, err := New(Config{MaxModelLen: 100, MaxConcurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		r    Request
		want error
	}{
		{Request{Tenant: "a", Prompt: 60, MaxTokens: 40}, nil},         // exactly the limit
		{Request{Tenant: "a", Prompt: 60, MaxTokens: 41}, ErrTooLong},  // one over
		{Request{Tenant: "a", Prompt: 100}, ErrTooLong},                // no room for one output token
		{Request{Tenant: "a", Prompt: 99}, nil},                        // max 0: up to the limit
		{Request{Tenant: "c", Prompt: 0}, ErrInvalid},                  // empty
		{Request{Tenant: "c", Prompt: 5, MaxTokens: -1}, ErrInvalid},   // negative
		{Request{Tenant: "c", Prompt: 5, Class: Class(7)}, ErrInvalid}, // unknown class
	} {
		tc.r.ID = ID(i + 1)
		err := s.Enqueue(base, tc.r)
		if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%d: Enqueue(%+v) = %v, want %v", i, tc.r, err, tc.want)
		}
	}
	err = s.Enqueue(base, Request{ID: 100, Tenant: "a", Prompt: 90, MaxTokens: 20})
	var le *LimitError
	if !errors.As(err, &le) || le.Kind != ErrTooLong || le.Detail != "prompt 90 + max tokens 20 > max model len 100" {
		t.Errorf("the error carries the limits: %#v", err)
	}
	if err := s.Enqueue(base, Request{ID: 1, Tenant: "z", Prompt: 1}); !errors.Is(err, ErrDuplicate) {
		t.Errorf("duplicate id: %v", err)
	}
	if q, _ := s.Seq(4); q.MaxTokens != 1 {
		t.Errorf("max tokens 0 should become 1 (100-99), got %d", q.MaxTokens)
	}
	if err := s.check(); err != nil {
		t.Fatal(err)
	}
}

// TestEnqueueHasNoQueueLimit: the scheduler refuses no request for the queue's
// length, however many wait (one tenant, one class, far past any per-replica
// default): the engine's ModelConfig.MaxQueue, checked before a request reaches a
// replica, is the model's only queue limit, so a second one here could only refuse
// what the engine had admitted.
func TestEnqueueHasNoQueueLimit(t *testing.T) {
	s, err := New(Config{MaxModelLen: 64, MaxConcurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	for i := range n {
		if err := s.Enqueue(base, Request{ID: ID(i + 1), Tenant: "a", Class: Batch, Prompt: 4, MaxTokens: 4}); err != nil {
			t.Fatalf("request %d of one tenant refused: %v", i+1, err)
		}
	}
	if w := s.Waiting(); w != n {
		t.Errorf("waiting %d, want %d", w, n)
	}
	if err := s.check(); err != nil {
		t.Error(err)
	}
}

// TestIdleTenantBanksNoCredit: a tenant that was idle while another was served starts
// at the virtual clock, so it does not then monopolise the batch.
func TestIdleTenantBanksNoCredit(t *testing.T) {
	s, err := New(Config{MaxModelLen: 64, MaxConcurrency: 2, StepTokens: 64, BlockSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	id := ID(0)
	send := func(now time.Time, tenant string) {
		id++
		if err := s.Enqueue(now, Request{ID: id, Tenant: tenant, Prompt: 4, MaxTokens: 4}); err != nil {
			t.Fatal(err)
		}
	}
	now := base
	for range 60 { // more than A can get through while alone
		send(now, "A")
	}
	for range 40 { // A alone for a while
		s.Apply(now, s.Plan(now, nil))
		now = now.Add(time.Millisecond)
	}
	a0 := s.Received("A")
	for range 20 {
		send(now, "B")
	}
	for range 40 {
		s.Apply(now, s.Plan(now, nil))
		now = now.Add(time.Millisecond)
	}
	a, b := s.Received("A")-a0, s.Received("B")
	if a == 0 || b == 0 || math.Abs(float64(a-b)) > 0.25*float64(a+b) {
		t.Errorf("after B arrived A got %d tokens, B %d: want about even", a, b)
	}
}

// TestRandomOps: random arrivals, cancellations, cache hints and steps under random
// limits keep every invariant (check), never give a step work beyond its budget nor
// batch prefill beyond BatchChunk, never put batch work in a step that prefills for an
// interactive request, and never leave a batch idle that has batch work it could do
// while no interactive prefill runs.
func TestRandomOps(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for round := range 200 {
		cfg := Config{
			MaxModelLen:    16 + rng.IntN(200),
			MaxConcurrency: 1 + rng.IntN(6),
			BlockSize:      1 + rng.IntN(16),
			BatchTimeout:   time.Duration(rng.IntN(3)) * time.Millisecond,
		}
		cfg.StepTokens = cfg.MaxConcurrency + rng.IntN(64)
		cfg.BatchChunk = rng.IntN(2) * (1 + rng.IntN(cfg.StepTokens))
		cfg.BatchChunkFor = time.Duration(rng.IntN(2)*rng.IntN(6)) * time.Millisecond
		cfg.Blocks = blocksFor(cfg.MaxModelLen+1, cfg.BlockSize) * (1 + rng.IntN(3))
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		now := base
		var ids []ID
		var lastChat time.Time // the latest interactive arrival
		next := ID(1)
		for range 300 {
			now = now.Add(time.Duration(rng.IntN(2)) * time.Millisecond)
			switch op := rng.IntN(10); {
			case op < 3:
				p := 1 + rng.IntN(cfg.MaxModelLen)
				r := Request{ID: next, Tenant: string(rune('A' + rng.IntN(3))), Weight: float64(1 + rng.IntN(3)), Class: Class(rng.IntN(2)), Prompt: p, MaxTokens: rng.IntN(cfg.MaxModelLen - p + 2)}
				next++
				if err := s.Enqueue(now, r); err == nil {
					ids = append(ids, r.ID)
					if r.Class == Interactive {
						lastChat = now
					}
				} else if !errors.Is(err, ErrTooLong) {
					t.Fatal(err)
				}
			case op < 4 && len(ids) > 0:
				s.Remove(ids[rng.IntN(len(ids))])
			default:
				// A cache that holds some whole blocks of some prompts.
				cached := func(id ID) int {
					q, _ := s.Seq(id)
					return int(id) % 3 * (q.Len / 3) / cfg.BlockSize * cfg.BlockSize
				}
				st := s.Plan(now, cached)
				if st2 := s.Plan(now, cached); len(st2.Work) != len(st.Work) || len(st2.Join) != len(st.Join) {
					t.Fatal("Plan is not a function of the state")
				}
				tokens := 0
				for _, w := range st.Work {
					tokens += w.N
					if w.N <= 0 {
						t.Fatalf("round %d: empty work %+v", round, w)
					}
				}
				if tokens > cfg.StepTokens {
					t.Fatalf("round %d: %d tokens > budget %d", round, tokens, cfg.StepTokens)
				}
				if err := checkClasses(s, st, now, lastChat); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				for _, id := range st.Join {
					q, _ := s.Seq(id)
					for _, w := range st.Work {
						if w.ID == id && w.Start != min(cached(id), q.Len-1) {
							t.Fatalf("round %d: join %+v of a sequence of %d tokens with %d cached", round, w, q.Len, cached(id))
						}
					}
				}
				s.Apply(now, st)
			}
			if err := s.check(); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		// Drain: everything left finishes (no request is stuck for want of blocks).
		for i := 0; s.Waiting()+s.Running() > 0; i++ {
			if i > 100000 {
				t.Fatalf("round %d: %d waiting, %d running never finish (cfg %+v)", round, s.Waiting(), s.Running(), cfg)
			}
			now = now.Add(time.Millisecond)
			s.Apply(now, s.Plan(now, nil))
			if err := s.check(); err != nil {
				t.Fatalf("round %d drain: %v", round, err)
			}
		}
	}
}

// checkClasses verifies a step's classes of work against the State it was planned on:
// a step that prefills for an interactive sequence has no batch work, batch prefill
// stays within BatchChunk while interactive traffic is there (BatchChunkFor), and a
// step with no interactive prefill leaves no running batch decode out.
func checkClasses(s *State, st Step, now, lastChat time.Time) error {
	interactivePrefill, batchPrefill := false, 0
	batchWork := map[ID]bool{}
	for _, w := range st.Work {
		q, _ := s.Seq(w.ID)
		joining := !q.Running
		prefill := joining || !q.Decoding()
		if q.Class == Interactive && prefill {
			interactivePrefill = true
		}
		if q.Class == Batch {
			batchWork[w.ID] = true
			if prefill {
				batchPrefill += w.N
			}
		}
	}
	if interactivePrefill && len(batchWork) > 0 {
		return fmt.Errorf("a step prefilling for an interactive request has batch work: %+v", st)
	}
	chat := s.cfg.BatchChunkFor == 0 || now.Sub(lastChat) < s.cfg.BatchChunkFor // interactive traffic
	for _, q := range s.seqs {
		chat = chat || q.Class == Interactive && !q.Done
	}
	if chat && batchPrefill > s.cfg.BatchChunk {
		return fmt.Errorf("batch prefill %d tokens > BatchChunk %d with interactive traffic", batchPrefill, s.cfg.BatchChunk)
	}
	if !interactivePrefill {
		preempted := map[ID]bool{}
		for _, id := range st.Preempt {
			preempted[id] = true
		}
		for _, q := range s.running {
			if q.Class == Batch && q.Decoding() && !preempted[q.ID] && !batchWork[q.ID] {
				return fmt.Errorf("batch decode %d paused in a step without interactive prefill: %+v", q.ID, st)
			}
		}
	}
	return nil
}

// BenchmarkStep is one Plan and Apply of a full batch of 16 decoding sequences with
// a backlog of 4 tenants.
func BenchmarkStep(b *testing.B) {
	s, err := New(Config{MaxModelLen: 1 << 20, MaxConcurrency: 16, BlockSize: 16})
	if err != nil {
		b.Fatal(err)
	}
	now := base
	for i := range 1000 {
		s.Enqueue(now, Request{ID: ID(i + 1), Tenant: string(rune('a' + i%4)), Prompt: 8, MaxTokens: 1 << 19})
	}
	s.Apply(now, s.Plan(now, nil))
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Millisecond)
		s.Apply(now, s.Plan(now, nil))
	}
}

// TestHeldSequenceTakesNoWork: a held sequence (its grammar mask is being computed)
// neither joins, prefills nor decodes, and the other tenant's sequences go on without
// it; released, it takes its work again where it was.
func TestHeldSequenceTakesNoWork(t *testing.T) {
	s, err := New(Config{MaxModelLen: 256, MaxConcurrency: 4, StepTokens: 64, BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	now := base
	for id, tenant := range map[ID]string{1: "hostile", 2: "probe", 3: "hostile"} {
		if err := s.Enqueue(now, Request{ID: id, Tenant: tenant, Prompt: 8, MaxTokens: 10}); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(st Step) map[ID]bool {
		m := map[ID]bool{}
		for _, w := range st.Work {
			m[w.ID] = true
		}
		return m
	}
	// Queued and held: 1 does not join and 3, its tenant's next, waits behind it; 2 joins.
	s.Hold(1, true)
	st := s.Plan(now, nil)
	if got := ids(st); got[1] || got[3] || !got[2] {
		t.Fatalf("held queued 1: work for %v, want 2 only", got)
	}
	s.Apply(now, st)
	// Released, 1 and 3 join; then 1 is held while running: 2 and 3 decode without it.
	s.Hold(1, false)
	st = s.Plan(now, nil)
	s.Apply(now, st)
	if q, _ := s.Seq(1); !q.Running {
		t.Fatal("released 1 did not join")
	}
	s.Hold(1, true)
	q1, _ := s.Seq(1)
	before := q1.Generated
	for range 3 {
		st = s.Plan(now, nil)
		if got := ids(st); got[1] || !got[2] || !got[3] {
			t.Fatalf("held running 1: work for %v, want 2 and 3", got)
		}
		s.Apply(now, st)
	}
	if q1.Generated != before || !q1.Running {
		t.Fatalf("held 1 generated %d tokens (running %v)", q1.Generated-before, q1.Running)
	}
	s.Hold(1, false)
	st = s.Plan(now, nil)
	if got := ids(st); !got[1] {
		t.Fatalf("released 1 takes no work: %v", got)
	}
	s.Apply(now, st)
	if err := s.check(); err != nil {
		t.Fatal(err)
	}
}
