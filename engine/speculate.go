package engine

import (
	"fmt"

	"github.com/lmlite/lmlite/engine/model"
	"github.com/lmlite/lmlite/engine/sched"
	"github.com/lmlite/lmlite/engine/spec"
)

// Speculative decoding (ModelConfig.Speculative, engine/spec). Before each plan the
// runner drafts tokens for its decoding sequences (propose) and tells the scheduler
// how many; the plan grants each drafted decode what its budget and blocks allow
// (sched.Work.Draft), the step computes the sequence's last token and its granted
// drafts as one item through the same kernels as any other, and verify samples the
// item's rows in order exactly as plain decoding would sample those positions,
// accepting while the sampled token is the draft. The first mismatch ends with the
// sampled token, the target's own; the KV rows written for the rejected drafts are
// rolled back (kvcache.Seq.Truncate) and the prefix cache is given accepted tokens
// only.
//
// Why the output is plain decoding's, bit for bit: a position's logits do not depend
// on the batch or on how many positions of the sequence the step computes (the
// kernels' determinism, engine/doc.go), the history the sampler sees at a position
// is the accepted tokens before it, and the sampler's random stream advances once
// per sampled position, and positions are sampled only in order, each exactly once,
// each for an output token: the same draws as plain decoding, in the same order.

// source is where a draft came from.
type source int8

const (
	srcNGram      source = iota // prompt lookup over the sequence's own prompt and output
	srcPrediction               // the request's prediction (Request.Prediction)
	srcPool                     // the tenant's n-gram pool (spec.Pool)
	srcDraft                    // the draft model (spec.Config.DraftModel, draft.go)
	nSources
)

// specOn reports whether j may draft: its model speculates or it has a prediction,
// it did not opt out, and nothing in it needs per-token work outside its own row (a
// grammar's next mask is a function of each accepted token and is computed off the
// step; embeddings and prompt-only requests sample nothing).
func (r *runner) specOn(j *job) bool {
	return (r.spec.On() || len(j.pred.Toks) > 0) && !j.req.NoSpeculation && j.gm == nil && j.pool == model.PoolNone && !j.req.PromptOnly
}

// propose drafts for each decoding sequence that speculates and records the draft's
// length in the scheduler state, for Plan. The sources are tried in order, the
// first to give a draft wins: the request's prediction, then prompt lookup, then
// the tenant's n-gram pool (its own outputs only: r.ngrams is keyed by tenant); each
// has its own length controller (a prediction's hit rate says nothing of the
// sequence's repeats).
func (r *runner) propose() {
	base := 0 // the sequences that decode in the next step, one token each without drafts
	for id := range r.live {
		if q, ok := r.st.Seq(id); ok && q.Running && !q.Held && q.Decoding() {
			base++
		}
	}
	r.draftCost = r.spec.StepCost(&r.steps, base)
	for id, j := range r.live {
		j.draft = j.draft[:0]
		if !r.specOn(j) {
			continue
		}
		q, ok := r.st.Seq(id)
		if !ok || !q.Running || q.Held || !q.Decoding() {
			r.st.SetDraft(id, 0)
			continue
		}
		limit, cost := r.spec.Max(), r.draftCost
		if want := min(j.adapt[srcPrediction].Want(limit, cost), j.predictionLeft()); want > 0 && len(j.pred.Toks) > 0 {
			j.draft, j.src = j.pred.Draft(j.draft, j.tokens, want), srcPrediction
		}
		if want := j.adapt[srcNGram].Want(limit, cost); len(j.draft) == 0 && want > 0 && r.spec.NGram {
			j.draft, j.src = spec.Lookup(j.draft, j.tokens, want), srcNGram
		}
		if want := j.adapt[srcPool].Want(limit, cost); len(j.draft) == 0 && want > 0 && r.ngrams != nil {
			j.draft, j.src = r.ngrams.Lookup(j.draft, j.req.Tenant, j.tokens, want), srcPool
		}
		if want := j.adapt[srcDraft].Want(limit, cost); len(j.draft) == 0 && want > 0 && r.drafter != nil {
			j.src = srcDraft
			r.drafter.ask(id, j, want) // drafted below, with the others that ask
			continue
		}
		r.st.SetDraft(id, len(j.draft))
	}
	if r.drafter != nil {
		r.drafter.forget(r.live)
		r.drafter.draft(r.st.SetDraft)
	}
}

// decodeTokens is the tokens a step's work computes, and whether it only decodes
// (each item a sequence's last token and its drafts: the steps spec.Steps fits).
func decodeTokens(work []sched.Work) (n int, decode bool) {
	decode = true
	for _, w := range work {
		n += w.N
		decode = decode && w.Sample && w.N == 1+w.Draft
	}
	return n, decode
}

// predictionLeft is how many more of its prediction's drafts the job may have
// rejected: a request's rejected prediction tokens (Usage.PredictionRejected, billed
// as output tokens, as OpenAI does) are at most its prediction's tokens, so that the
// gateway can reserve their worst case before it runs (a verification rejects at
// most the drafts it was given).
func (j *job) predictionLeft() int {
	return len(j.pred.Toks) - j.u.PredictionRejected
}

// skip runs down the pauses of the length controllers of every source but except
// (nSources: all), for a decode step in which they verified nothing.
func (j *job) skip(except source) {
	for s := range nSources {
		if s != except {
			j.adapt[s].Skip()
		}
	}
}

// verifyTokens is the item's tokens of a drafted decode: the sequence's last token
// and the drafts granted.
func (j *job) verifyTokens(w sched.Work) []int32 {
	j.verify = append(append(j.verify[:0], j.tokens[w.Start]), j.draft[:w.Draft]...)
	return j.verify
}

// verify samples a drafted decode's rows (1+w.Draft positions, token-major) in order
// and accepts tokens while they equal the drafts; it ends the job when a token ends
// it, and otherwise rolls the KV back to the accepted tokens and tells the scheduler
// how many drafts were accepted.
func (r *runner) verify(w sched.Work, j *job, rows []float32) {
	v := len(rows) / (1 + w.Draft)
	accepted := 0
	src := j.src
	j.u.DraftTokens += w.Draft
	r.stats.drafted[src].Add(uint64(w.Draft))
	// record counts the verification's drafted and accepted tokens, before the job
	// may end (its Usage goes out with it).
	record := func() {
		j.u.AcceptedTokens += accepted
		if src == srcPrediction {
			j.u.PredictionAccepted += accepted
			j.u.PredictionRejected += w.Draft - accepted
		}
		r.stats.accepted[src].Add(uint64(accepted))
		j.adapt[src].Verified(w.Draft, accepted, r.spec.Max(), r.draftCost)
		j.skip(src)
	}
	for i := 0; i <= w.Draft; i++ {
		row := rows[i*v : (i+1)*v]
		id, err := j.pick(row)
		if err != nil {
			record()
			r.st.Remove(w.ID)
			r.end(w.ID, j, "", fmt.Errorf("engine: model %s: %w", r.id, err))
			return
		}
		r.stats.decode(j.req.Tenant)
		hit := i < w.Draft && id == j.draft[i]
		if reason, over := j.accept(r.tok, id, row[id]); over {
			if hit {
				accepted++ // the draft was right, whatever ended the job with it
			}
			record()
			if !r.noCache { // its last blocks too, as plain decoding publishes before it ends
				j.kv.Publish(j.tokens[:min(w.Start+1+accepted, len(j.tokens))])
			}
			r.st.Remove(w.ID) // a drafted step is never Last (sched caps the draft)
			r.end(w.ID, j, reason, nil)
			return
		}
		if !hit {
			break
		}
		accepted++
	}
	record()
	// KV holds the tokens up to the accepted ones; the last sampled token is next.
	computed := w.Start + 1 + accepted
	r.st.Accept(w.ID, accepted)
	j.kv.Truncate(computed)
	if !r.noCache {
		j.kv.Publish(j.tokens[:computed])
	}
}
