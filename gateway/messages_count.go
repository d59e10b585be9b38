package gateway

import (
	"context"
	"log/slog"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/tenancy"
	"github.com/lmlite/lmlite/usage"
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
		s.writeCodecError(ctx, reqID, c, &apiError{status: 503, typ: "server_error", code: "shutting_down",
			message: "the server is shutting down", reason: "draining", retry: 1})
		return
	}
	if n := s.inFlight.Add(1); n > int64(s.cfg.MaxInFlight) {
		s.inFlight.Add(-1)
		s.writeCodecError(ctx, reqID, c, &apiError{status: 503, typ: "server_error", code: "overloaded",
			message: "the server is overloaded; retry later", reason: "overloaded", retry: 1})
		return
	}
	s.wg.Add(1)
	defer func() {
		s.inFlight.Add(-1)
		s.wg.Done()
	}()
	j := &job{s: s, reqID: reqID, clientID: string(clientRequestID(ctx)), start: s.now()}
	j.plans = j.planBuf[:0]
	keyID, pol, aerr := s.authenticate(ctx)
	if aerr != nil {
		s.writeCodecError(ctx, reqID, c, aerr)
		return
	}
	j.keyID, j.pol = keyID, pol
	// refuse answers a refusal before admission; fail one after it, settled with no
	// usage (its slot freed).
	refuse := func(e *apiError) {
		if r := refusalOf(e.status, e.reason); r != usage.NotRefused && s.usage != nil {
			s.usage.Add(usage.Event{Time: s.now(), RequestID: reqID, Tenant: pol.Tenant, Refused: r})
		}
		s.writeCodecError(ctx, reqID, c, e)
	}
	fail := func(e *apiError) {
		if j.ticket == nil {
			refuse(e)
			return
		}
		model := ""
		if j.c.m != nil {
			model = j.c.m.id
		}
		j.refusal = e.reason
		j.settle(tenancy.Entry{Status: e.status, Model: model}, nil)
		s.writeCodecError(ctx, reqID, c, e)
	}
	admit := func(est int) bool {
		var err error
		if j.ticket == nil {
			j.ticket, err = s.ten.Admit(s.quota(pol), s.now(), est)
		} else {
			err = j.ticket.CheckTokens(s.now(), est)
		}
		if err != nil {
			e, limited := admissionError(err)
			if limited && j.ticket == nil {
				refuse(e)
			} else {
				fail(e)
			}
			return false
		}
		return true
	}
	if s.admitsBeforeBody(ctx) && !admit(0) {
		s.dropBody(ctx)
		return
	}
	body := ctx.PostBody()
	if len(body) > s.cfg.MaxBodyBytes {
		fail(s.tooLarge())
		return
	}
	s.decoded.Add(1)
	if aerr := c.decode(&j.in, body, pol.Tenant); aerr != nil {
		fail(aerr)
		return
	}
	if s.peer != nil && forwardable(&ctx.Request.Header, &j.in) {
		if handled, _ := s.maybeForward(ctx, reqID, j.in.p.Model, 0, false); handled {
			return
		}
	}
	if j.rt, aerr = s.routeOf(&ctx.Request.Header, &j.in, pol); aerr != nil {
		fail(aerr)
		return
	}
	if !admit(j.in.estimate()) {
		return
	}
	if aerr := j.choose(s.now(), 0); aerr != nil {
		fail(aerr)
		return
	}
	if j.c.m.upstream != nil {
		fail(badRequest("model", "count_tokens needs the model's tokenizer; the model '"+j.c.m.id+"' is served by an upstream server"))
		return
	}
	j.settle(tenancy.Entry{Status: 200}, nil)
	j.setRouteHeaders(ctx)
	b := append(make([]byte, 0, 32), `{"input_tokens":`...)
	b = strconv.AppendInt(b, int64(j.c.nPrompt), 10)
	ctx.SetContentType("application/json")
	ctx.SetBody(append(b, '}'))
}

// writeCodecError writes e in c's error shape with c's status for it, as writeError
// does in OpenAI's.
func (s *Server) writeCodecError(ctx *fasthttp.RequestCtx, reqID string, c codec, e *apiError) {
	ctx.SetStatusCode(c.errorStatus(e))
	ctx.SetContentType("application/json")
	if e.retry > 0 {
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(e.retry))
	}
	ctx.SetBody(c.appendError(make([]byte, 0, 256), e))
	if e.reason != "" && e.reason != "not_found" {
		s.metrics.rejections.WithLabelValues(e.reason).Inc()
	}
	if s.log.Enabled(context.Background(), slog.LevelInfo) {
		s.log.Info("rejected", "request_id", reqID, "status", e.status, "reason", e.reason, "param", e.param, "error", e.message)
	}
}
