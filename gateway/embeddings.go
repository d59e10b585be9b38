package gateway

import (
	"context"
	"errors"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/gateway/openai"
	"github.com/lmlite/lmlite/policies"
	"github.com/lmlite/lmlite/tenancy"
)

// embeds reports whether the engine serves embeddings from model m (an embedded
// model whose ModelStatus.Embeddings is set).
func (s *Server) embeds(m *model) bool {
	if m.upstream != nil || s.eng == nil {
		return false
	}
	if _, ok := s.eng.(Features); !ok {
		return false
	}
	for _, st := range s.eng.Models() {
		if st.ID == m.id {
			return st.Embeddings
		}
	}
	return false
}

// embeddingModel is the model "auto" means for embeddings: of the models the key
// may use that embed, the one with the lowest prompt price (the first configured
// among equals); "" if none embeds. Models that only generate are skipped.
func (s *Server) embeddingModel(pol *policies.Policy) string {
	best := ""
	for _, id := range s.order {
		m := s.models[id]
		if !s.allowed(pol, id) || !s.embeds(m) {
			continue
		}
		if best == "" || m.price.Cost(1000, 0) < s.models[best].price.Cost(1000, 0) {
			best = id
		}
	}
	return best
}

// handleEmbeddings serves POST /v1/embeddings through the same steps as a generation
// (auth, plan, admission, budget, ledger), billed as prompt tokens.
func (s *Server) handleEmbeddings(ctx *fasthttp.RequestCtx, reqID string) {
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
	defer func() {
		s.inFlight.Add(-1)
		s.wg.Done()
	}()
	j := &job{s: s, reqID: reqID, clientID: string(clientRequestID(ctx)), start: s.now(), codec: chatCodec}
	keyID, pol, aerr := s.authenticate(ctx)
	if aerr != nil {
		s.writeError(ctx, reqID, aerr)
		return
	}
	j.keyID, j.pol = keyID, pol
	if s.admitsBeforeBody(ctx) && !j.admitTenant(ctx, j.start, 0) {
		s.dropBody(ctx) // refused undecoded (run.go, admitTenant)
		return
	}
	body := ctx.PostBody()
	if len(body) > s.cfg.MaxBodyBytes {
		j.reject(ctx, s.tooLarge())
		return
	}
	var r openai.EmbeddingRequest
	s.decoded.Add(1)
	if aerr := decodeBody(body, &r); aerr != nil {
		j.reject(ctx, aerr)
		return
	}
	j.in.p = &commonParams{Model: r.Model, User: r.User} // the ledger keeps user hashed (identifiers.go)
	if r.Model == "" {
		j.reject(ctx, badRequest("model", "you must provide a model parameter"))
		return
	}
	if handled, _ := s.maybeForward(ctx, reqID, chatCodec, j.pol.Tenant, r.Model, 0, false); handled {
		return
	}
	if r.EncodingFormat != "" && r.EncodingFormat != "float" && r.EncodingFormat != "base64" {
		j.reject(ctx, badRequest("encoding_format", "encoding_format must be 'float' or 'base64'"))
		return
	}
	texts, ids, ferr := openai.EmbedInputs(r.Input)
	if ferr != nil {
		j.reject(ctx, fieldError(ferr))
		return
	}
	if r.Model == "auto" || r.Model == "default" {
		id := s.embeddingModel(pol)
		if id == "" {
			j.reject(ctx, badRequest("model", "no model this key may use serves embeddings"))
			return
		}
		r.Model = id
	}
	if !s.allowed(pol, r.Model) {
		j.reject(ctx, s.modelNotFound(pol, r.Model))
		return
	}
	m := s.models[r.Model]
	if !s.embeds(m) {
		j.reject(ctx, badRequest("model", "the model '"+m.id+"' does not serve embeddings"))
		return
	}
	if r.Dimensions != nil {
		if d := int(m.dim.Load()); d > 0 && *r.Dimensions != d {
			j.reject(ctx, badRequest("dimensions", "dimensions is "+strconv.Itoa(*r.Dimensions)+", but the model '"+m.id+"' embeds in "+strconv.Itoa(d)+" (other sizes are not supported)"))
			return
		}
	}
	// Admitted (concurrency, requests/s before the body was decoded; tokens/min on an
	// estimate from the bytes) before any input is tokenized; a tenant with no money
	// left is refused at once.
	est := 0
	for _, t := range texts {
		est += len(t)/3 + 1
	}
	for _, p := range ids {
		est += len(p)
	}
	if !j.admitEstimate(ctx, j.start, est) {
		return
	}
	tk := j.ticket
	j.c = choice{m: m, tierName: m.tier}
	if room := tk.Remaining(j.start); room >= 0 && room < m.price.Cost(len(texts)+len(ids), 0) { // a token an input at least
		j.fail(ctx, insufficientQuota(errors.New("the money left, "+room.String()+", is less than the least this request can cost")))
		return
	}
	// The inputs' tokens, and each one's length against the model's limit: the
	// tokenizer gives up past it (CappedTokenizer).
	maxLen := s.limit(m)
	var err error
	ct, capped := s.eng.(CappedTokenizer)
	for i, t := range texts {
		var toks []int32
		if capped && maxLen > 1 {
			toks, err = ct.TokenizeCapped(m.id, t, maxLen-1)
		} else {
			toks, err = s.eng.Tokenize(m.id, t)
		}
		if errors.Is(err, engine.ErrPromptOverLimit) {
			j.fail(ctx, contextLengthExceeded("input["+strconv.Itoa(i)+"]", "the input is more than "+strconv.Itoa(maxLen-1)+" tokens, over the model's limit of "+strconv.Itoa(maxLen-1)))
			return
		}
		if err != nil {
			j.fail(ctx, engineError(err))
			return
		}
		ids = append(ids, toks)
	}
	nPrompt := 0
	for i, p := range ids {
		if maxLen > 0 && len(p) >= maxLen {
			j.fail(ctx, contextLengthExceeded("input["+strconv.Itoa(i)+"]", "the input is "+strconv.Itoa(len(p))+" tokens, over the model's limit of "+strconv.Itoa(maxLen-1)))
			return
		}
		nPrompt += len(p)
	}
	j.c.plan, j.c.cost = plan{nPrompt: nPrompt}, m.price.Cost(nPrompt, 0)
	if err := tk.Reserve(j.start, j.c.cost); err != nil {
		switch {
		case errors.Is(err, tenancy.ErrInsufficientQuota):
			j.fail(ctx, insufficientQuota(err))
		case errors.Is(err, tenancy.ErrUnavailable):
			j.fail(ctx, unavailable(err))
		default:
			j.fail(ctx, &apiError{status: 500, typ: "server_error", message: "reserve: " + err.Error(), reason: "internal"})
		}
		return
	}
	ectx, cancel := context.WithCancel(context.Background())
	defer cancel()
	emb, err := s.eng.(Features).Embed(ectx, m.id, engine.EmbedRequest{Inputs: ids, Tenant: pol.Tenant, Weight: pol.Weight, Priority: engine.Interactive})
	if err != nil {
		j.fail(ctx, engineError(err))
		return
	}
	if len(emb.Vectors) > 0 {
		m.dim.Store(int64(len(emb.Vectors[0])))
		if r.Dimensions != nil && *r.Dimensions != len(emb.Vectors[0]) {
			j.fail(ctx, badRequest("dimensions", "dimensions is "+strconv.Itoa(*r.Dimensions)+", but the model '"+m.id+"' embeds in "+strconv.Itoa(len(emb.Vectors[0]))+" (other sizes are not supported)"))
			return
		}
	}
	u := engine.Usage{PromptTokens: emb.PromptTokens}
	j.settle(tenancy.Entry{Status: 200, PromptTokens: emb.PromptTokens}, &u)
	j.setRouteHeaders(ctx)
	ctx.SetContentType("application/json")
	ctx.SetBody(openai.AppendEmbeddings(make([]byte, 0, 64+len(emb.Vectors)*len(emb.Vectors[0])*12), m.id, emb, r.EncodingFormat == "base64"))
}
