package gateway

import (
	"errors"
	"strconv"
	"time"

	"github.com/lmlite/lmlite/money"
	"github.com/lmlite/lmlite/tiers"
)

// The routing decision (DESIGN.md's request path): decide is a pure function of the
// request (ask), what is known of the server up front (snapshot) and now. It returns
// an ordered fallback chain; the shell (job.run) admits, reserves and runs entry k,
// and on a refusal (the engine's queue full, no memory, an upstream down, the
// reservation refused) releases it and takes entry k+1 without deciding again.

// ask is what the decision knows of one request.
type ask struct {
	rt        route
	n         int    // choices: each entry's worst case covers n outputs
	maxTokens int    // the output asked for (0: not given), for the latency prediction
	maxField  string // the field that limits the output, for a 400 naming it
	tools     bool   // the request gives tools the model may call

	allowTier [tiers.NumTiers]bool // the plan's tiers
}

// asks is what the decision asks of the request: functions, apart from ask because
// the chain copies ask's pointers (the model named, its adapter, the field) out, so
// Go's escape analysis moves whatever ask holds to the heap; the job's method values
// here stay on its stack (issue 36: 3 allocations per request).
type asks struct {
	allowModel func(id string) bool // the plan's models and adapters a tier may list (nil: all)
	hidden     func(id string) bool // the tier candidates that do not exist for the tenant (others' private adapters; nil: none)
	plan       func(m *model) plan  // the request's plan on a model; a function of the model alone (the job memoizes it)
}

// snapshot is what the decision knows of the server, read once before it.
type snapshot struct {
	set       *tiers.Set
	models    map[string]*model
	adapters  map[string]*adapter                           // a tier may list an adapter: its candidate runs on the base
	remaining money.Money                                   // the tenant's money left (< 0: unlimited)
	stats     func(model string, now time.Time) tiers.Stats // the models' queues and predictors
	native    func(m *model) bool                           // whether m's template renders tools (which models can serve tools)
}

// chain is a decision: the entries to try in order, best first, and what to answer
// when every entry refused.
type chain struct {
	entries []choice
	// noFit is why no tier is left after the entries (a route by tiers, each refused
	// tier counted as failed, as tiers.Select says it); nil: the last entry's refusal
	// ends the chain. unfit is its answer when a model tried says which limit the
	// request is over (noFit). The answer (end) is made only when every entry refused:
	// its message costs more than the rest of the decision, and a request an entry
	// serves never reads it.
	noFit    error
	unfit    *apiError
	maxField string
	// endReq, when lazy, is the tiers.Select that ends the chain, made only if end is
	// called: decide saw that every candidate it may reach is forbidden, hidden or in
	// the chain (failing), so its refusal depends on no live statistics and no need,
	// and is the same later (chainEnds). endReq lacks the policy's functions and the
	// set, which end is given: kept here they would move the snapshot's and the job's
	// method values to the heap.
	lazy   bool
	endReq tiers.Request
}

// end is the answer when every entry refused: why no tier is left, or nil for the
// last entry's refusal. set, allowModel and hidden are the decision's (snapshot,
// asks).
func (ch *chain) end(set *tiers.Set, allowModel, hidden func(id string) bool) *apiError {
	if ch.lazy && ch.noFit == nil {
		req := ch.endReq
		req.AllowModel, req.Hidden = allowModel, hidden
		_, err := tiers.Select(set, req, func(string) tiers.Stats { return tiers.Stats{Failing: true} })
		if err == nil { // cannot be: chainEnds said every candidate fails
			return nil
		}
		ch.noFit = err
	}
	if ch.noFit == nil {
		return nil
	}
	if ch.unfit != nil {
		return ch.unfit
	}
	return noFitAnswer(ch.noFit, ch.maxField)
}

// chainEnds reports whether tiers.Select on req, with the chain's entries failing,
// refuses whatever the models' statistics and the request's needs: each candidate it
// may weigh runs on a model in the chain (tiers.Refuses, which walks the tiers as
// Select does). Its refusal is then the chain's end, made lazily (chain.end): the
// tiers.Select it saves, with its trace and error, was 2 allocations of every request
// by tiers whose chain ended early (issue 36).
func chainEnds(req *tiers.Request, entries []choice, set *tiers.Set, modelOf func(id string) *model) bool {
	return tiers.Refuses(set, req, func(id string) bool {
		m := modelOf(id)
		for i := range entries {
			if entries[i].m == m {
				return true
			}
		}
		return false
	})
}

// decide decides where a request goes, once. A named model is a chain of one (the
// model overloaded or the request over its limits: an error). A fixed tier is a chain
// of one: that tier's best model that fits. Otherwise the chain is the best model of
// each tier the mode may step down to, highest first (tiers.Select's choice with the
// tiers before it excluded), each tier's model chosen as though the models before
// it in the chain had refused (they count as failing, as the predictor marks a
// model that refused). A request with tools goes to a model whose template renders
// tools where one may serve it, in each step. dst is the entries' backing array (a
// chain longer than its capacity takes one of tiers.NumTiers entries).
func decide(a *ask, f *asks, sn *snapshot, now time.Time, dst []choice) (chain, *apiError) {
	ch := chain{entries: dst[:0]}
	if m := a.rt.named; m != nil {
		if st := sn.stats(m.id, now); st.MaxQueue > 0 && st.Queue >= st.MaxQueue {
			return ch, &apiError{status: 503, typ: "server_error", code: "overloaded", retry: 1, reason: "overloaded",
				message: "the model '" + m.id + "' is overloaded (" + strconv.Itoa(st.Queue) + " requests queued); retry later"}
		}
		p := f.plan(m)
		if p.err != nil {
			return ch, p.err
		}
		tierName := m.tier
		if ad := a.rt.adapter; ad != nil && ad.tier != "" {
			tierName = ad.tier
		}
		ch.entries = append(ch.entries, choice{m: m, adapter: a.rt.adapter, tierName: tierName, plan: p, cost: m.price.Cost(p.nPrompt, p.billedOut(a.n))})
		ch.entries[0].reserve = ch.entries[0].cost
		return ch, nil
	}
	out := a.maxTokens
	if out == 0 {
		out = 256 // unknown: a typical answer, for the latency prediction
	}
	// modelOf is sn.model with the last id's answer kept: Select's stats and need and
	// chainEnds ask it of the same candidate in turn (each a map lookup, issue 36).
	var lastID string
	var last *model
	modelOf := func(id string) *model {
		if last == nil || id != lastID {
			lastID, last = id, sn.model(id)
		}
		return last
	}
	need := func(id string) tiers.Need {
		p := f.plan(modelOf(id))
		return tiers.Need{PromptTokens: p.nPrompt, MaxTokens: p.billedOut(a.n), Unfit: p.err != nil}
	}
	req := tiers.Request{
		Mode: a.rt.mode, Tier: a.rt.tier, MaxLatency: a.rt.maxLatency, MaxCost: a.rt.maxCost,
		Remaining: sn.remaining, MaxTokens: out, Need: need,
		AllowTier: a.allowTier, AllowModel: f.allowModel, Hidden: f.hidden,
	}
	// A model already in the chain is failing for the tiers after it: it is tried only
	// once the entries before refused, and it was one of them. An adapter is its base
	// model's queue: its base's statistics, failing when its base is in the chain.
	stats := func(id string) tiers.Stats {
		m := modelOf(id)
		st := sn.stats(m.id, now)
		for i := range ch.entries {
			st.Failing = st.Failing || ch.entries[i].m == m
		}
		return st
	}
	nativeNeed := func(id string) tiers.Need {
		nd := need(id)
		nd.Unfit = nd.Unfit || !sn.native(modelOf(id))
		return nd
	}
	steps := 1
	if a.rt.steppable() {
		steps = tiers.NumTiers
	}
	for len(ch.entries) < steps {
		if len(ch.entries) > 0 && chainEnds(&req, ch.entries, sn.set, modelOf) {
			ch.lazy, ch.maxField = true, a.maxField
			ch.endReq = tiers.Request{Mode: req.Mode, Tier: req.Tier, AllowTier: req.AllowTier, Exclude: req.Exclude}
			break
		}
		var d tiers.Decision
		var err error
		if a.tools {
			// Only if no model whose template renders tools may serve the request does it
			// take one that reads them from the fallback system prompt (engine.Block.ToolsNative).
			native := req
			native.Need = nativeNeed
			d, err = tiers.Select(sn.set, native, stats)
		}
		if !a.tools || err != nil {
			d, err = tiers.Select(sn.set, req, stats)
		}
		if err != nil {
			if len(ch.entries) == 0 {
				return ch, noFit(a, f, sn, err)
			}
			if a.rt.steppable() {
				ch.noFit, ch.unfit, ch.maxField = err, unfitError(f, sn, err), a.maxField
			}
			break
		}
		m, ad := modelOf(d.Candidate.Model), sn.adapters[d.Candidate.Model]
		if len(ch.entries) == cap(ch.entries) { // the job's room is for one: the chain's own
			ch.entries = append(make([]choice, 0, tiers.NumTiers), ch.entries...)
		}
		ch.entries = append(ch.entries, choice{m: m, adapter: ad, tier: d.Tier, tierName: d.Tier.String(), plan: f.plan(m), cost: d.Cost, reserve: d.Cost})
		req.Exclude |= 1 << uint(d.Tier)
	}
	return ch, nil
}

// model is the model a tier's candidate id runs on: the model, or an adapter's base.
func (sn *snapshot) model(id string) *model {
	if ad := sn.adapters[id]; ad != nil {
		return ad.base
	}
	return sn.models[id]
}

// noFit answers a request no tier may serve, for the reason of the last tier tried.
func noFit(a *ask, f *asks, sn *snapshot, err error) *apiError {
	if aerr := unfitError(f, sn, err); aerr != nil {
		return aerr
	}
	return noFitAnswer(err, a.maxField)
}

// unfitError is, for a request over the limits of every model tried (err a
// tiers.NoFitError of ReasonUnfit), the limit of the last model tried that says
// which; else nil.
func unfitError(f *asks, sn *snapshot, err error) *apiError {
	nf := asNoFit(err)
	if nf == nil || nf.Reason != tiers.ReasonUnfit {
		return nil
	}
	for i := len(nf.Trace) - 1; i >= 0; i-- {
		if sk := nf.Trace[i]; sk.Reason == tiers.ReasonUnfit && sk.Model != "" {
			if aerr := f.plan(sn.model(sk.Model)).err; aerr != nil {
				return aerr
			}
		}
	}
	return nil
}

// noFitAnswer answers err, tiers.Select's refusal, by its reason; maxField is the
// request's field that limits the output.
func noFitAnswer(err error, maxField string) *apiError {
	nf := asNoFit(err)
	if nf == nil {
		return &apiError{status: 500, typ: "server_error", message: err.Error(), reason: "internal"}
	}
	msg := err.Error() + " [" + tiers.FormatTrace(nf.Trace) + "]"
	switch nf.Reason {
	case tiers.ReasonUnfit: // no model tried says which limit: the output's field
		return badRequest(maxField, msg)
	case tiers.ReasonBudget:
		return insufficientQuota(errors.New(msg))
	case tiers.ReasonForbidden:
		return &apiError{status: 403, typ: "invalid_request_error", code: "tier_not_allowed", param: "model", message: msg, reason: "forbidden"}
	case tiers.ReasonLoad, tiers.ReasonFailed:
		return &apiError{status: 503, typ: "server_error", code: "overloaded", message: msg, retry: 1, reason: "overloaded"}
	case tiers.ReasonCost:
		return &apiError{status: 400, typ: "invalid_request_error", code: "tier_unavailable", param: "lmlite.max_cost_usd", message: msg, reason: "tier_cost"}
	case tiers.ReasonLatency:
		return &apiError{status: 400, typ: "invalid_request_error", code: "tier_unavailable", param: "lmlite.max_latency_ms", message: msg, reason: "tier_latency"}
	default:
		return &apiError{status: 400, typ: "invalid_request_error", code: "tier_unavailable", param: "model", message: msg, reason: "tier_empty"}
	}
}

// asNoFit is err's tiers.NoFitError, or nil. tiers.Select returns it unwrapped: the
// type assertion takes it without the allocation errors.As's target costs.
func asNoFit(err error) *tiers.NoFitError {
	if nf, ok := err.(*tiers.NoFitError); ok {
		return nf
	}
	var nf *tiers.NoFitError
	if errors.As(err, &nf) {
		return nf
	}
	return nil
}
