package gateway

import (
	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/gateway/anthropic"
	"github.com/lmlite/lmlite/tenancy"
)

// handleCountTokens answers POST /v1/messages/count_tokens: {"input_tokens": N}
// (anthropic.AppendCountTokens; the body decoded as a Messages request's, max_tokens
// optional: anthropic.Request.Check(true)),
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
	j := s.enter(ctx, reqID, c)
	if j == nil {
		return
	}
	defer s.leave()
	if !j.decode(ctx, c) {
		return
	}
	pol := j.pol
	var aerr *apiError
	if s.peer != nil && forwardable(&ctx.Request.Header, &j.in) {
		if handled, _ := s.maybeForward(ctx, reqID, c, pol.Tenant, j.in.p.Model, 0, false); handled {
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
	if aerr := j.choose(s.now()); aerr != nil {
		j.fail(ctx, aerr)
		return
	}
	if j.c.m.upstream != nil {
		j.fail(ctx, badRequest("model", "count_tokens needs the model's tokenizer; the model '"+j.c.m.id+"' is served by an upstream server"))
		return
	}
	j.settle(tenancy.Entry{Status: 200}, nil)
	j.setRouteHeaders(ctx)
	ctx.SetContentType("application/json")
	ctx.SetBody(anthropic.AppendCountTokens(make([]byte, 0, 32), j.c.nPrompt))
}
