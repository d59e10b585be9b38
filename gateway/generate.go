package gateway

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/internal/jsonenc"
	"github.com/lmlite/lmlite/policies"
	"github.com/lmlite/lmlite/tenancy"
	"github.com/lmlite/lmlite/tiers"
)

type kind int8

const (
	kindChat kind = iota
	kindCompletion
)

// job is one generation request on its way through the gateway.
type job struct {
	s      *Server
	kind   kind
	reqID  string
	start  time.Time
	keyID  string
	pol    *policies.Policy
	ticket *tenancy.Ticket

	chat *chatRequest
	comp *completionRequest
	p    *commonParams

	msgs        []engine.Message
	prompt      string // completions: the prompt
	promptBytes int
	sampling    engine.Sampling
	stop        []string
	maxTokens   int // requested; 0: none
	stream      bool
	usage       bool // stream_options.include_usage

	routed     bool // by tiers, not a concrete model
	mode       tiers.Mode
	tier       tiers.Tier
	maxLatency time.Duration
	maxCost    tiers.Money

	// the chosen model
	m         *model
	tierName  string
	tokens    []int32 // embedded prompt tokens
	nPrompt   int     // prompt tokens (embedded: exact; upstream: upper bound)
	outTokens int     // worst-case output tokens
}

// handleGenerate serves both completion endpoints: authenticate, parse, admit, route,
// reserve, run, settle, in the order of DESIGN.md's request path.
func (s *Server) handleGenerate(ctx *fasthttp.RequestCtx, reqID string, k kind) {
	if s.draining.Load() {
		s.writeError(ctx, reqID, &apiError{status: 503, typ: "server_error", code: "shutting_down",
			message: "the server is shutting down", reason: "draining", retry: 1})
		return
	}
	if n := s.inFlight.Add(1); n > int64(s.cfg.MaxInFlight) {
		s.inFlight.Add(-1)
		s.writeError(ctx, reqID, &apiError{status: 503, typ: "server_error", code: "overloaded",
			message: "the server is overloaded; retry later", reason: "overloaded", retry: 1})
		return
	}
	s.wg.Add(1)
	async := false
	defer func() {
		if !async {
			s.inFlight.Add(-1)
			s.wg.Done()
		}
	}()
	j := &job{s: s, kind: k, reqID: reqID, start: s.now()}
	keyID, pol, aerr := s.authenticate(ctx)
	if aerr != nil {
		s.writeError(ctx, reqID, aerr)
		return
	}
	j.keyID, j.pol = keyID, pol
	if aerr := j.parse(ctx); aerr != nil {
		s.writeError(ctx, reqID, aerr)
		return
	}
	if aerr := j.route(ctx); aerr != nil {
		s.writeError(ctx, reqID, aerr)
		return
	}
	// Quotas: requests/s, tokens/min (prompt estimate), concurrency.
	tk, err := s.ten.Admit(pol, j.start, j.estimate())
	if err != nil {
		var le *tenancy.LimitError
		if errors.As(err, &le) {
			s.writeError(ctx, reqID, &apiError{status: 429, typ: "requests", code: "rate_limit_exceeded",
				message: "rate limit reached for " + le.Reason + "; retry after " + le.RetryAfter.Round(time.Millisecond).String(),
				retry:   tenancy.RetryAfterSeconds(le.RetryAfter), reason: "rate_" + le.Reason})
			return
		}
		s.writeError(ctx, reqID, &apiError{status: 500, typ: "server_error", message: "admission failed: " + err.Error(), reason: "internal"})
		return
	}
	j.ticket = tk
	if j.run(ctx) {
		async = true // the stream writer releases the request
	}
}

// parse decodes and validates the body.
func (j *job) parse(ctx *fasthttp.RequestCtx) *apiError {
	body := ctx.PostBody()
	if len(body) > j.s.cfg.MaxBodyBytes {
		return badRequest("body", "the request body is larger than the limit of "+strconv.Itoa(j.s.cfg.MaxBodyBytes)+" bytes")
	}
	seed := rand.Uint64()
	var aerr *apiError
	if j.kind == kindChat {
		r := &chatRequest{}
		if aerr = decodeBody(body, r); aerr != nil {
			return aerr
		}
		if aerr = r.unsupported(); aerr != nil {
			return aerr
		}
		j.chat, j.p = r, &r.commonParams
		if j.msgs, j.promptBytes, aerr = r.messages(); aerr != nil {
			return aerr
		}
		if j.maxTokens, aerr = maxTokensOf(r.MaxTokens, r.MaxCompletionTokens, "max_tokens", "max_completion_tokens"); aerr != nil {
			return aerr
		}
	} else {
		r := &completionRequest{}
		if aerr = decodeBody(body, r); aerr != nil {
			return aerr
		}
		if aerr = r.unsupported(); aerr != nil {
			return aerr
		}
		j.comp, j.p = r, &r.commonParams
		if j.prompt, aerr = r.promptText(); aerr != nil {
			return aerr
		}
		j.promptBytes = len(j.prompt)
		if j.maxTokens, aerr = maxTokensOf(r.MaxTokens, nil, "max_tokens", ""); aerr != nil {
			return aerr
		}
		if r.MaxTokens == nil {
			j.maxTokens = 16 // OpenAI's default for completions
		}
	}
	if j.sampling, j.stop, aerr = j.p.sampling(seed); aerr != nil {
		return aerr
	}
	j.stream = j.p.Stream
	j.usage = j.p.StreamOptions != nil && j.p.StreamOptions.IncludeUsage
	return nil
}

// route reads the routing fields (body "lmlite", then headers) and resolves "model".
func (j *job) route(ctx *fasthttp.RequestCtx) *apiError {
	var f lmliteFields
	if j.p.LMLite != nil {
		f = *j.p.LMLite
	}
	h := &ctx.Request.Header
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
				return badRequest("X-LMLite-Max-Latency-Ms", "X-LMLite-Max-Latency-Ms must be a number")
			}
			f.MaxLatencyMS, latField = &x, "X-LMLite-Max-Latency-Ms"
		}
	}
	if f.MaxCostUSD == nil {
		if v := h.Peek("X-LMLite-Max-Cost-USD"); len(v) > 0 {
			x, err := strconv.ParseFloat(string(v), 64)
			if err != nil {
				return badRequest("X-LMLite-Max-Cost-USD", "X-LMLite-Max-Cost-USD must be a number")
			}
			f.MaxCostUSD, costField = &x, "X-LMLite-Max-Cost-USD"
		}
	}
	if f.MaxLatencyMS != nil {
		if !validFloat(*f.MaxLatencyMS) {
			return badRequest(latField, latField+" must be a number ≥ 0")
		}
		j.maxLatency = time.Duration(*f.MaxLatencyMS * float64(time.Millisecond))
	}
	if f.MaxCostUSD != nil {
		if !validFloat(*f.MaxCostUSD) {
			return badRequest(costField, costField+" must be a number ≥ 0")
		}
		j.maxCost = tiers.USD(*f.MaxCostUSD)
	}

	name := j.p.Model
	tierSet := false
	if t, ok := strings.CutPrefix(name, "tier:"); ok {
		tr, err := tiers.ParseTier(t)
		if err != nil {
			return &apiError{status: 400, typ: "invalid_request_error", code: "model_not_found", param: "model",
				message: "unknown tier in model '" + name + "': use tier:fast, tier:balanced, tier:deep or tier:max", reason: "bad_request"}
		}
		j.routed, j.mode, j.tier, tierSet = true, tiers.ModeFixed, tr, true
	}
	if f.Tier != "" {
		t, err := tiers.ParseTier(f.Tier)
		if err != nil {
			return badRequest(tierField, tierField+" must be fast, balanced, deep or max")
		}
		j.routed, j.mode, j.tier, tierSet = true, tiers.ModeFixed, t, true
	}
	if f.TierMode != "" {
		m, err := tiers.ParseMode(f.TierMode)
		if err != nil {
			return badRequest(modeField, modeField+" must be balanced, deep, max or fixed")
		}
		j.routed, j.mode = true, m
	}
	switch {
	case j.routed: // the tier fields decide; "model" is not a model then
	case name == "auto" || name == "default":
		j.routed, j.mode = true, j.pol.DefaultMode
	default:
		m, ok := j.s.models[name]
		if !ok {
			return &apiError{status: 400, typ: "invalid_request_error", code: "model_not_found", param: "model",
				message: "the model '" + name + "' does not exist", reason: "bad_request"}
		}
		if !j.pol.AllowsModel(name) {
			return &apiError{status: 403, typ: "invalid_request_error", code: "model_not_allowed", param: "model",
				message: "your plan does not allow the model '" + name + "'", reason: "forbidden"}
		}
		j.m = m
	}
	if j.routed && j.mode == tiers.ModeFixed {
		if !tierSet {
			return badRequest(tierField, "tier_mode fixed needs a tier (fast, balanced, deep or max)")
		}
		if !j.pol.AllowsTier(j.tier) {
			return &apiError{status: 403, typ: "invalid_request_error", code: "tier_not_allowed", param: tierField,
				message: "your plan does not allow the tier '" + j.tier.String() + "'", reason: "forbidden"}
		}
	}
	return nil
}

// estimate is the prompt-token estimate for quotas and tier selection before a model
// (and so a tokenizer) is chosen: about 3 bytes a token, plus template overhead.
func (j *job) estimate() int {
	return j.promptBytes/3 + 8*max(1, len(j.msgs))
}

// run routes the admitted request to a model, reserves its worst case, starts it and
// answers. It returns true when a stream writer took over the request.
func (j *job) run(ctx *fasthttp.RequestCtx) bool {
	s := j.s
	var exclude uint8
	budgetHit := false
	for attempt := 0; ; attempt++ {
		now := s.now()
		if j.routed {
			if aerr := j.selectTier(now, exclude); aerr != nil {
				if budgetHit && aerr.status == 503 { // the tiers left were excluded for money
					aerr = insufficientQuota(errors.New(aerr.message))
				}
				j.fail(ctx, aerr)
				return false
			}
		} else {
			j.tierName = j.m.tier
			if st := s.pred.Stats(j.m.id, now); st.MaxQueue > 0 && st.Queue >= st.MaxQueue {
				j.fail(ctx, &apiError{status: 503, typ: "server_error", code: "overloaded", retry: 1, reason: "overloaded",
					message: "the model '" + j.m.id + "' is overloaded (" + strconv.Itoa(st.Queue) + " requests queued); retry later"})
				return false
			}
		}
		if aerr := j.prepare(); aerr != nil {
			j.fail(ctx, aerr)
			return false
		}
		cost := j.m.price.Cost(j.nPrompt, j.outTokens)
		if err := j.ticket.Reserve(now, cost); err != nil {
			if errors.Is(err, tenancy.ErrInsufficientQuota) && j.routed && j.mode != tiers.ModeFixed && attempt < tiers.NumTiers {
				// The exact worst case (or a concurrent request's reservation) does not
				// fit the tier the estimate chose: step down.
				exclude |= 1 << uint(j.tierIndex())
				budgetHit = true
				continue
			}
			j.fail(ctx, insufficientQuota(err))
			return false
		}
		if j.m.upstream != nil {
			done, failed := j.runUpstream(ctx)
			if failed == nil {
				return done
			}
			if j.routed && j.mode != tiers.ModeFixed && attempt < tiers.NumTiers {
				exclude |= 1 << uint(j.tierIndex())
				continue
			}
			j.fail(ctx, failed)
			return false
		}
		st, cancel, err := j.startEmbedded()
		if err != nil {
			retryable := errors.Is(err, engine.ErrQueueFull) || errors.Is(err, engine.ErrNoMemory) || errors.Is(err, engine.ErrClosed)
			if retryable {
				s.pred.Fail(j.m.id, s.now())
			}
			if retryable && j.routed && j.mode != tiers.ModeFixed && attempt < tiers.NumTiers {
				exclude |= 1 << uint(j.tierIndex())
				continue
			}
			j.fail(ctx, engineError(err))
			return false
		}
		return j.respondEmbedded(ctx, st, cancel)
	}
}

func (j *job) tierIndex() tiers.Tier {
	t, _ := tiers.ParseTier(j.tierName)
	return t
}

func insufficientQuota(err error) *apiError {
	return &apiError{status: 429, typ: "insufficient_quota", code: "insufficient_quota",
		message: "You exceeded your current quota: the budget of your plan is spent (" + err.Error() + ")",
		reason:  "budget"}
}

// selectTier runs the tier router.
func (j *job) selectTier(now time.Time, exclude uint8) *apiError {
	s := j.s
	out := j.maxTokens
	if out == 0 {
		out = 256 // unknown: a typical answer for latency and cost prediction
	}
	req := tiers.Request{
		Mode: j.mode, Tier: j.tier, MaxLatency: j.maxLatency, MaxCost: j.maxCost,
		Remaining: j.ticket.Remaining(now), PromptTokens: j.estimate(), MaxTokens: out,
		AllowTier: j.pol.AllowedTiers(), AllowModel: j.pol.AllowsModel, Exclude: exclude,
	}
	d, err := tiers.Select(s.set, req, func(m string) tiers.Stats { return s.pred.Stats(m, now) })
	if err != nil {
		var nf *tiers.NoFitError
		if !errors.As(err, &nf) {
			return &apiError{status: 500, typ: "server_error", message: err.Error(), reason: "internal"}
		}
		trace := tiers.FormatTrace(nf.Trace)
		msg := err.Error() + " [" + trace + "]"
		switch nf.Reason {
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
	j.m = s.models[d.Candidate.Model]
	j.tierName = d.Tier.String()
	return nil
}

// prepare renders and tokenizes the prompt for the chosen model and fixes the output
// limit.
func (j *job) prepare() *apiError {
	m := j.m
	if m.upstream != nil {
		j.tokens = nil
		j.nPrompt = j.promptBytes + 16*max(1, len(j.msgs)) // an upper bound: a token is ≥ 1 byte
	} else {
		var toks []int32
		var err error
		if j.kind == kindChat {
			toks, err = j.s.eng.ChatTokens(m.id, j.msgs) // message texts stay plain text
		} else {
			toks, err = j.s.eng.Tokenize(m.id, j.prompt)
		}
		if err != nil {
			return engineError(err)
		}
		j.tokens, j.nPrompt = toks, len(toks)
	}
	field := "max_tokens"
	if j.chat != nil && j.chat.MaxCompletionTokens != nil {
		field = "max_completion_tokens"
	}
	j.outTokens = j.maxTokens
	if maxLen := j.s.limit(m); maxLen > 0 {
		if j.maxTokens > maxLen {
			return badRequest(field, field+" is "+strconv.Itoa(j.maxTokens)+", over the model's limit of "+strconv.Itoa(maxLen)+" tokens")
		}
		if m.upstream == nil {
			room := maxLen - j.nPrompt
			if room < 1 {
				p := "messages"
				if j.kind == kindCompletion {
					p = "prompt"
				}
				return badRequest(p, "the prompt is "+strconv.Itoa(j.nPrompt)+" tokens, over the model's limit of "+strconv.Itoa(maxLen))
			}
			if j.maxTokens > room {
				return badRequest(field, field+" is "+strconv.Itoa(j.maxTokens)+", but the prompt leaves "+strconv.Itoa(room)+" of the model's "+strconv.Itoa(maxLen)+" tokens")
			}
			if j.outTokens == 0 {
				j.outTokens = room
			}
		} else if j.outTokens == 0 {
			j.outTokens = maxLen
		}
	}
	if j.outTokens == 0 {
		j.outTokens = 4096 // no limit known: the worst case for the budget
	}
	return nil
}

func engineError(err error) *apiError {
	switch {
	case errors.Is(err, engine.ErrTooLong):
		return badRequest("max_tokens", "the request is longer than the model's limit: "+err.Error())
	case errors.Is(err, engine.ErrUnknownModel):
		return &apiError{status: 400, typ: "invalid_request_error", code: "model_not_found", param: "model", message: err.Error(), reason: "bad_request"}
	case errors.Is(err, engine.ErrQueueFull), errors.Is(err, engine.ErrNoMemory), errors.Is(err, engine.ErrClosed):
		return &apiError{status: 503, typ: "server_error", code: "overloaded", message: err.Error(), retry: 1, reason: "overloaded"}
	}
	return &apiError{status: 500, typ: "server_error", message: err.Error(), reason: "internal"}
}

// fail answers an error after admission and settles the ticket with no usage.
func (j *job) fail(ctx *fasthttp.RequestCtx, e *apiError) {
	model := ""
	if j.m != nil {
		model = j.m.id
	}
	j.settle(tenancy.Entry{Status: e.status, Model: model}, nil)
	j.s.writeError(ctx, j.reqID, e)
}

// settle records the request's usage (waiting for the ledger group) and its metrics.
func (j *job) settle(e tenancy.Entry, u *engine.Usage) {
	s := j.s
	e.Time = s.now()
	e.RequestID, e.KeyID, e.Tier = j.reqID, j.keyID, j.tierName
	e.Latency = e.Time.Sub(j.start)
	if j.m != nil && e.Model == "" {
		e.Model = j.m.id
	}
	if j.m != nil && (e.PromptTokens > 0 || e.CompletionTokens > 0) {
		e.Cost = j.m.price.Cost(e.PromptTokens, e.CompletionTokens)
	}
	charged, err := j.ticket.Settle(e)
	if err != nil {
		s.log.Error("ledger", "request_id", j.reqID, "error", err)
	}
	s.metrics.observe(j, e, charged, u)
	if !s.log.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	s.log.Info("request", "request_id", j.reqID, "tenant", j.pol.Tenant, "model", e.Model, "tier", e.Tier,
		"status", e.Status, "prompt_tokens", e.PromptTokens, "completion_tokens", e.CompletionTokens,
		"cost_usd", charged.Dollars(), "latency", e.Latency)
}

// startEmbedded submits the request to the engine.
func (j *job) startEmbedded() (*engine.Stream, context.CancelFunc, error) {
	salt := j.pol.Tenant
	if j.pol.SharePrefix {
		salt = ""
	}
	req := engine.Request{
		Prompt: j.tokens, MaxTokens: j.outTokens, Sampling: j.sampling, Stop: j.stop,
		Tenant: j.pol.Tenant, Weight: j.pol.Weight, Priority: engine.Interactive, CacheSalt: salt,
	}
	gctx, cancel := context.WithCancel(context.Background())
	j.s.pred.Begin(j.m.id)
	st, err := j.s.eng.Generate(gctx, j.m.id, req)
	if err != nil {
		j.s.pred.End(j.m.id)
		cancel()
		return nil, nil, err
	}
	return st, cancel, nil
}

// setRouteHeaders says which tier and model serve.
func (j *job) setRouteHeaders(ctx *fasthttp.RequestCtx) {
	if j.tierName != "" {
		ctx.Response.Header.Set("X-LMLite-Tier", j.tierName)
	}
	ctx.Response.Header.Set("X-LMLite-Model", j.m.id)
}

func finishReason(f string) string {
	if f == engine.FinishLength {
		return "length"
	}
	return "stop"
}

func statusOf(u engine.Usage, err error) int {
	switch {
	case u.FinishReason == engine.FinishCancelled || errors.Is(err, context.Canceled):
		return 499 // the client went away
	case err != nil:
		return 500
	}
	return 200
}

// respondEmbedded answers from an engine stream.
func (j *job) respondEmbedded(ctx *fasthttp.RequestCtx, st *engine.Stream, cancel context.CancelFunc) bool {
	j.setRouteHeaders(ctx)
	id := j.newID()
	if j.stream {
		ctx.SetContentType("text/event-stream")
		ctx.Response.Header.Set("Cache-Control", "no-cache")
		ctx.Response.Header.Set("X-Accel-Buffering", "no")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			defer func() {
				j.s.inFlight.Add(-1)
				j.s.wg.Done()
			}()
			j.streamEmbedded(w, st, cancel, id)
		})
		return true
	}
	var text strings.Builder
	conn := ctx.Conn()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	tokens := st.Tokens
	for tokens != nil {
		select {
		case tok, ok := <-tokens:
			if !ok {
				tokens = nil
				continue
			}
			text.WriteString(tok.Text)
		case <-tick.C:
			if connClosed(conn) {
				cancel() // the client went away: stop generating
			}
		}
	}
	u, err := st.Wait(context.Background())
	cancel()
	j.s.pred.End(j.m.id)
	j.observeLatency(u, err)
	status := statusOf(u, err)
	j.settle(tenancy.Entry{Status: status, Finish: u.FinishReason, PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens}, &u)
	if err != nil && status != 499 {
		j.s.writeError(ctx, j.reqID, &apiError{status: 500, typ: "server_error", message: "generation failed: " + err.Error(), reason: "internal"})
		return false
	}
	b := make([]byte, 0, 256+text.Len())
	b = j.appendResponse(b, id, text.String(), finishReason(u.FinishReason), u)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
	return false
}

// observeLatency feeds the tier router's predictor. The engine's time to first
// token counts from submission, so it holds the time the request queued; the
// predictor wants the service time alone (it adds the queue ahead from the queue
// depth), else a queue once seen would be counted twice in every prediction.
func (j *job) observeLatency(u engine.Usage, err error) {
	if err == nil && u.FinishReason != engine.FinishCancelled {
		ttft := max(u.TimeToFirstToken-u.QueueTime, 0)
		j.s.pred.Observe(j.m.id, ttft, u.TimePerOutputToken)
	}
}

// streamEmbedded writes the server-sent events of a stream, flushing each token.
func (j *job) streamEmbedded(w *bufio.Writer, st *engine.Stream, cancel context.CancelFunc, id string) {
	buf := make([]byte, 0, 512)
	gone := false
	write := func(b []byte) {
		if gone {
			return
		}
		w.Write(b)
		if w.Flush() != nil {
			gone = true
			cancel() // the client went away: stop generating
		}
	}
	if j.kind == kindChat {
		buf = j.appendChunk(buf[:0], id, "", true, "")
		write(buf)
	}
	for tok := range st.Tokens {
		if tok.Text == "" || gone {
			continue
		}
		buf = j.appendChunk(buf[:0], id, tok.Text, false, "")
		write(buf)
	}
	u, err := st.Wait(context.Background())
	cancel()
	j.s.pred.End(j.m.id)
	j.observeLatency(u, err)
	status := statusOf(u, err)
	if gone {
		status = 499
	}
	j.settle(tenancy.Entry{Status: status, Finish: u.FinishReason, PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens}, &u)
	if err != nil && status != 499 {
		buf = append(buf[:0], "data: "...)
		buf = appendErrorJSON(buf, &apiError{typ: "server_error", message: "generation failed: " + err.Error()})
		buf = append(buf, "\n\n"...)
		write(buf)
	} else {
		buf = j.appendChunk(buf[:0], id, "", false, finishReason(u.FinishReason))
		write(buf)
		if j.usage {
			buf = j.appendUsageChunk(buf[:0], id, u)
			write(buf)
		}
	}
	write([]byte("data: [DONE]\n\n"))
}

func (j *job) newID() string {
	p := "chatcmpl-"
	if j.kind == kindCompletion {
		p = "cmpl-"
	}
	return p + strings.TrimPrefix(j.reqID, "req_")
}

func (j *job) appendHead(b []byte, id, object string) []byte {
	b = append(b, `{"id":`...)
	b = jsonenc.AppendString(b, id)
	b = append(b, `,"object":"`...)
	b = append(b, object...)
	b = append(b, `","created":`...)
	b = strconv.AppendInt(b, j.start.Unix(), 10)
	b = append(b, `,"model":`...)
	b = jsonenc.AppendString(b, j.m.id)
	return b
}

// appendUsage appends OpenAI's usage object; prompt_tokens_details.cached_tokens is
// the prompt tokens the prefix cache served.
func appendUsage(b []byte, u engine.Usage) []byte {
	b = append(b, `"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(u.PromptTokens), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(u.CompletionTokens), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(u.PromptTokens+u.CompletionTokens), 10)
	b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
	b = strconv.AppendInt(b, int64(u.CachedTokens), 10)
	return append(b, "}}"...)
}

// appendResponse appends a whole (non-streamed) response body.
func (j *job) appendResponse(b []byte, id, text, finish string, u engine.Usage) []byte {
	if j.kind == kindChat {
		b = j.appendHead(b, id, "chat.completion")
		b = append(b, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)
		b = jsonenc.AppendString(b, text)
		b = append(b, `,"refusal":null},"logprobs":null,"finish_reason":"`...)
	} else {
		b = j.appendHead(b, id, "text_completion")
		b = append(b, `,"choices":[{"index":0,"text":`...)
		b = jsonenc.AppendString(b, text)
		b = append(b, `,"logprobs":null,"finish_reason":"`...)
	}
	b = append(b, finish...)
	b = append(b, `"}],`...)
	b = appendUsage(b, u)
	return append(b, '}')
}

// appendChunk appends one SSE event of a stream: the role (first), a text delta, or
// the finish reason (last).
func (j *job) appendChunk(b []byte, id, text string, role bool, finish string) []byte {
	b = append(b, "data: "...)
	if j.kind == kindChat {
		b = j.appendHead(b, id, "chat.completion.chunk")
		b = append(b, `,"choices":[{"index":0,"delta":{`...)
		switch {
		case role:
			b = append(b, `"role":"assistant","content":""`...)
		case finish == "":
			b = append(b, `"content":`...)
			b = jsonenc.AppendString(b, text)
		}
		b = append(b, `},"logprobs":null,"finish_reason":`...)
	} else {
		b = j.appendHead(b, id, "text_completion")
		b = append(b, `,"choices":[{"index":0,"text":`...)
		b = jsonenc.AppendString(b, text)
		b = append(b, `,"logprobs":null,"finish_reason":`...)
	}
	if finish == "" {
		b = append(b, "null"...)
	} else {
		b = append(b, '"')
		b = append(b, finish...)
		b = append(b, '"')
	}
	b = append(b, "}]"...)
	if j.usage {
		b = append(b, `,"usage":null`...)
	}
	return append(b, "}\n\n"...)
}

func (j *job) appendUsageChunk(b []byte, id string, u engine.Usage) []byte {
	b = append(b, "data: "...)
	obj := "chat.completion.chunk"
	if j.kind == kindCompletion {
		obj = "text_completion"
	}
	b = j.appendHead(b, id, obj)
	b = append(b, `,"choices":[],`...)
	b = appendUsage(b, u)
	return append(b, "}\n\n"...)
}

// connClosed reports whether the client closed conn, by peeking at the socket without
// consuming anything (the handler owns the connection while it runs).
func connClosed(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	var buf [1]byte
	rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		closed = n == 0 && err == nil
		return true // never wait
	})
	return closed
}
