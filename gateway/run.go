package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/engine/chat"
	"github.com/lmlite/lmlite/gateway/core"
	"github.com/lmlite/lmlite/internal/sse"
	"github.com/lmlite/lmlite/ledger"
	"github.com/lmlite/lmlite/money"
	"github.com/lmlite/lmlite/policies"
	"github.com/lmlite/lmlite/tenancy"
)

// job is one generation request on its way through the gateway (see doc.go for its
// path): who asks, what they asked (input), where it may go (route), each model's
// worst case (plans, made once), where the current attempt runs (choice), and the
// ticket that holds its quota slot and money.
type job struct {
	s        *Server
	reqID    string // the server's id (Server.requestID; a batch line's id for a line)
	clientID string // the client's X-Request-Id, if sane: a label in the ledger, never matched
	start    time.Time
	keyID    string
	pol      *policies.Policy
	in       input
	rt       route
	plans    []planned
	c        choice
	ticket   *tenancy.Ticket
	line     *lineOutcome // a batch line (batches.go): batch priority, its usage and cost
	body     []byte       // the body of a request that entered the core directly (core.go: runCore)
	res      *coreResult  // where its answer goes (nil: the HTTP response, ctx)
	prefix   uint64       // the prompt's prefix key (prefix.go), with a registry only; 0: none

	codec codec   // the request's wire format: decodes its body, renders its answer and errors
	out   output  // renders this request's result (made when the model took it: startOutput)
	meta  outMeta // what out knows of the request

	refusal string         // the apiError reason that failed the request after admission (usage.go)
	carry   *carriedSettle // its settlement kept for its stored response's ledger write (responses_carry.go); nil: not carried (a pointer: the job stays in the 1,536-byte size class)

	kept    bool          // its engine request is counted in s.keeps (keepalive.go) until settled
	keepOwn time.Duration // how long its own use keeps its model (decideKeepAlive)

	planBuf  [2]planned     // plans' first backing array: most requests plan one model
	chainBuf [1]choice      // the decision's entries' backing array: most chains are one (a longer one takes its own; room for four put the job in the 2,048-byte size class, not 1,536)
	whole    whole          // the request's whole result (not streamed, or for a finisher)
	one      [1]wholeChoice // the whole's choices of a plain request (respondEmbedded)
}

// handleGenerate serves a generation endpoint in the wire format of its codec c
// (codec.go): authenticate, decode, route, admit, then run (decide, reserve, start,
// answer, settle), in the order of DESIGN.md's request path. Every error it or the
// job answers is in c's shape.
func (s *Server) handleGenerate(ctx *fasthttp.RequestCtx, reqID string, c codec) {
	j := s.enter(ctx, reqID, c)
	if j == nil {
		return
	}
	async := false
	defer func() {
		if !async {
			s.leave()
		}
	}()
	async = j.serve(ctx, c) // true: the stream writer releases the request
}

// enter takes a request in the wire format of c into the server: 503 while draining
// or above max_in_flight, then its key authenticated and its tenant admitted from
// the header alone (before the body is decoded: admitTenant). It returns the job,
// holding one in-flight slot the caller gives back with leave; nil when the request
// was answered (refused) here.
func (s *Server) enter(ctx *fasthttp.RequestCtx, reqID string, c codec) *job {
	if s.draining.Load() {
		s.writeErrorIn(ctx, reqID, c, &apiError{status: 503, typ: "server_error", code: "shutting_down",
			message: "the server is shutting down", reason: "draining", retry: 1})
		return nil
	}
	if n := s.inFlight.Add(1); n > int64(s.cfg.MaxInFlight) {
		s.inFlight.Add(-1)
		s.writeErrorIn(ctx, reqID, c, &apiError{status: 503, typ: "server_error", code: "overloaded",
			message: "the server is overloaded; retry later", reason: "overloaded", retry: 1})
		return nil
	}
	s.wg.Add(1)
	j := &job{s: s, reqID: reqID, clientID: string(clientRequestID(ctx)), start: s.now(), codec: c}
	j.plans = j.planBuf[:0]
	keyID, pol, aerr := s.authenticateFor(ctx, c)
	if aerr != nil {
		s.writeErrorIn(ctx, reqID, c, aerr)
		s.leave()
		return nil
	}
	j.keyID, j.pol = keyID, pol
	if s.admitsBeforeBody(ctx) && !j.admitTenant(ctx, s.now(), 0) {
		s.dropBody(ctx) // refused undecoded
		s.leave()
		return nil
	}
	return j
}

// leave gives back the in-flight slot enter took.
func (s *Server) leave() {
	s.inFlight.Add(-1)
	s.wg.Done()
}

// decode reads the body into j.in with c; false when the request was refused.
func (j *job) decode(ctx *fasthttp.RequestCtx, c codec) bool {
	s := j.s
	body := j.requestBody(ctx)
	if len(body) > s.cfg.MaxBodyBytes { // fasthttp refuses these before; Handler() alone does not
		j.reject(ctx, s.tooLarge())
		return false
	}
	s.decoded.Add(1)
	if aerr := c.decode(&j.in, body, j.pol.Tenant); aerr != nil {
		j.reject(ctx, aerr)
		return false
	}
	return true
}

// serve runs an authenticated request in the wire format of c: decode, route,
// admit, run. It returns true when a stream writer took over the request. A batch
// line (batches.go) enters here.
func (j *job) serve(ctx *fasthttp.RequestCtx, c codec) bool {
	j.codec = c
	s, pol := j.s, j.pol
	if !j.decode(ctx, c) {
		return false
	}
	if j.line != nil && j.in.stream {
		j.writeError(ctx, badRequest("stream", "a batch request cannot stream"))
		return false
	}
	if s.peer != nil {
		j.prefix = prefixKey(pol, &j.in)
	}
	if ctx != nil && j.line == nil && s.peer != nil && forwardable(&ctx.Request.Header, &j.in) {
		if handled, async := s.maybeForward(ctx, j.reqID, j.codec, pol.Tenant, j.in.p.Model, j.prefix, true); handled {
			return async
		}
	}
	var aerr *apiError
	if j.rt, aerr = s.routeOf(j.header(ctx), &j.in, pol); aerr != nil {
		j.reject(ctx, aerr)
		return false
	}
	if handled, async := j.maybeForwardTier(ctx); handled {
		return async
	}
	if sa, ok := c.(storeAdmitter); ok { // a tenant whose stored responses are full: before any work
		if aerr := sa.admitStore(&j.in, pol); aerr != nil {
			j.reject(ctx, aerr)
			return false
		}
	}
	// Admission comes before any expensive work (the chat template, the tokenizer,
	// the router): a batch line against its budgets only (its own lane: it never
	// takes the interactive traffic's slots or rate; its ticket is the line's, so a
	// line run again is settled once), any other request against its concurrency and
	// requests/s (before its body was decoded: handleGenerate, admitTenant; with peers,
	// here, unless it was forwarded) and tokens/min (on the prompt's estimate from its
	// bytes). Its first attempt (run) reserves its worst case once it is known.
	if j.line != nil {
		tk, err := s.ten.AdmitBatchLine(s.quota(pol), j.start, j.line.id)
		if err != nil {
			if errors.Is(err, tenancy.ErrUnavailable) {
				j.writeError(ctx, unavailable(err))
				return false
			}
			j.writeError(ctx, &apiError{status: 500, typ: "server_error", message: "admission failed: " + err.Error(), reason: "internal"})
			return false
		}
		j.ticket = tk
	} else if !j.admit(ctx) {
		return false
	}
	return j.run(ctx)
}

// rateLimited answers a request refused by a rate or concurrency quota.
func rateLimited(le *tenancy.LimitError) *apiError {
	return &apiError{status: 429, typ: "requests", code: "rate_limit_exceeded",
		message: "rate limit reached for " + le.Reason + "; retry after " + le.RetryAfter.Round(time.Millisecond).String(),
		retry:   tenancy.RetryAfterSeconds(le.RetryAfter), reason: "rate_" + le.Reason}
}

// admitsBeforeBody reports whether an interactive request is admitted (concurrency,
// requests/s) before its body is decoded: always, but on a process with peers for a
// request not forwarded to it, which the body (its model, its prefix) may send to
// another process, the one that alone admits it (peers.go).
func (s *Server) admitsBeforeBody(ctx *fasthttp.RequestCtx) bool {
	return s.peer == nil || len(ctx.Request.Header.Peek(ForwardedHeader)) > 0
}

// dropBody reads and drops the rest of the body of a request refused before its
// handler read it. fasthttp has read at most 8 KiB of a body by then (the server
// streams request bodies, StreamRequestBody, for uploads; ctx.PostBody reads the
// rest), and a connection left with unread bytes fails: the client, still writing,
// gets a reset rather than its answer. What is left is at most max_body_bytes
// (bodyFits checked the length; a chunked body was read there): network I/O through
// io.Discard's small pooled buffer, never kept, never decoded.
func (s *Server) dropBody(ctx *fasthttp.RequestCtx) {
	if st := ctx.RequestBodyStream(); st != nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(st, int64(s.cfg.MaxBodyBytes)+1))
	}
}

// admitTenant admits an interactive request (tenancy.Tenancy.Admit: concurrency,
// requests/s, tokens/min against est) at now, answering the refusal itself: a rate
// or concurrency quota is a 429 with Retry-After. handleGenerate and handleEmbeddings
// call it with est 0 before the body is decoded, from the tenant alone (the header's
// key), so that a refused request costs no parse; the body's estimate is checked
// after (admitEstimate). It reports whether the request goes on.
func (j *job) admitTenant(ctx *fasthttp.RequestCtx, now time.Time, est int) bool {
	tk, err := j.s.ten.Admit(j.s.quota(j.pol), now, est)
	if err != nil {
		if e, limited := admissionError(err); limited {
			j.refuse(ctx, e)
		} else {
			j.fail(ctx, e)
		}
		return false
	}
	j.ticket = tk
	return true
}

// admitEstimate completes an interactive request's admission with what needs its
// body: the tokens/min quota against est, the prompt's estimate from its bytes, on
// the ticket admitTenant took before the body was decoded (Ticket.CheckTokens; a
// refusal is settled, freeing the slot, its requests/s token spent), or in one
// admission when none was taken (admitsBeforeBody).
func (j *job) admitEstimate(ctx *fasthttp.RequestCtx, now time.Time, est int) bool {
	if j.ticket == nil {
		return j.admitTenant(ctx, now, est)
	}
	err := j.ticket.CheckTokens(now, est)
	if err == nil {
		return true
	}
	e, _ := admissionError(err)
	j.fail(ctx, e)
	return false
}

// admissionError is the answer to an admission's error: a 429 when a rate or
// concurrency quota refused it (limited), a 503 when the store did not answer, else a
// 500.
func admissionError(err error) (e *apiError, limited bool) {
	var le *tenancy.LimitError
	switch {
	case errors.As(err, &le):
		return rateLimited(le), true
	case errors.Is(err, tenancy.ErrUnavailable):
		return unavailable(err), false
	default:
		return &apiError{status: 500, typ: "server_error", message: "admission failed: " + err.Error(), reason: "internal"}, false
	}
}

// reject answers a request refused before its admission was complete: settled with
// no usage (its slot freed, its requests/s token spent) when admitTenant admitted it
// before its body was decoded, else counted only (refuse).
func (j *job) reject(ctx *fasthttp.RequestCtx, e *apiError) {
	if j.ticket != nil {
		j.fail(ctx, e)
		return
	}
	j.refuse(ctx, e)
}

// admit completes an interactive request's admission (serve): tokens/min on the
// prompt's estimate (admitEstimate), then a tenant whose budget has less money left
// than the request's least cost on any model it may use (leastCost) is a 429
// insufficient_quota at once, as the router would answer it, rather than after its
// prompt was rendered and tokenized. It reports whether the request goes on.
func (j *job) admit(ctx *fasthttp.RequestCtx) bool {
	now := j.s.now()
	if !j.admitEstimate(ctx, now, j.in.estimate()) {
		return false
	}
	tk := j.ticket
	if room := tk.Remaining(now); room >= 0 && room < j.leastCost() {
		j.fail(ctx, insufficientQuota(errors.New("the money left, "+room.String()+", is less than the least this request can cost")))
		return false
	}
	return true
}

// leastCost is the least the request can cost on any model it may run on: one
// output token (every request but one that only scores its prompt has one; a cost is
// rounded up, money.Price.Cost), 0 when a model it may use is free.
func (j *job) leastCost() money.Money {
	if j.in.scoreOnly {
		return 0
	}
	if m := j.rt.named; m != nil {
		return m.price.Cost(0, 1)
	}
	least := money.Money(-1)
	for id, m := range j.s.models {
		if c := m.price.Cost(0, 1); j.pol.AllowsModel(id) && (least < 0 || c < least) {
			least = c
		}
	}
	return max(least, 0)
}

// overReservation refuses a batch line whose worst case here is over what its job
// reserved for it against the cap (batch.Request.MaxCost: the line must not cost
// more). Check prices a line as this code does, so that happens only where the
// reservation was an estimate: a line for a model another process serves, priced
// there from announcements without its tokenizer or chat template.
func (j *job) overReservation() *apiError {
	l := j.line
	if l == nil || l.maxCost <= 0 {
		return nil
	}
	if w := l.discount(j.c.cost); w > l.maxCost {
		return &apiError{status: 400, typ: "invalid_request_error", code: "line_over_reservation", reason: "bad_request",
			message: "the line's worst case on the model '" + j.c.m.id + "' (" + w.String() + ") is over what its batch reserved for it (" +
				l.maxCost.String() + ", estimated where the model's tokenizer or length limit was not known): lower max_tokens or shorten the prompt"}
	}
	return nil
}

// remaining is the tenant's money left, for the choice of a tier: the ticket's once
// admitted, the tenancy's before.
func (j *job) remaining(now time.Time) money.Money {
	if j.ticket != nil {
		return j.ticket.Remaining(now)
	}
	return j.s.ten.Remaining(j.s.quota(j.pol), now)
}

// run decides where the admitted request goes, once (decide: an ordered fallback
// chain), then walks the chain: it reserves entry k's worst case, starts it and
// answers. It returns true when a stream writer took over the request.
//
// A refusal before anything was answered (the reservation refused for money a
// concurrent request of the tenant took; the engine's queue full, no memory,
// closed; an upstream down) releases entry k's reservation and takes entry k+1,
// without deciding again. When every entry refused, the chain's end answers (a route
// by tiers: why no tier is left), else the last refusal.
func (j *job) run(ctx *fasthttp.RequestCtx) bool {
	s := j.s
	ch, aerr := j.decide(s.now())
	if aerr != nil {
		j.fail(ctx, aerr)
		return false
	}
	var refused *apiError // the last entry's refusal
	forMoney := false     // it was its reservation's, for money
	for k := range ch.entries {
		j.c = ch.entries[k]
		if aerr := j.overReservation(); aerr != nil {
			j.fail(ctx, aerr)
			return false
		}
		if err := j.ticket.Reserve(s.now(), j.c.reserve); err != nil {
			switch {
			case errors.Is(err, tenancy.ErrInsufficientQuota):
				refused, forMoney = insufficientQuota(err), true
				continue // nothing was reserved
			case errors.Is(err, tenancy.ErrUnavailable):
				j.fail(ctx, unavailable(err))
			default:
				j.fail(ctx, &apiError{status: 500, typ: "server_error", message: "reserve: " + err.Error(), reason: "internal"})
			}
			return false
		}
		var done bool
		if done, refused = j.launch(ctx); refused == nil {
			return done
		}
		forMoney = false
		j.ticket.Release()
	}
	if end := ch.end(s.set, j.allowsCandidate, j.hiddenCandidate); end != nil && !forMoney { // no money left: that, rather than why no tier is left
		refused = end
	}
	j.fail(ctx, refused)
	return false
}

// launch runs the chosen model and answers. refused is set when the model refused the
// request before answering anything (nothing was written or settled); done is true
// when a stream writer took over the request.
func (j *job) launch(ctx *fasthttp.RequestCtx) (done bool, refused *apiError) {
	if j.c.m.upstream != nil {
		if _, relays := j.codec.(*openaiCodec); !relays {
			// An upstream speaks OpenAI's chat and completions: its answers pass through
			// as they are, which another wire format cannot.
			return false, &apiError{status: 400, typ: "invalid_request_error", code: "model_not_supported", param: "model", reason: "bad_request",
				message: "the model '" + j.c.m.id + "' is served by an upstream server, reached through /v1/chat/completions and /v1/completions only"}
		}
		return j.runUpstream(ctx)
	}
	streams, cancel, err := j.startEmbedded()
	if err != nil {
		if errors.Is(err, engine.ErrQueueFull) || errors.Is(err, engine.ErrNoMemory) || errors.Is(err, engine.ErrClosed) || errors.Is(err, engine.ErrRestarting) {
			j.s.pred.Fail(j.c.m.id, j.s.now())
			return false, engineError(err)
		}
		j.fail(ctx, engineError(err))
		return false, nil
	}
	j.s.servedWarm(j.c.m.id, j.prefix)
	j.hold()
	if j.in.feat.Rich(j.c.parse) {
		return j.respondChoices(ctx, streams, cancel), nil
	}
	return j.respondEmbedded(ctx, streams[0], cancel), nil
}

// hold makes the running request's reservation durable (tenancy.Ticket.Hold), so
// that a process killed before it settles charges it at the next start. It runs once
// the model took the request; the log write goes on in the background (the request
// does not wait for it). A batch line is not held (it runs again after a restart).
func (j *job) hold() {
	if j.line != nil {
		return
	}
	err := j.ticket.Hold(j.s.now(), tenancy.Entry{RequestID: j.reqID, ClientRequestID: j.clientID, KeyID: j.keyID,
		Model: j.c.m.id, Tier: j.c.tierName, PromptTokens: len(j.c.tokens)})
	if err != nil {
		j.s.log.Error("ledger hold", "request_id", j.reqID, "error", err)
	}
}

// unavailable answers a request whose quota or budget state (Redis) did not answer:
// money fails closed, so the request does not run.
// The cause (which may name Redis's address) is not shown to the client.
func unavailable(error) *apiError {
	return &apiError{status: 503, typ: "server_error", code: "quota_state_unavailable",
		message: "the quota and budget service is unavailable; retry shortly", retry: 1, reason: "unavailable"}
}

func engineError(err error) *apiError {
	switch {
	case errors.Is(err, engine.ErrPromptOverLimit):
		return contextLengthExceeded("prompt", "the prompt is longer than the model's limit: "+err.Error())
	case errors.Is(err, engine.ErrTooLong):
		return badRequest("max_tokens", "the request is longer than the model's limit: "+err.Error())
	case errors.Is(err, chat.ErrException):
		// The template's raise_exception: the conversation is not one this model's
		// template accepts (roles that do not alternate, two calls in one turn).
		return badRequest("messages", "the model's chat template refuses the conversation: "+err.Error())
	case errors.Is(err, engine.ErrUnknownModel):
		return &apiError{status: 400, typ: "invalid_request_error", code: "model_not_found", param: "model", message: err.Error(), reason: "bad_request"}
	case errors.Is(err, engine.ErrRestarting):
		return restarting(err)
	case errors.Is(err, engine.ErrQueueFull), errors.Is(err, engine.ErrNoMemory), errors.Is(err, engine.ErrClosed):
		return &apiError{status: 503, typ: "server_error", code: "overloaded", message: err.Error(), retry: 1, reason: "overloaded"}
	}
	return &apiError{status: 500, typ: "server_error", message: err.Error(), reason: "internal"}
}

// fail answers an error after admission and settles the ticket with no usage.
func (j *job) fail(ctx *fasthttp.RequestCtx, e *apiError) {
	model := ""
	if j.c.m != nil {
		model = j.c.m.id
	}
	j.refusal = e.reason
	j.settle(tenancy.Entry{Status: e.status, Model: model}, nil)
	j.finished(nil, e)
	j.writeError(ctx, e)
}

// writeError answers e in the request's wire format (OpenAI's for a job of no
// codec: embeddings).
func (j *job) writeError(ctx *fasthttp.RequestCtx, e *apiError) {
	c := j.codec
	if c == nil {
		c = chatCodec
	}
	if ctx == nil { // entered the core directly (runCore)
		*j.res = coreResult{status: c.errorStatus(e), body: c.appendError(make([]byte, 0, 256), e), err: e}
		j.s.noteError(j.reqID, e)
		return
	}
	j.s.writeErrorIn(ctx, j.reqID, c, e)
}

// finished tells the request's output (a finisher) its end, once it is settled.
func (j *job) finished(w *whole, e *apiError) {
	if f, ok := j.out.(finisher); ok {
		f.Finished(w, e.wire())
	}
	if e != nil {
		j.settleCarried(nil) // failed: no response to store will carry it
	}
}

// settle records the request's usage (waiting for the ledger group) and its metrics.
func (j *job) settle(e tenancy.Entry, u *engine.Usage) {
	if j.carry.keep(e, u) {
		return // the stored response's Put settles it (responses_carry.go)
	}
	j.settleWith(e, u, nil)
}

// settleWith is settle whose ledger write also carries side (nil: none).
func (j *job) settleWith(e tenancy.Entry, u *engine.Usage, side ledger.Side) {
	s := j.s
	e.Time = s.now()
	j.endKeep(true)
	e.RequestID, e.ClientRequestID, e.KeyID, e.Tier = j.reqID, j.clientID, j.keyID, j.c.tierName
	e.Latency = e.Time.Sub(j.start)
	if j.c.m != nil && e.Model == "" {
		e.Model = j.c.m.id
	}
	e.Adapter = j.adapterID()
	if j.c.m != nil && (e.PromptTokens > 0 || e.CompletionTokens > 0) {
		e.Cost = j.c.m.price.Cost(e.PromptTokens, e.CompletionTokens)
	}
	if u != nil && u.CompletionTokens > 0 {
		e.TTFT = u.TimeToFirstToken
	}
	if u != nil {
		e.CachedTokens, e.ColdStart, e.GrammarTime = u.CachedTokens, u.ColdStart, u.GrammarTime
	}
	e.Refused = refusalOf(e.Status, j.refusal).String()
	if j.in.p != nil {
		e.User, e.SafetyIdentifier = s.hashIdentifier(j.pol.Tenant, j.in.p.User), s.hashIdentifier(j.pol.Tenant, j.in.p.SafetyIdentifier)
	}
	if j.line != nil {
		e.Cost = j.line.discount(e.Cost)
	}
	if j.ticket == nil { // refused before its admission (routing, budget): nothing held
		j.ticket = s.ten.NotAdmitted(s.quota(j.pol))
	}
	charged, err := j.ticket.SettleWith(e, side)
	if j.line != nil {
		e = j.line.settled(j.ticket, e, charged)
	}
	if err != nil {
		s.log.Error("ledger", "request_id", j.reqID, "error", err)
	}
	s.metrics.observe(j, e, charged, u)
	if !s.log.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	args := []any{"request_id", j.reqID, "tenant", j.pol.Tenant, "model", e.Model, "adapter", e.Adapter, "tier", e.Tier,
		"status", e.Status, "prompt_tokens", e.PromptTokens, "completion_tokens", e.CompletionTokens,
		"cost_usd", charged.Dollars(), "latency", e.Latency}
	if j.clientID != "" {
		args = append(args, "client_request_id", j.clientID)
	}
	s.log.Info("request", args...)
}

// startEmbedded submits the request to the engine: one stream per choice (n), the
// output constrained by the plan's grammar, with logprobs when asked.
func (j *job) startEmbedded() ([]*engine.Stream, context.CancelFunc, error) {
	salt := j.pol.Tenant
	if j.pol.SharePrefix {
		salt = ""
	}
	f := &j.in.feat
	req := engine.Request{
		Prompt: j.c.tokens, MaxTokens: j.c.out, Sampling: j.in.sampling, Stop: j.in.stop,
		Tenant: j.pol.Tenant, Weight: j.pol.Weight, Priority: engine.Interactive, CacheSalt: salt,
		Grammar: j.c.gram, Logprobs: f.Logprobs, TopLogprobs: f.Top, PromptLogprobs: f.Echo && f.Logprobs,
		PromptOnly: j.in.scoreOnly, Prediction: j.in.prediction, NoSpeculation: noSpeculation(j.in.p),
		KeepAlive: j.keepAlive(),
	}
	if a := j.c.adapter; a != nil {
		req.Adapters = []string{a.id}
	}
	if k := j.in.p.PromptCacheKey; k != "" {
		req.Affinity = cacheKeyHash(j.pol.Tenant, k)
	}
	if j.line != nil {
		req.Priority = engine.Batch
	}
	gctx, cancel := context.WithCancel(context.Background())
	j.s.pred.Begin(j.c.m.id)
	var streams []*engine.Stream
	var err error
	if fe, ok := j.s.eng.(Features); ok && f.N > 1 {
		streams, err = fe.GenerateN(gctx, j.c.m.id, req, f.N)
	} else {
		var st *engine.Stream
		st, err = j.s.eng.Generate(gctx, j.c.m.id, req)
		streams = []*engine.Stream{st}
	}
	if err != nil {
		j.s.pred.End(j.c.m.id)
		j.endKeep(false)
		cancel()
		return nil, nil, err
	}
	return streams, cancel, nil
}

// keepAlive decides the request's engine.Request.KeepAlive (keepalive.go) and counts
// the request in the server's keepAlives until it ends (endKeep).
func (j *job) keepAlive() time.Duration {
	s, m := j.s, j.c.m
	a := keepAsk{Given: j.rt.keepGiven, Asked: j.rt.keepAlive, Idle: m.idle,
		Max: s.cfg.MaxKeepAlive, Min: s.cfg.MinKeepAlive, Short: j.pol.ShortKeepAlive}
	j.keepOwn, _ = decideKeepAlive(a)
	a.Others = s.keeps.begin(m.id, j.pol.Tenant, s.now(), j.keepOwn)
	j.kept = true
	_, keep := decideKeepAlive(a)
	return keep
}

// endKeep ends the request's count in the server's keepAlives (ran: it ran on the
// model, whose stay it now sets).
func (j *job) endKeep(ran bool) {
	if j.kept {
		j.kept = false
		j.s.keeps.end(j.c.m.id, j.pol.Tenant, j.s.now(), j.keepOwn, ran)
	}
}

// setRouteHeaders says which tier and model serve.
func (j *job) setRouteHeaders(ctx *fasthttp.RequestCtx) {
	if ctx == nil {
		return
	}
	if j.c.tierName != "" {
		ctx.Response.Header.Set("X-LMLite-Tier", j.c.tierName)
	}
	ctx.Response.Header.Set("X-LMLite-Model", j.c.m.id)
	if a := j.c.adapter; a != nil {
		ctx.Response.Header.Set("X-LMLite-Adapter", a.id)
	}
}

// servedName is the model the answer names: the adapter the client named, else
// the model that served.
func (j *job) servedName() string {
	if a := j.c.adapter; a != nil {
		return a.id
	}
	return j.c.m.id
}

// coreFinish is the core's finish reason (outEvent.finish) of an engine's: "stop",
// "length" or "cancelled".
func coreFinish(f string) string {
	switch f {
	case engine.FinishLength:
		return "length"
	case engine.FinishCancelled:
		return "cancelled"
	}
	return "stop"
}

func statusOf(u engine.Usage, err error) int {
	switch {
	case u.FinishReason == engine.FinishCancelled || errors.Is(err, context.Canceled):
		return 499 // the client went away
	case errors.Is(err, engine.ErrRestarting):
		return 503
	case errors.Is(err, engine.ErrGrammarBudget):
		return 400
	case err != nil:
		return 500
	}
	return 200
}

// startOutput makes the request's output (its codec's) and sets the answer's
// headers: the route, the content type, and no caching or proxy buffering for a
// stream.
func (j *job) startOutput(ctx *fasthttp.RequestCtx) {
	j.meta = outMeta{Meta: core.Meta{ReqID: j.reqID, Model: j.servedName(), Created: j.start.Unix(), StartMilli: j.start.UnixMilli(), Tenant: j.pol.Tenant, Prompt: j.c.nPrompt}, in: &j.in, job: j}
	j.out = j.codec.newOutput(&j.meta)
	if ctx == nil {
		return
	}
	j.setRouteHeaders(ctx)
	ctx.SetContentType(j.out.ContentType(j.in.stream))
	if j.in.stream {
		ctx.Response.Header.Set("Cache-Control", "no-cache")
		ctx.Response.Header.Set("X-Accel-Buffering", "no")
	}
}

// streamTo hands the answer to a stream writer that runs fn (the request ends there:
// the writer releases its in-flight count).
func (j *job) streamTo(ctx *fasthttp.RequestCtx, fn func(w *bufio.Writer)) {
	var ping []byte
	if p, ok := j.out.(pinger); ok {
		ping = p.AppendPing(nil)
	}
	ctx.SetBodyStreamWriter(keepAlive(ctx, ping, func(w *bufio.Writer) {
		defer func() {
			j.s.inFlight.Add(-1)
			j.s.wg.Done()
		}()
		fn(w)
	}))
}

// answerWhole answers a request that is not streamed, settled with usage u and
// error err (status its status): the whole w rendered by the output, or the error.
func (j *job) answerWhole(ctx *fasthttp.RequestCtx, w *whole, status int, err error, size int) {
	if err != nil && status != 499 {
		e := generationError(err)
		j.finished(nil, e)
		j.writeError(ctx, e)
		return
	}
	j.finished(w, nil)
	body := j.out.AppendWhole(make([]byte, 0, size), w) // a Responses output stores here
	j.settleCarried(nil)                                // if no stored response carried the settlement
	j.answer(ctx, 200, j.out.ContentType(false), body)
}

// sseWriter writes a stream's events as its output renders them, flushing each;
// once a write fails (the client went away) it writes nothing more and cancels the
// generation. It holds the event being rendered (ev) and the buffer's first backing
// array: a stream allocates one sseWriter for both.
type sseWriter struct {
	w      sse.Writer
	out    output
	cancel context.CancelFunc
	buf    []byte
	gone   bool
	ev     outEvent
	bufArr [1024]byte
}

func newSSEWriter(w *bufio.Writer, out output, cancel context.CancelFunc) *sseWriter {
	sw := &sseWriter{out: out, cancel: cancel}
	sw.w.Reset(w)
	sw.buf = sw.bufArr[:0]
	return sw
}

func (s *sseWriter) write(b []byte) {
	if s.gone || len(b) == 0 {
		return
	}
	if !s.w.Write(b) {
		s.gone = true
		s.cancel() // the client went away: stop generating
	}
}

// event writes ev's bytes.
func (s *sseWriter) event(ev *outEvent) {
	if s.gone {
		return
	}
	s.buf = s.out.AppendEvent(s.buf[:0], ev)
	s.write(s.buf)
}

// end writes what ends the stream.
func (s *sseWriter) end() {
	s.buf = s.out.AppendEnd(s.buf[:0])
	s.write(s.buf)
}

// respondEmbedded answers a plain request (one choice, no logprobs, no tool calls to
// parse) from an engine stream; respondChoices (choices.go) answers the others.
func (j *job) respondEmbedded(ctx *fasthttp.RequestCtx, st *engine.Stream, cancel context.CancelFunc) bool {
	j.startOutput(ctx)
	if j.in.stream {
		j.streamTo(ctx, func(w *bufio.Writer) { j.streamEmbedded(w, st, cancel) })
		return true
	}
	var text strings.Builder
	conn := connOf(ctx)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var toks []engine.Token
	for done := false; !done; {
		select {
		case <-st.Ready():
		case <-tick.C:
			if connClosed(conn) {
				cancel() // the client went away: stop generating
			}
			continue
		}
		toks, done = st.Take(toks)
		for _, tok := range toks {
			text.WriteString(tok.Text)
		}
	}
	u, err := st.Wait(context.Background())
	u = billed(u)
	cancel()
	j.s.pred.End(j.c.m.id)
	j.observeLatency(u, err)
	status := statusOf(u, err)
	j.settle(tenancy.Entry{Status: status, Finish: u.FinishReason, PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens}, &u)
	j.one[0] = wholeChoice{Content: text.String(), Finish: coreFinish(u.FinishReason)}
	j.whole = whole{Choices: j.one[:], Usage: u}
	j.answerWhole(ctx, &j.whole, status, err, 256+text.Len())
	return false
}

// observeLatency feeds the tier router's predictor. The engine's time to first
// token counts from submission, so it holds the time the request queued; the
// predictor wants the service time alone (it adds the queue ahead from the queue
// depth), else a queue once seen would be counted twice in every prediction.
func (j *job) observeLatency(u engine.Usage, err error) {
	if err == nil && u.FinishReason != engine.FinishCancelled {
		ttft := max(u.TimeToFirstToken-u.QueueTime, 0)
		j.s.pred.Observe(j.c.m.id, ttft, u.TimePerOutputToken)
	}
}

// streamEmbedded writes the server-sent events of a stream, flushing each token.
func (j *job) streamEmbedded(w *bufio.Writer, st *engine.Stream, cancel context.CancelFunc) {
	sw := newSSEWriter(w, j.out, cancel)
	ev := &sw.ev
	*ev = outEvent{Kind: outStart}
	sw.event(ev)
	_, keep := j.out.(finisher)
	var text strings.Builder
	for tok := range st.Tokens {
		if tok.Text == "" || sw.gone {
			continue
		}
		if keep {
			text.WriteString(tok.Text)
		}
		*ev = outEvent{Kind: outText, Text: tok.Text}
		sw.event(ev)
	}
	u, err := st.Wait(context.Background())
	u = billed(u)
	cancel()
	j.s.pred.End(j.c.m.id)
	j.observeLatency(u, err)
	status := statusOf(u, err)
	if sw.gone {
		status = 499
	}
	j.settle(tenancy.Entry{Status: status, Finish: u.FinishReason, PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens}, &u)
	if err != nil && status != 499 {
		e := generationError(err)
		j.finished(nil, e)
		*ev = outEvent{Kind: outError, Err: e.wire()}
		sw.event(ev)
	} else {
		if keep {
			j.one[0] = wholeChoice{Content: text.String(), Finish: coreFinish(u.FinishReason)}
			j.whole = whole{Choices: j.one[:], Usage: u}
			j.finished(&j.whole, nil)
		}
		*ev = outEvent{Kind: outFinish, Finish: coreFinish(u.FinishReason)}
		sw.event(ev)
		*ev = outEvent{Kind: outUsage, Usage: u}
		sw.event(ev)
	}
	sw.end()             // a Responses output stores here
	j.settleCarried(nil) // if no stored response carried the settlement
}
