package gateway

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/grammar"
	"github.com/lmlite/lmlite/engine/toolcall"
	"github.com/lmlite/lmlite/money"
	"github.com/lmlite/lmlite/policies"
	"github.com/lmlite/lmlite/tiers"
)

// route is where a request may go: a model by name, or the tier router's mode (and
// tier, for ModeFixed) with the request's latency and cost budgets.
type route struct {
	named      *model   // a model by name; nil: the tier router chooses
	adapter    *adapter // the LoRA adapter named as the model (named is its base); nil: none
	mode       tiers.Mode
	tier       tiers.Tier // for tiers.ModeFixed
	maxLatency time.Duration
	maxCost    money.Money
	keepGiven  bool          // lmlite.keep_alive is given
	keepAlive  time.Duration // its value (keepalive.go decides what the engine gets)
}

// steppable reports whether the decision's chain may step down to other tiers after
// the first.
func (rt *route) steppable() bool { return rt.named == nil && rt.mode != tiers.ModeFixed }

// plan is a request's worst case on one model, known before anything is reserved:
// the prompt as it will be sent (embedded models: its tokens) and the output tokens
// the budget must cover. err says the request does not fit the model (a 400 naming
// the limit) or could not be prepared for it.
type plan struct {
	tokens  []int32 // embedded: the prompt's tokens
	nPrompt int     // prompt tokens (embedded: exact; upstream: an upper bound)
	out     int     // worst-case output tokens (of each choice)
	predict int     // worst-case rejected prediction tokens billed (of each choice: predictionBound)
	err     *apiError

	// Embedded models: the grammar that constrains the output (nil: none) and the
	// tool-call syntax to parse (when parse is set).
	gram   *grammar.Grammar
	syntax toolcall.Syntax
	parse  bool
}

// billedOut is the completion tokens the plan's n choices may be billed at worst:
// their output and their rejected prediction tokens (prediction.go).
func (p *plan) billedOut(n int) int { return (p.out + p.predict) * n }

// planned is one model's plan, memoized on the job: each model's tokenizer runs at
// most once per request, however many tiers list the model or attempts it takes.
type planned struct {
	m *model
	p plan
}

// choice is an entry of the decision's chain: the model, its plan and its worst case.
type choice struct {
	m        *model
	adapter  *adapter   // the LoRA adapter applied on m (the one named, or a tier's candidate); nil: none
	tier     tiers.Tier // meaningful when tierName != ""
	tierName string     // "" for a model in no tier
	plan
	cost    money.Money // the worst case on the model
	reserve money.Money // what the shell reserves before it runs the entry: the worst case
}

// routeOf reads the routing fields (body "lmlite", then headers) and resolves
// "model" for the tenant's policy: a model by name, or where the tier router may go.
func (s *Server) routeOf(h *fasthttp.RequestHeader, in *input, pol *policies.Policy) (rt route, aerr *apiError) {
	var f lmliteFields
	if in.p.LMLite != nil {
		f = *in.p.LMLite
	}
	if f.KeepAlive != nil {
		d, err := time.ParseDuration(*f.KeepAlive)
		if err != nil || d < 0 {
			return rt, badRequest("lmlite.keep_alive", `lmlite.keep_alive must be a non-negative duration such as "30s" or "5m"`)
		}
		rt.keepGiven, rt.keepAlive = true, d
	}
	modeField, tierField := "lmlite.tier_mode", "lmlite.tier"
	if f.TierMode == "" {
		if v := h.Peek("X-LMLite-Tier-Mode"); len(v) > 0 {
			f.TierMode, modeField = string(v), "X-LMLite-Tier-Mode"
		}
	}
	if f.Tier == "" {
		if v := h.Peek("X-LMLite-Tier"); len(v) > 0 {
			f.Tier, tierField = string(v), "X-LMLite-Tier"
		}
	}
	latField, costField := "lmlite.max_latency_ms", "lmlite.max_cost_usd"
	if f.MaxLatencyMS == nil {
		if v := h.Peek("X-LMLite-Max-Latency-Ms"); len(v) > 0 {
			x, err := strconv.ParseFloat(string(v), 64)
			if err != nil {
				return rt, badRequest("X-LMLite-Max-Latency-Ms", "X-LMLite-Max-Latency-Ms must be a number")
			}
			f.MaxLatencyMS, latField = &x, "X-LMLite-Max-Latency-Ms"
		}
	}
	if f.MaxCostUSD == nil {
		if v := h.Peek("X-LMLite-Max-Cost-USD"); len(v) > 0 {
			x, err := strconv.ParseFloat(string(v), 64)
			if err != nil {
				return rt, badRequest("X-LMLite-Max-Cost-USD", "X-LMLite-Max-Cost-USD must be a number")
			}
			f.MaxCostUSD, costField = &x, "X-LMLite-Max-Cost-USD"
		}
	}
	if f.MaxLatencyMS != nil {
		if !validFloat(*f.MaxLatencyMS) {
			return rt, badRequest(latField, latField+" must be a number ≥ 0")
		}
		rt.maxLatency = time.Duration(*f.MaxLatencyMS * float64(time.Millisecond))
	}
	if f.MaxCostUSD != nil {
		if !validFloat(*f.MaxCostUSD) {
			return rt, badRequest(costField, costField+" must be a number ≥ 0")
		}
		rt.maxCost = money.USD(*f.MaxCostUSD)
	}

	name := in.p.Model
	routed, tierSet := false, false
	if t, ok := strings.CutPrefix(name, "tier:"); ok {
		tr, err := tiers.ParseTier(t)
		if err != nil {
			return rt, &apiError{status: 400, typ: "invalid_request_error", code: "model_not_found", param: "model",
				message: "unknown tier in model '" + name + "': use tier:fast, tier:balanced, tier:deep or tier:max", reason: "bad_request"}
		}
		routed, rt.mode, rt.tier, tierSet = true, tiers.ModeFixed, tr, true
	}
	if f.Tier != "" {
		t, err := tiers.ParseTier(f.Tier)
		if err != nil {
			return rt, badRequest(tierField, tierField+" must be fast, balanced, deep or max")
		}
		routed, rt.mode, rt.tier, tierSet = true, tiers.ModeFixed, t, true
	}
	if f.TierMode != "" {
		m, err := tiers.ParseMode(f.TierMode)
		if err != nil {
			return rt, badRequest(modeField, modeField+" must be balanced, deep, max or fixed")
		}
		routed, rt.mode = true, m
	}
	switch {
	case routed: // the tier fields decide; "model" is not a model then
	case name == "auto" || name == "default":
		routed, rt.mode = true, pol.DefaultMode
	default:
		if a := s.adapterFor(pol, name); a != nil {
			rt.named, rt.adapter = a.base, a
			break
		}
		if !s.allowed(pol, name) {
			return rt, s.modelNotFound(pol, name)
		}
		rt.named = s.models[name]
	}
	if routed && rt.mode == tiers.ModeFixed {
		if !tierSet {
			return rt, badRequest(tierField, "tier_mode fixed needs a tier (fast, balanced, deep or max)")
		}
		if !pol.AllowsTier(rt.tier) {
			return rt, &apiError{status: 403, typ: "invalid_request_error", code: "tier_not_allowed", param: tierField,
				message: "your plan does not allow the tier '" + rt.tier.String() + "'", reason: "forbidden"}
		}
	}
	return rt, nil
}

// planFor is the request's plan on model m, made once per model.
func (j *job) planFor(m *model) plan {
	for i := range j.plans {
		if j.plans[i].m == m {
			return j.plans[i].p
		}
	}
	p := j.makePlan(m)
	j.plans = append(j.plans, planned{m: m, p: p})
	return p
}

// makePlan renders and tokenizes the prompt for model m and fixes the output limit.
func (j *job) makePlan(m *model) plan {
	var p plan
	if m.upstream != nil {
		p.nPrompt = j.in.promptBytes + 16*max(1, len(j.in.msgs)) // an upper bound: a token is ≥ 1 byte
	} else {
		if p.err = j.planFeatures(m, &p); p.err != nil {
			return p
		}
		if p.err = j.checkTokenIDs(m); p.err != nil {
			return p
		}
		toks, aerr := j.promptTokens(m)
		if aerr != nil {
			p.err = aerr
			return p
		}
		p.tokens, p.nPrompt = toks, len(toks)
	}
	field, want := j.in.maxField, j.in.maxTokens
	p.out, p.predict = want, predictionBound(j.in.prediction)
	if maxLen := j.s.limit(m); maxLen > 0 {
		if want > maxLen {
			p.err = badRequest(field, field+" is "+strconv.Itoa(want)+", over the model's limit of "+strconv.Itoa(maxLen)+" tokens")
			return p
		}
		if m.upstream == nil {
			room := maxLen - p.nPrompt
			if room < 1 {
				p.err = contextLengthExceeded(j.in.promptField(), "the prompt is "+strconv.Itoa(p.nPrompt)+" tokens, over the model's limit of "+strconv.Itoa(maxLen))
				return p
			}
			if want > room {
				p.err = badRequest(field, field+" is "+strconv.Itoa(want)+", but the prompt leaves "+strconv.Itoa(room)+" of the model's "+strconv.Itoa(maxLen)+" tokens")
				return p
			}
			if p.out == 0 && !j.in.scoreOnly {
				p.out = room
			}
		} else if p.out == 0 && !j.in.scoreOnly {
			p.out = maxLen
		}
	}
	if p.out == 0 && !j.in.scoreOnly {
		p.out = 4096 // no limit known: the worst case for the budget
	}
	return p
}

// promptTokens renders (chat) and tokenizes the prompt for an embedded model. With
// an engine that can (CappedTokenizer) and a model whose limit is known, the
// tokenizer gives up once the prompt is over the longest prompt the model takes
// (its limit less one output token): a prompt far over it is a 400
// context_length_exceeded for about the limit's work, not the prompt's.
func (j *job) promptTokens(m *model) ([]int32, *apiError) {
	var toks []int32
	var err error
	f := &j.in.feat
	ct, capped := j.s.eng.(CappedTokenizer)
	limit := j.s.limit(m) - 1
	if j.in.promptIDs != nil { // the prompt is tokens already (checkTokenIDs)
		if limit > 0 && len(j.in.promptIDs) > limit {
			err = engine.ErrPromptOverLimit
		} else {
			toks = j.in.promptIDs
		}
	}
	switch {
	case toks != nil || err != nil:
	case capped && limit > 0 && j.in.kind == kindChat:
		toks, err = ct.ChatTokensCapped(m.id, j.in.msgs, f.Tools, limit) // every text of the request stays plain text
	case capped && limit > 0:
		toks, err = ct.TokenizeCapped(m.id, j.in.prompt, limit)
	default:
		fe, ok := j.s.eng.(Features)
		switch {
		case ok && j.in.kind == kindChat && (len(f.Tools) > 0 || f.ToolMsgs):
			toks, err = fe.ChatTokensTools(m.id, j.in.msgs, f.Tools) // every text of the request stays plain text
		case j.in.kind == kindChat:
			toks, err = j.s.eng.ChatTokens(m.id, j.in.msgs) // message texts stay plain text
		default:
			toks, err = j.s.eng.Tokenize(m.id, j.in.prompt)
		}
	}
	if errors.Is(err, engine.ErrPromptOverLimit) {
		return nil, contextLengthExceeded(j.in.promptField(), "the prompt is more than "+strconv.Itoa(limit)+
			" tokens, over the model's limit of "+strconv.Itoa(limit+1))
	}
	if err != nil {
		return nil, engineError(err)
	}
	return toks, nil
}

// contextLengthExceeded answers a prompt over a model's limit, as OpenAI does.
func contextLengthExceeded(param, msg string) *apiError {
	return &apiError{status: 400, typ: "invalid_request_error", code: "context_length_exceeded", param: param, message: msg, reason: "bad_request"}
}

// choose decides where the request goes (decide) and takes the chain's first entry,
// for a request that needs only the model it would run on (count_tokens,
// input_tokens): nothing is reserved or run.
func (j *job) choose(now time.Time) *apiError {
	ch, aerr := j.decide(now)
	if aerr != nil {
		return aerr
	}
	j.c = ch.entries[0]
	return nil
}

// decide is the request's routing decision (decide.go), made once, with everything
// known up front: its plans (each model's tokenizer run at most once), the tenant's
// money left and the models' live statistics.
func (j *job) decide(now time.Time) (chain, *apiError) {
	s := j.s
	a := ask{
		rt: j.rt, n: j.in.feat.N, maxTokens: j.in.maxTokens, maxField: j.in.maxField, tools: j.needsTools(),
		allowTier: j.pol.AllowedTiers(),
	}
	f := asks{allowModel: j.allowsCandidate, hidden: j.hiddenCandidate, plan: j.planFor}
	sn := snapshot{set: s.set, models: s.models, adapters: s.adapters, remaining: j.remaining(now), stats: s.pred.Stats, native: j.toolsNative}
	s.decisions.Add(1)
	return decide(&a, &f, &sn, now, j.chainBuf[:0])
}

// allowsCandidate reports whether the job's policy may use the tier candidate id
// (a model or an adapter).
func (j *job) allowsCandidate(id string) bool { return j.s.allowsCandidate(j.pol, id) }

// hiddenCandidate reports whether the tier candidate id does not exist for the
// job's tenant: another tenant's private adapter.
func (j *job) hiddenCandidate(id string) bool {
	a := j.s.adapters[id]
	return a != nil && !a.visible(j.pol.Tenant)
}

// NativeTools is an optional ability of an Engine (the Block and the workers have
// it): whether a model's chat template renders tools itself (engine.Block.ToolsNative).
type NativeTools interface {
	ToolsNative(modelID string) bool
}

// needsTools reports whether the request gives tools the model may call.
func (j *job) needsTools() bool {
	f := &j.in.feat
	return len(f.Tools) > 0 && f.Choice != toolNone
}

// toolsNative reports whether model m takes tools as its template means them: an
// upstream model does (its server renders them); an embedded one when the engine
// says its template renders them (an engine that cannot say: assumed).
func (j *job) toolsNative(m *model) bool {
	if m.upstream != nil {
		return true
	}
	nt, ok := j.s.eng.(NativeTools)
	return !ok || nt.ToolsNative(m.id)
}

func insufficientQuota(err error) *apiError {
	return &apiError{status: 429, typ: "insufficient_quota", code: "insufficient_quota",
		message: "You exceeded your current quota: the budget of your plan is spent (" + err.Error() + ")",
		reason:  "budget"}
}
