// Package sched decides what a model's batch runs next: iteration-level (continuous)
// batching with chunked prefill, per-tenant weighted fair queues, interactive before
// batch, and admission by KV blocks. It is the pure core of the engine's Block.
//
// # Model
//
// A State holds one model's waiting requests (per tenant, per class, FIFO) and its
// running sequences. Every sequence has Len tokens known (prompt + generated) and
// Computed tokens whose KV is cached; Len-Computed == 1 is a decode, more is a
// prefill. Time never passes inside the package: every call that needs it takes now.
//
// Plan(now, cached) is a pure function of the State, the time and what the prefix
// cache holds for the requests it joins (cached, which the Block answers by taking
// those blocks, so that what Plan counted is what the step finds). It returns a
// Step, final as made (the Block does not patch it):
//
//   - Preempt: when the KV blocks do not suffice for the running decodes, the
//     lowest-class, most recently joined sequences leave the batch and go back to
//     their queue (with their arrival time, so near the head); their KV is dropped and
//     they later prefill their prompt plus what they had generated. Likewise, when
//     an interactive request waits for a slot or for blocks that running batch
//     sequences hold, the most recently joined batch sequences make room for it
//     (only if that suffices): interactive requests never wait behind batch ones.
//   - Work: each running decode computes one token; then the running prefills get
//     chunks of what is left of StepTokens (so a long prompt never stalls the
//     decodes); then joining requests get their first chunk, which starts after
//     their cached prefix (cached tokens cost no budget).
//   - Join: while the batch has room (MaxConcurrency), tokens are left in the step and
//     the KV blocks hold the request's prompt plus one step, waiting requests join:
//     interactive strictly before batch; within a class the tenant with the least
//     virtual time first (output tokens received divided by the tenant's weight; an
//     idle tenant comes back at the virtual clock, so idling banks no credit). The
//     joins of one step are spread over the tenants, and when the head of that order
//     does not fit, nobody overtakes it.
//   - Interactive first inside the step: a step that prefills for an interactive
//     request (a running prefill's chunk or a join) runs interactive work only.
//     Running batch sequences keep their slot and KV blocks but neither decode nor
//     prefill in it (they are paused, not preempted), and no batch request joins; the
//     step after, they go on. So an interactive request's time to first token does not
//     pay for batch tokens computed beside its prompt. Without interactive prefill
//     work (nothing interactive waits, or what waits cannot join), batch work runs at
//     the step budget: batch never starves while no interactive work is there.
//     BatchChunk caps the prompt tokens batch sequences prefill in any one step, all
//     together, to shorten the step an arriving interactive request waits out; with
//     BatchChunkFor, only while interactive traffic is there (an interactive request
//     waits or runs, or arrived within BatchChunkFor), so a batch alone prefills at
//     the step budget.
//     Which steps a sequence's tokens are computed in never changes their values
//     (the engine's determinism), only when they come.
//   - Drafts: a decoding sequence with a draft (SetDraft: tokens the Block guesses
//     will follow, to verify) gets them added to its decode's work (Work.Draft, N =
//     1+Draft) after all the above, while the step's budget and the KV blocks last,
//     and never past its MaxTokens (so a drafted step is never Last). Apply counts
//     the decode's one token; Accept counts the drafts the Block accepted.
//   - Held: a sequence the Block holds (Hold: its grammar mask is not computed yet)
//     takes no work in any of the above; the others go on without it.
//   - WakeAt: with nothing running and a batch that is not full, Plan waits until
//     BatchTimeout after the first waiting request (BatchTimeout 0 runs at once).
//
// Apply(now, step) makes the State take the step. Sequences whose work is Last (their
// MaxTokens-th token) leave the State; the Block removes those that stop for another
// reason (end-of-sequence, a stop string, a cancelled context) with Remove.
//
// The KV accounting is conservative: each sequence is counted for its own block
// table (blocksFor(Computed)), so shared prefix blocks count once per sequence and
// the real pool, which has Config.Blocks blocks for this model, always has the
// blocks a Step asks for (cached blocks that no sequence references are evictable,
// so they count as free).
//
// # Errors
//
// Enqueue refuses at once, leaving the State unchanged: ErrTooLong when prompt + max
// tokens exceed MaxModelLen (a *LimitError, with the numbers), ErrInvalid for an
// empty prompt or an unknown class, ErrDuplicate for an ID the State holds. The
// package does not import engine (engine's Block imports it); the Block wraps them:
//
//	if errors.Is(err, sched.ErrTooLong) {
//		err = fmt.Errorf("%w: %w", engine.ErrTooLong, err)
//	}
//
// There is no queue limit here: however many requests wait, Enqueue takes them
// (TestEnqueueHasNoQueueLimit). The model's one queue limit is the engine's
// ModelConfig.MaxQueue, its requests in flight over all replicas (and those waiting
// for a load), which Generate and Embed check before a request reaches a State.
//
// # The Block's loop
//
// One goroutine owns the State; Submit, cancellation and the model's results reach it
// by channels. Sketch:
//
//	st, err := sched.New(sched.Config{MaxModelLen: 4096, MaxConcurrency: 8,
//		BatchTimeout: 5 * time.Millisecond, BlockSize: pool.BlockTokens(), Blocks: pool.Blocks()})
//	for {
//		taken = taken[:0]
//		step := st.Plan(now(), func(id sched.ID) int { // Cached: take what the prefix cache holds
//			if kv[id] == nil {
//				kv[id] = pool.NewSeq(salt[id]) // kvcache: salt per tenant unless shared on purpose
//				kv[id].Prefix(tokens[id][:len(tokens[id])-1]) // taken now: a later join's replay cannot evict it
//				taken = append(taken, id)
//			}
//			return kv[id].Cached() // asked again in this Plan: the same answer
//		})
//		for _, id := range taken {
//			if !slices.Contains(step.Join, id) {
//				kv[id].Release() // not joined: give its blocks back
//				kv[id] = nil
//			}
//		}
//		st.Apply(now(), step)
//		for _, id := range step.Preempt {
//			kv[id].Release() // its KV is gone (its full blocks stay cached); it will prefill again
//			kv[id] = nil
//		}
//		work := step.Work // as planned: each join's work starts after the blocks it took
//		if len(work) == 0 {
//			wait(step.WakeAt) // or the next submission or cancellation
//			continue
//		}
//		for _, w := range work {
//			kv[w.ID].Grow(w.Start + w.N) // never fails: the State counts the pool's blocks
//		}
//		logits := model.Forward(work) // one batch; Sample work yields one token each
//		for _, w := range work {
//			kv[w.ID].Publish(tokens[w.ID][:w.Start+w.N])
//		}
//		deliver(logits) // append tokens; st.Remove and Release those that hit EOS or a stop string
//		for _, w := range work {
//			if w.Last { // finished by length
//				kv[w.ID].Release()
//			}
//		}
//	}
package sched
