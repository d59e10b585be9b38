package sched

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lmlite/lmlite/kvcache"
)

// TestWithKVCache runs the scheduler's decisions against a real kvcache.Pool of
// Config.Blocks blocks, the way the Block does: preempted and finished sequences
// release their blocks, joins take their cached prefix, every step's work grows the
// tables. The scheduler's conservative accounting must mean the pool never runs out,
// with prefixes shared between requests, preemption and cancellation.
func TestWithKVCache(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 20 {
		cfg := Config{MaxModelLen: 96, MaxConcurrency: 1 + rng.IntN(5), BlockSize: 4, StepTokens: 32}
		cfg.Blocks = blocksFor(cfg.MaxModelLen+1, cfg.BlockSize) * (1 + rng.IntN(2))
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		pool, err := kvcache.New(kvcache.Config{Layers: 1, KVHeads: 1, HeadDim: 1, BlockTokens: cfg.BlockSize, Blocks: cfg.Blocks, WarmBytes: 16 * 8})
		if err != nil {
			t.Fatal(err)
		}
		prefixes := [][]int32{make([]int32, 24), make([]int32, 40)}
		for _, p := range prefixes {
			for i := range p {
				p[i] = rng.Int32N(50)
			}
		}
		tokens := map[ID][]int32{}
		seqs := map[ID]*kvcache.Seq{}
		release := func(id ID) {
			if q := seqs[id]; q != nil {
				q.Release()
				delete(seqs, id)
			}
		}
		next := ID(1)
		now := base
		hits, recomputed := 0, 0
		for step := 0; step < 400 || s.Waiting()+s.Running() > 0; step++ {
			if step > 20000 {
				t.Fatalf("round %d: never drains", round)
			}
			now = now.Add(time.Millisecond)
			if step < 400 && rng.IntN(3) == 0 {
				pre := prefixes[rng.IntN(2)]
				p := append([]int32(nil), pre[:rng.IntN(len(pre)+1)]...)
				for range 1 + rng.IntN(20) {
					p = append(p, rng.Int32N(50))
				}
				p = p[:min(len(p), 80)]
				r := Request{ID: next, Tenant: []string{"a", "b"}[rng.IntN(2)], Class: Class(rng.IntN(2)), Prompt: len(p), MaxTokens: 1 + rng.IntN(cfg.MaxModelLen-len(p))}
				if err := s.Enqueue(now, r); err == nil {
					tokens[next] = p
				}
				next++
			}
			if step < 400 && rng.IntN(20) == 0 && s.Running() > 0 {
				id := s.running[rng.IntN(s.Running())].ID
				s.Remove(id)
				release(id)
				delete(tokens, id)
			}
			st := s.Plan(now, func(id ID) int {
				q, _ := s.Seq(id)
				return pool.Peek(q.Tenant, tokens[id][:len(tokens[id])-1]) // all but the last known token
			})
			s.Apply(now, st)
			for _, id := range st.Preempt {
				release(id)
			}
			work := map[ID]Work{}
			for _, w := range st.Work {
				work[w.ID] = w
			}
			for _, id := range st.Join {
				q, _ := s.Seq(id)
				kq := pool.NewSeq(q.Tenant)
				seqs[id] = kq
				w := work[id]
				cached := kq.PrefixLimit(tokens[id][:len(tokens[id])-1], w.Start) // the blocks the plan counted on
				hits += cached
				if cached < w.Start {
					// A replay for an earlier join of this step evicted one (the warm
					// tier under pressure): compute it again in this step.
					w.N += w.Start - cached
					w.Start = cached
					work[id] = w
					recomputed++
				}
			}
			for _, w := range st.Work { // in order, so that the test is deterministic
				w = work[w.ID]
				kq := seqs[w.ID]
				if err := kq.Grow(w.Start + w.N); err != nil {
					t.Fatalf("round %d step %d: the scheduler planned work the pool cannot hold: %v (used %d of %d by the scheduler's count)", round, step, err, s.UsedBlocks(), cfg.Blocks)
				}
				kq.Publish(tokens[w.ID][:w.Start+w.N])
				if w.Sample {
					tokens[w.ID] = append(tokens[w.ID], rng.Int32N(50))
				}
				if w.Last {
					release(w.ID)
					delete(tokens, w.ID)
				}
			}
			if used := pool.Stats().HotUsed; used > int64(s.UsedBlocks()) {
				t.Fatalf("round %d: the pool has %d blocks referenced, the scheduler counts %d", round, used, s.UsedBlocks())
			}
		}
		if len(seqs) != 0 || pool.Stats().HotUsed != 0 {
			t.Fatalf("round %d: %d sequences still hold blocks", round, len(seqs))
		}
		if hits == 0 {
			t.Fatalf("round %d: shared prefixes never hit the cache", round)
		}
		if recomputed > 0 {
			t.Logf("round %d: %d joins recomputed evicted cached blocks", round, recomputed)
		}
	}
}
