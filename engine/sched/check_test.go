package sched

import "fmt"

// check verifies the State's invariants; the tests call it after every change.
func (s *State) check() error {
	queued := 0
	seen := map[ID]bool{}
	for name, t := range s.tenants {
		running := 0
		for _, q := range s.running {
			if q.Tenant == name {
				running++
			}
		}
		if running != t.running {
			return fmt.Errorf("tenant %q counts %d running, has %d", name, t.running, running)
		}
		for c, list := range t.queue {
			for i, q := range list {
				if q.Running || q.Done || Class(c) != q.Class || q.Tenant != name || s.seqs[q.ID] != q {
					return fmt.Errorf("queued %d is misfiled", q.ID)
				}
				if i > 0 && earlier(q, list[i-1]) {
					return fmt.Errorf("queue of %q out of order at %d", name, q.ID)
				}
				seen[q.ID] = true
				queued++
			}
		}
	}
	if queued != s.waiting {
		return fmt.Errorf("waiting %d, queues hold %d", s.waiting, queued)
	}
	if len(s.running) > s.cfg.MaxConcurrency {
		return fmt.Errorf("%d running > concurrency %d", len(s.running), s.cfg.MaxConcurrency)
	}
	for _, q := range s.running {
		if !q.Running || q.Done || s.seqs[q.ID] != q || seen[q.ID] {
			return fmt.Errorf("running %d is misfiled", q.ID)
		}
		seen[q.ID] = true
	}
	if u := s.UsedBlocks(); u > s.cfg.Blocks {
		return fmt.Errorf("%d blocks used > %d", u, s.cfg.Blocks)
	}
	for id, q := range s.seqs {
		if !seen[id] && !q.Done {
			return fmt.Errorf("sequence %d is neither queued, running nor done", id)
		}
		if q.Computed > q.Len || q.Generated > q.MaxTokens || q.Len != q.Prompt+q.Generated {
			return fmt.Errorf("sequence %d: computed %d len %d generated %d max %d", id, q.Computed, q.Len, q.Generated, q.MaxTokens)
		}
	}
	return nil
}
