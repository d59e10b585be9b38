package gateway

import (
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/tenancy"
)

// maxMemResponses bounds the responses memResponses keeps for one tenant.
const maxMemResponses = 10000

// handleInputTokens serves POST /v1/responses/input_tokens: the input tokens that
// the same body sent to POST /v1/responses reports as usage.input_tokens, counted
// on the model it would run on (its chat template, tools and tokenizer), with
// nothing generated. It is admitted as a generation is (concurrency and requests/s
// before the body is decoded, tokens/min on the prompt's estimate) before the
// prompt is rendered, and its ledger entry costs nothing.
func (s *Server) handleInputTokens(ctx *fasthttp.RequestCtx, reqID string) {
	if s.draining.Load() {
		s.writeError(ctx, reqID, &apiError{status: 503, typ: "server_error", code: "shutting_down",
			message: "the server is shutting down", reason: "draining", retry: 1})
		return
	}
	s.wg.Add(1)
	defer s.wg.Done()
	j := &job{s: s, reqID: reqID, clientID: string(clientRequestID(ctx)), start: s.now()}
	j.plans = j.planBuf[:0]
	keyID, pol, aerr := s.authenticate(ctx)
	if aerr != nil {
		s.writeError(ctx, reqID, aerr)
		return
	}
	j.keyID, j.pol = keyID, pol
	if !j.admitTenant(ctx, j.start, 0) {
		s.dropBody(ctx)
		return
	}
	body := ctx.PostBody()
	if len(body) > s.cfg.MaxBodyBytes {
		j.reject(ctx, s.tooLarge())
		return
	}
	s.decoded.Add(1)
	if aerr := s.responses.decode(&j.in, body, pol.Tenant); aerr != nil {
		j.reject(ctx, respNames(aerr))
		return
	}
	if j.rt, aerr = s.routeOf(&ctx.Request.Header, &j.in, pol); aerr != nil {
		j.reject(ctx, aerr)
		return
	}
	if !j.admitEstimate(ctx, j.start, j.in.estimate()) {
		return
	}
	if aerr := j.choose(s.now()); aerr != nil {
		j.fail(ctx, respNames(aerr))
		return
	}
	n := j.c.nPrompt
	j.settle(tenancy.Entry{Status: 200, Model: j.c.m.id}, nil)
	j.setRouteHeaders(ctx)
	b := append(make([]byte, 0, 64), `{"object":"response.input_tokens","input_tokens":`...)
	b = strconv.AppendInt(b, int64(n), 10)
	ctx.SetContentType("application/json")
	ctx.SetBody(append(b, '}'))
}
