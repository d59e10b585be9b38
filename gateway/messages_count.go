package gateway

import (
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/tenancy"
)

// handleCountTokens answers POST /v1/messages/count_tokens: {"input_tokens": N},
// the prompt's tokens on the model the same request to /v1/messages would run on,
// rendered and tokenized as the core does (the model's plan: its chat template with
// the tools, its tokenizer), so that N is the input_tokens plus the
// cache_read_input_tokens that request reports.
//
// It is admitted as a generation is (authenticated; concurrency, requests/s and
// tokens/min on the body's estimate, before the prompt is tokenized) and charges
// nothing: its ledger entry has no tokens and no cost. A model served by another
// process is forwarded there; an upstream model (whose tokenizer is not here) is a
// 400.
func (s *Server) handleCountTokens(ctx *fasthttp.RequestCtx, reqID string) {
	c := countAPI
	if s.draining.Load() {
		s.writeErrorIn(ctx, reqID, c, &apiError{status: 503, typ: "server_error", code: "shutting_down",
			message: "the server is shutting down", reason: "draining", retry: 1})
		return
	}
	if n := s.inFlight.Add(1); n > int64(s.cfg.MaxInFlight) {
		s.inFlight.Add(-1)
		s.writeErrorIn(ctx, reqID, c, &apiError{status: 503, typ: "server_error", code: "overloaded",
			message: "the server is overloaded; retry later", reason: "overloaded", retry: 1})
		return
	}
	s.wg.Add(1)
	defer func() {
		s.inFlight.Add(-1)
		s.wg.Done()
	}()
	j := &job{s: s, reqID: reqID, clientID: string(clientRequestID(ctx)), start: s.now(), codec: c}
	j.plans = j.planBuf[:0]
	keyID, pol, aerr := s.authenticateFor(ctx, c)
	if aerr != nil {
		s.writeErrorIn(ctx, reqID, c, aerr)
		return
	}
	j.keyID, j.pol = keyID, pol
	if s.admitsBeforeBody(ctx) && !j.admitTenant(ctx, s.now(), 0) {
		s.dropBody(ctx) // refused undecoded
		return
	}
	body := ctx.PostBody()
	if len(body) > s.cfg.MaxBodyBytes {
		j.reject(ctx, s.tooLarge())
		return
	}
	s.decoded.Add(1)
	if aerr := c.decode(&j.in, body, pol.Tenant); aerr != nil {
		j.reject(ctx, aerr)
		return
	}
	if s.peer != nil && forwardable(&ctx.Request.Header, &j.in) {
		if handled, _ := s.maybeForward(ctx, reqID, c, j.in.p.Model, 0, false); handled {
			return
		}
	}
	if j.rt, aerr = s.routeOf(&ctx.Request.Header, &j.in, pol); aerr != nil {
		j.reject(ctx, aerr)
		return
	}
	if !j.admitEstimate(ctx, s.now(), j.in.estimate()) {
		return
	}
	if aerr := j.choose(s.now(), 0); aerr != nil {
		j.fail(ctx, aerr)
		return
	}
	if j.c.m.upstream != nil {
		j.fail(ctx, badRequest("model", "count_tokens needs the model's tokenizer; the model '"+j.c.m.id+"' is served by an upstream server"))
		return
	}
	j.settle(tenancy.Entry{Status: 200}, nil)
	j.setRouteHeaders(ctx)
	b := append(make([]byte, 0, 32), `{"input_tokens":`...)
	b = strconv.AppendInt(b, int64(j.c.nPrompt), 10)
	ctx.SetContentType("application/json")
	ctx.SetBody(append(b, '}'))
}
