package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/batch"
	"github.com/lmlite/lmlite/money"
	"github.com/lmlite/lmlite/policies"
	"github.com/lmlite/lmlite/tenancy"
	"github.com/lmlite/lmlite/tiers"
)

// The Batch API (OpenAI's Files and Batches, package batch): /v1/files and
// /v1/batches. Every file and batch belongs to the tenant of the key that made it;
// another tenant's id is a 404. Lines (chat, completions, responses or messages:
// lineCodec) enter the core directly (runCore) and run through serve, the interactive
// path's admission and routing, at the engine's batch priority (RunLine); Check
// prices and admits a line at validation.

// batches is the server's batch state: nil when Options.Batches is nil (the API is off).
type batches struct {
	m *batch.Manager

	// file_uploads_per_minute and batch_creates_per_minute (batchquota.go): in shared
	// (Redis) when the tenancy's state is shared, else (or while it fails) in limits.
	limits apiLimiters
	shared sharedMinutes
}

// startBatches makes the manager over the store and resumes unfinished jobs, after
// reading which lines the ledger charged before the last stop (RunLine's Retry): the
// entries of the lines' own tickets (tenancy's Entry.Line and tenant), never a
// request id, which may be a client's.
func (s *Server) startBatches(st *batch.Store, conc int, q batch.Queue) error {
	b := &batches{}
	var unfinished batch.UnfinishedSet // nil: this process's jobs
	if sh, ok := s.ten.SharedState().(interface {
		sharedMinutes
		batch.UnfinishedSet
	}); ok {
		b.shared, unfinished = sh, sh
	}
	if err := s.ten.LoadChargedLines(); err != nil {
		return err
	}
	concOf := func(tenant string) int {
		if pol, ok := s.book.Resolve(tenant); ok {
			return pol.BatchConcurrency // the plan's batch_max_concurrency
		}
		return 0
	}
	unfinishedOf := func(tenant string) int {
		if pol, ok := s.book.Resolve(tenant); ok {
			return pol.BatchMaxUnfinished // the plan's batch_max_unfinished
		}
		return 0
	}
	b.m = batch.NewManager(st, s, batch.Options{Concurrency: conc, ConcurrencyOf: concOf, MaxUnfinishedOf: unfinishedOf, Unfinished: unfinished,
		Now: s.now, Logger: s.log, Checker: s, Queue: q, CrashLimit: s.batchCrashLimit})
	s.batches = b
	if err := s.metrics.reg.Register(&batchCollector{st: st, log: s.log}); err != nil {
		return err
	}
	return b.m.Start()
}

// lineOutcome is what serve tells RunLine of a batch line.
type lineOutcome struct {
	id           string // the line's request id, stable over its runs: its ticket in shared state
	discountRate float64
	maxCost      money.Money // what the job reserved for the line against its cap (0: no bound)
	free         bool        // an earlier run of the line was charged: charge nothing again
	prior        money.Money // with free: what that run was charged (the line's cost)
	e            tenancy.Entry
	cost         money.Money
}

func (l *lineOutcome) discount(c money.Money) money.Money {
	if l.free {
		return 0
	}
	return discounted(c, l.discountRate)
}

func discounted(c money.Money, rate float64) money.Money {
	if rate <= 0 {
		return c
	}
	return money.Money(float64(c) * (1 - rate))
}

// settled keeps the line's settlement by tk, its entry e and what it charged, and
// returns e as the ledger recorded it. Another run of the line may have been settled
// in the shared state while this one ran (a line reclaimed from a worker that stalled
// past its lease runs twice at once, in two processes or in one), which the check at
// the start of a run (RunLine's Retry) cannot see: the shared settlement then charged
// nothing and recorded the entry as a rerun at 0 (tenancy's Ticket.Rerun), and the
// line is free, at the other run's cost. Without shared state there is no other run.
func (l *lineOutcome) settled(tk *tenancy.Ticket, e tenancy.Entry, charged money.Money) tenancy.Entry {
	if prior, ok := tk.Rerun(); ok {
		e = tenancy.AsRerun(e)
		l.free, l.prior = true, prior
	}
	l.e, l.cost = e, charged
	return e
}

// RunLine runs one batch line (batch.LineRunner): the tenant's request body through
// the core (runCore: serve, as an interactive request would go, with no HTTP request),
// at batch priority. A refusal for now (429, 503: the tenant's budget, load) is told
// the batch's runner from the core's error, to run the line again later.
func (s *Server) RunLine(ctx context.Context, r batch.Request) batch.Response {
	pol, ok := s.book.Resolve(r.Tenant)
	if !ok {
		return batch.Response{StatusCode: 401, Body: []byte(`{"error":{"message":"the tenant is not configured on this server","type":"invalid_request_error"}}`)}
	}
	reqID := r.RequestID
	line := &lineOutcome{id: r.RequestID, discountRate: pol.BatchDiscount, maxCost: r.MaxCost}
	if r.Retry {
		// Charged before the restart (this ledger), or, with shared state, by another
		// process that died before its result was recorded (the line was reclaimed).
		var err error
		if line.prior, line.free, err = s.ten.LineCharged(r.Tenant, r.RequestID); err != nil {
			return batch.Response{Refused: batch.RefusedLoad, Until: s.now().Add(time.Second)}
		}
		if line.free { // charged before: run again for its output, charge nothing more
			reqID += tenancy.RerunSuffix
		}
	}
	c := s.lineCodec(r.Endpoint)
	if aerr := s.elsewhereOnly(r.Body); aerr != nil {
		return batch.Response{StatusCode: c.errorStatus(aerr), Body: c.appendError(nil, aerr)}
	}
	j := &job{s: s, reqID: reqID, start: s.now(), keyID: r.KeyID, pol: pol, line: line, body: r.Body}
	res := s.runCore(j, c)
	if e := res.err; e != nil && (e.status == 429 || e.status == 503) {
		// Refused for now: the line runs again later (the batch's runner waits).
		now := s.now()
		if e.code == "insufficient_quota" {
			y, m, d := now.UTC().Date()
			return batch.Response{Refused: batch.RefusedBudget, Until: time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC)}
		}
		return batch.Response{Refused: batch.RefusedLoad, Until: now.Add(time.Duration(max(e.retry, 1)) * time.Second)}
	}
	if res.err == nil && (res.status == 429 || res.status == 503) {
		// An upstream's own 429 or 503, passed through: its load, for a second.
		return batch.Response{Refused: batch.RefusedLoad, Until: s.now().Add(time.Second)}
	}
	cost := line.cost
	if line.free {
		cost = line.prior
	}
	return batch.Response{StatusCode: res.status, Body: res.body, PromptTokens: line.e.PromptTokens,
		CompletionTokens: line.e.CompletionTokens, Cost: cost}
}

// Check is batch.Checker: the line's body must parse, its model or tier must be one
// the plan allows, and its worst case is the largest of the models it may run on
// (with the plan's batch discount). A model only other processes sharing the
// registry serve is checked from their announcements (checkRemote): the line will
// run on one of them (batch.RedisQueue hands it only to a process serving it).
func (s *Server) Check(tenant, endpoint string, body []byte) (money.Money, error) {
	pol, ok := s.book.Resolve(tenant)
	if !ok {
		return 0, errors.New("the tenant is not configured on this server")
	}
	j := &job{s: s, pol: pol}
	j.plans = j.planBuf[:0]
	if aerr := s.lineCodec(endpoint).decode(&j.in, body, tenant); aerr != nil {
		return 0, aerr
	}
	if j.in.stream {
		return 0, badRequest("stream", "a batch request cannot stream")
	}
	if aerr := checkSchemas(&j.in.feat, s.eng); aerr != nil {
		return 0, aerr
	}
	var h fasthttp.RequestHeader
	if name := j.in.p.Model; s.peer != nil && forwardable(&h, &j.in) && s.models[name] == nil && pol.AllowsModel(name) {
		if r, ok := s.remoteModels()[name]; ok {
			w, err := s.checkRemote(&j.in, name, r)
			if err != nil {
				return 0, err
			}
			return discounted(w, pol.BatchDiscount), nil
		}
	}
	rt, aerr := s.routeOf(&h, &j.in, pol)
	if aerr != nil {
		return 0, aerr
	}
	j.rt = rt
	if m := rt.named; m != nil {
		p := j.planFor(m)
		if p.err != nil {
			return 0, p.err
		}
		return discounted(m.price.Cost(p.nPrompt, p.billedOut(j.in.feat.N)), pol.BatchDiscount), nil
	}
	var worst money.Money
	found := false
	var last error = errors.New("no model the plan allows serves this request")
	allowed := pol.AllowedTiers()
	for t := range s.set.Tiers {
		if !allowed[t] || (rt.mode == tiers.ModeFixed && tiers.Tier(t) != rt.tier) {
			continue
		}
		for _, c := range s.set.Tiers[t] {
			m, _, ok := s.candidate(pol, c.Model)
			if !ok {
				continue
			}
			p := j.planFor(m)
			if p.err != nil {
				last = p.err
				continue
			}
			found = true
			worst = max(worst, m.price.Cost(p.nPrompt, p.billedOut(j.in.feat.N)))
		}
	}
	// The line may run on another process (batch.RedisQueue places it on the stream of
	// the best tier it may use, LineModel): its models of the tiers the line may use.
	walk := s.tierWalk(rt, pol)
	for name, r := range s.remoteModels() {
		if s.models[name] != nil || !pol.AllowsModel(name) || !slices.ContainsFunc(walk, func(t tiers.Tier) bool { return r.in[t] }) {
			continue
		}
		if w, err := s.checkRemote(&j.in, name, r); err == nil {
			found = true
			worst = max(worst, w)
		} else if !found {
			last = err
		}
	}
	if !found {
		return 0, last
	}
	return discounted(worst, pol.BatchDiscount), nil
}

// tierWalk is the tiers a request routed by tier may use, best first, that the plan
// allows (as job.maybeForwardTier walks them).
func (s *Server) tierWalk(rt route, pol *policies.Policy) []tiers.Tier {
	top, bottom := rt.mode.Top(), tiers.Fast
	if rt.mode == tiers.ModeFixed {
		top, bottom = rt.tier, rt.tier
	}
	allowed := pol.AllowedTiers()
	var out []tiers.Tier
	for t := top; t >= bottom; t-- {
		if allowed[t] {
			out = append(out, t)
		}
	}
	return out
}

// lineCodec is the codec of a batch line's endpoint (batch.Request.Endpoint, one of
// batch.ValidEndpoint's): OpenAI's chat or completions, the Responses API (its
// responses stored as the line's store says, by default), or Anthropic's Messages.
func (s *Server) lineCodec(endpoint string) codec {
	switch endpoint {
	case "/v1/responses":
		return s.responses
	case "/v1/messages":
		return messagesAPI
	}
	return codecForEndpoint(endpoint)
}

// checkRemote prices a batch line for a model only other processes serve, from what
// they announce: the output (of each of its n choices) bounded by max_tokens, else the
// model's length limit, and
// the prompt by what the limit leaves; at the highest price and limit announced
// (before the batch discount). The process running the line checks it
// again in full (tokens, features, the limit) and charges its actual cost.
func (s *Server) checkRemote(in *input, name string, r remoteModel) (money.Money, error) {
	if len(r.batch) == 0 {
		return 0, &apiError{status: 400, typ: "invalid_request_error", code: "model_not_batched", param: "model", reason: "bad_request",
			message: "the model '" + name + "' is served by other processes sharing this Redis (" + strings.Join(r.nodes, ", ") +
				"), none of which runs batch lines (the Batch API is off there)"}
	}
	out := in.maxTokens
	switch {
	case r.maxLen > 0 && out > r.maxLen:
		return 0, badRequest(in.maxField, in.maxField+" is "+strconv.Itoa(out)+", over the model's limit of "+strconv.Itoa(r.maxLen)+" tokens")
	case out == 0 && !in.scoreOnly && r.maxLen == 0:
		return 0, badRequest(in.maxField, "the model '"+name+"' is served by other processes ("+strings.Join(r.nodes, ", ")+
			") whose length limit is not known here yet (not loaded there): set "+in.maxField+" to price the line")
	case out == 0 && !in.scoreOnly:
		out = r.maxLen
	}
	// This process cannot tokenize for the model (nor render its chat template, which
	// may add a default system prompt): the prompt is bounded by what the limit leaves
	// of it, which the process running the line enforces; without a known limit, by
	// its bytes as for an upstream model (an estimate: a template may add more).
	nPrompt := in.promptBytes + 16*max(1, len(in.msgs))
	if r.maxLen > 0 {
		nPrompt = r.maxLen - out
	}
	return r.price.Cost(nPrompt, out*in.feat.N), nil
}

// LineModel is batch.Placer: where a batch line goes. A line naming a model goes to
// the processes serving it (the model's id); one routed by tier to the processes
// with a model of the best tier it may use that this process or another has (as
// job.maybeForwardTier chooses, without the load: "tier:NAME"), whose tier router
// then chooses among its models; "" (any process) when it cannot be parsed or no
// process has a tier it may use: it fails wherever it runs.
func (s *Server) LineModel(r batch.Request) string {
	pol, ok := s.book.Resolve(r.Tenant)
	if !ok {
		return ""
	}
	var in input
	if s.lineCodec(r.Endpoint).decode(&in, r.Body, r.Tenant) != nil {
		return ""
	}
	var h fasthttp.RequestHeader
	if forwardable(&h, &in) {
		return in.p.Model
	}
	rt, aerr := s.routeOf(&h, &in, pol)
	if aerr != nil {
		return ""
	}
	remote := s.remoteModels()
	for _, t := range s.tierWalk(rt, pol) {
		for _, c := range s.set.Tiers[t] {
			if s.allowsCandidate(pol, c.Model) {
				return "tier:" + t.String()
			}
		}
		for name, r := range remote {
			if r.in[t] && len(r.batch) > 0 && pol.AllowsModel(name) {
				return "tier:" + t.String()
			}
		}
	}
	return ""
}

// LineModels is batch.Placer: this process runs batch lines of each of its models,
// and those routed to each tier it has a model of ("tier:NAME").
func (s *Server) LineModels() []string {
	out := slices.Clone(s.order)
	for t := range s.set.Tiers {
		if len(s.set.Tiers[t]) > 0 {
			out = append(out, "tier:"+tiers.Tier(t).String())
		}
	}
	return out
}

// elsewhereOnly refuses a batch line naming a model that only other processes sharing
// the registry serve, if one reaches this process's worker: batch lines are never
// forwarded (each runs where a worker takes it, charged at the batch discount in
// that process's ledger), and batch.RedisQueue hands such a line to a process serving
// its model, so only a queue that does not place lines brings one here.
func (s *Server) elsewhereOnly(body []byte) *apiError {
	if s.peer == nil {
		return nil
	}
	var in struct {
		Model string `json:"model"`
	}
	if json.Unmarshal(body, &in) != nil || in.Model == "" {
		return nil
	}
	if _, ok := s.models[in.Model]; ok {
		return nil
	}
	r, ok := s.remoteModels()[in.Model]
	if !ok {
		return nil // nowhere: the usual model_not_found
	}
	return &apiError{status: 400, typ: "invalid_request_error", code: "model_not_on_this_process", param: "model", reason: "bad_request",
		message: "the model '" + in.Model + "' is served by other processes sharing this Redis (" + strings.Join(r.nodes, ", ") +
			"), not by this one ('" + s.peer.nodeID + "'), which ran this line: batch lines are not forwarded between processes"}
}

// handleBatchAPI serves /v1/files... and /v1/batches....
func (s *Server) handleBatchAPI(ctx *fasthttp.RequestCtx, reqID string) {
	if s.batches == nil {
		s.writeError(ctx, reqID, &apiError{status: 404, typ: "invalid_request_error",
			message: "the Batch API is not enabled on this server", reason: "not_found"})
		return
	}
	keyID, pol, aerr := s.authenticate(ctx)
	if aerr != nil {
		s.writeError(ctx, reqID, aerr)
		return
	}
	path, method := string(ctx.Path()), string(ctx.Method())
	parts := strings.Split(strings.TrimPrefix(path, "/v1/"), "/")
	st := s.batches.m.Store()
	tenant := pol.Tenant
	notFound := func(what, id string) {
		s.writeError(ctx, reqID, &apiError{status: 404, typ: "invalid_request_error", code: "not_found",
			message: "No such " + what + ": '" + id + "'", reason: "not_found"})
	}
	allow := func(m string) bool { return s.method(ctx, reqID, m) }
	switch {
	case parts[0] == "files" && len(parts) == 1:
		if method == "GET" {
			fs, err := st.Files(tenant)
			if err != nil {
				s.internal(ctx, reqID, err)
				return
			}
			data := make([]any, 0, len(fs))
			now := s.now()
			for i := range fs {
				if !fs[i].Expired(now) {
					data = append(data, fileObject(&fs[i]))
				}
			}
			writeJSON(ctx, 200, map[string]any{"object": "list", "data": data, "has_more": false})
			return
		}
		if allow("POST") {
			s.uploadFile(ctx, reqID, pol)
		}
	case parts[0] == "files" && len(parts) == 2:
		id := parts[1]
		switch method {
		case "DELETE":
			if _, err := s.liveFile(tenant, id); err != nil {
				notFound("file", id)
			} else if err := st.DeleteFile(tenant, id); errors.Is(err, batch.ErrNotFound) {
				notFound("file", id)
			} else if err != nil {
				s.internal(ctx, reqID, err)
			} else {
				writeJSON(ctx, 200, map[string]any{"id": id, "object": "file", "deleted": true})
			}
		default:
			if !allow("GET") {
				return
			}
			f, err := s.liveFile(tenant, id)
			if err != nil {
				notFound("file", id)
				return
			}
			writeJSON(ctx, 200, fileObject(&f))
		}
	case parts[0] == "files" && len(parts) == 3 && parts[2] == "content":
		if !allow("GET") {
			return
		}
		r, f, err := st.Open(tenant, parts[1])
		if err == nil && f.Expired(s.now()) {
			r.Close()
			err = batch.ErrNotFound
		}
		if err != nil {
			notFound("file", parts[1])
			return
		}
		ctx.SetContentType("application/jsonl")
		ctx.SetBodyStream(r, int(f.Bytes)) // fasthttp closes r when sent
	case parts[0] == "batches" && len(parts) == 1:
		if method == "GET" {
			s.listBatches(ctx, reqID, tenant)
			return
		}
		if allow("POST") {
			s.createBatch(ctx, reqID, pol, keyID)
		}
	case parts[0] == "batches" && len(parts) == 2:
		if !allow("GET") {
			return
		}
		j, err := st.Job(tenant, parts[1])
		if err != nil {
			notFound("batch", parts[1])
			return
		}
		writeJSON(ctx, 200, batchObject(&j))
	case parts[0] == "batches" && len(parts) == 3 && parts[2] == "cancel":
		if !allow("POST") {
			return
		}
		j, err := s.batches.m.Cancel(tenant, parts[1])
		if err != nil {
			notFound("batch", parts[1])
			return
		}
		writeJSON(ctx, 200, batchObject(&j))
	default:
		s.writeError(ctx, reqID, &apiError{status: 404, typ: "invalid_request_error",
			message: "unknown URL " + path, reason: "not_found"})
	}
}

// liveFile is tenant's file id unless it has expired (ErrNotFound: an expired file
// is gone to the API before the sweeper deletes it).
func (s *Server) liveFile(tenant, id string) (batch.File, error) {
	f, err := s.batches.m.Store().File(tenant, id)
	if err == nil && f.Expired(s.now()) {
		err = batch.ErrNotFound
	}
	return f, err
}

func (s *Server) internal(ctx *fasthttp.RequestCtx, reqID string, err error) {
	s.log.Error("batch api", "request_id", reqID, "error", err)
	s.writeError(ctx, reqID, &apiError{status: 500, typ: "server_error", message: "internal error", reason: "internal"})
}

// uploadFile is POST /v1/files: multipart with "file" and "purpose" (only "batch"),
// and optionally OpenAI's expires_after[anchor] ("created_at") and
// expires_after[seconds] (3600 to 2592000; default 30 days). It is rate limited
// (the plan's file_uploads_per_minute) before any of the body is read. The body is
// read as a stream (it may be far over max_body_bytes): the file part is written to
// disk as it arrives, its lines and bytes counted as they pass, and refused as soon
// as it is over MaxFileBytes or MaxFileLines or the tenant's files_max_bytes
// (files_max_count before it starts); the file is never held in memory.
func (s *Server) uploadFile(ctx *fasthttp.RequestCtx, reqID string, pol *policies.Policy) {
	tenant := pol.Tenant
	if aerr := s.admitUpload(pol); aerr != nil {
		ctx.SetConnectionClose() // the body is not read
		s.writeError(ctx, reqID, aerr)
		return
	}
	mt, params, err := mime.ParseMediaType(string(ctx.Request.Header.ContentType()))
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		ctx.SetConnectionClose()
		s.writeError(ctx, reqID, badRequest("file", "the body must be multipart/form-data with 'file' and 'purpose'"))
		return
	}
	var body io.Reader
	if ctx.Request.IsBodyStream() {
		body = ctx.RequestBodyStream()
	} else {
		body = bytes.NewReader(ctx.PostBody())
	}
	st := s.batches.m.Store()
	// The form around the file may add a little to it.
	mr := multipart.NewReader(io.LimitReader(body, batch.MaxFileBytes+1<<20), params["boundary"])
	var f *batch.File
	purpose := ""
	var exp expiresAfter
	expSet := false
	fail := func(e *apiError) {
		if f != nil {
			st.DeleteFile(tenant, f.ID)
		}
		ctx.SetConnectionClose() // the rest of the body may be unread
		s.writeError(ctx, reqID, e)
	}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			fail(badRequest("file", "the body must be multipart/form-data with 'file' and 'purpose': "+err.Error()))
			return
		}
		switch part.FormName() {
		case "purpose":
			b, _ := io.ReadAll(io.LimitReader(part, 64))
			purpose = string(b)
		case "expires_after[anchor]":
			b, _ := io.ReadAll(io.LimitReader(part, 64))
			exp.Anchor, expSet = string(b), true
		case "expires_after[seconds]":
			b, _ := io.ReadAll(io.LimitReader(part, 64))
			n, err := strconv.ParseInt(string(b), 10, 64)
			if err != nil {
				fail(badRequest("expires_after.seconds", "expires_after.seconds must be a whole number of seconds"))
				return
			}
			exp.Seconds, expSet = &n, true
		case "file":
			if f != nil {
				fail(badRequest("file", "one 'file' part is required"))
				return
			}
			now := s.now()
			nf, err := st.PutFileWith(tenant, "batch", part.FileName(), part, now,
				batch.PutOptions{Limits: fileLimits(pol), ExpiresAt: now.Add(batch.DefaultFileExpiry).Unix()})
			var qe *batch.QuotaError
			if errors.As(err, &qe) {
				fail(quotaError(qe))
				return
			}
			if errors.Is(err, batch.ErrTooLarge) {
				fail(&apiError{status: 400, typ: "invalid_request_error", param: "file",
					message: "the file is over the limit of " + strconv.Itoa(batch.MaxFileBytes>>20) + " MB or " +
						strconv.Itoa(batch.MaxFileLines) + " lines", reason: "bad_request"})
				return
			}
			if errors.Is(err, batch.ErrRead) {
				fail(badRequest("file", "reading the upload: "+err.Error()))
				return
			}
			if err != nil {
				fail(&apiError{status: 500, typ: "server_error", message: "internal error", reason: "internal"})
				s.log.Error("batch api", "request_id", reqID, "error", err)
				return
			}
			f = &nf
		default:
			io.Copy(io.Discard, io.LimitReader(part, 1<<20))
		}
		part.Close()
	}
	// Read the body to its end (an epilogue, a chunked body's last chunk), so that
	// the connection's next request starts where it should.
	if n, _ := io.Copy(io.Discard, io.LimitReader(body, 64<<10)); n == 64<<10 {
		ctx.SetConnectionClose()
	}
	if purpose != "batch" {
		fail(badRequest("purpose", "purpose must be 'batch'"))
		return
	}
	if f == nil {
		fail(badRequest("file", "one 'file' part is required"))
		return
	}
	if expSet {
		d, aerr := exp.check("expires_after")
		if aerr != nil {
			fail(aerr)
			return
		}
		if *f, err = st.SetFileExpiry(tenant, f.ID, f.CreatedAt+int64(d/time.Second)); err != nil {
			fail(&apiError{status: 500, typ: "server_error", message: "internal error", reason: "internal"})
			s.log.Error("batch api", "request_id", reqID, "error", err)
			return
		}
	}
	writeJSON(ctx, 200, fileObject(f))
}

func fileObject(f *batch.File) map[string]any {
	o := map[string]any{"id": f.ID, "object": "file", "bytes": f.Bytes, "created_at": f.CreatedAt,
		"filename": f.Filename, "purpose": f.Purpose, "status": "processed"}
	if f.ExpiresAt != 0 {
		o["expires_at"] = f.ExpiresAt
	}
	return o
}

// createBatch is POST /v1/batches. It is rate limited (the plan's
// batch_creates_per_minute) before anything else, and refused past the plan's
// batch_max_unfinished: the job's lines are read and priced only once it is admitted.
func (s *Server) createBatch(ctx *fasthttp.RequestCtx, reqID string, pol *policies.Policy, keyID string) {
	tenant := pol.Tenant
	if aerr := s.admitCreate(pol); aerr != nil {
		s.writeError(ctx, reqID, aerr)
		return
	}
	var in struct {
		InputFileID        string            `json:"input_file_id"`
		Endpoint           string            `json:"endpoint"`
		CompletionWindow   string            `json:"completion_window"`
		Metadata           map[string]string `json:"metadata"`
		OutputExpiresAfter *expiresAfter     `json:"output_expires_after"`
		LMLite             *struct {
			MaxCostUSD *float64 `json:"max_cost_usd"`
		} `json:"lmlite"`
	}
	if aerr := decodeBody(ctx.PostBody(), &in); aerr != nil {
		if merr := nonStringMetadata(ctx.PostBody(), aerr.param); merr != nil {
			aerr = merr
		}
		s.writeError(ctx, reqID, aerr)
		return
	}
	switch {
	case in.InputFileID == "":
		s.writeError(ctx, reqID, badRequest("input_file_id", "input_file_id is required"))
		return
	case !batch.ValidEndpoint(in.Endpoint):
		s.writeError(ctx, reqID, badRequest("endpoint", batch.EndpointMessage))
		return
	case in.CompletionWindow != "24h":
		s.writeError(ctx, reqID, badRequest("completion_window", "completion_window must be 24h"))
		return
	}
	if aerr := checkMetadata(in.Metadata); aerr != nil {
		s.writeError(ctx, reqID, aerr)
		return
	}
	var outExpiry time.Duration
	if in.OutputExpiresAfter != nil {
		var aerr *apiError
		if outExpiry, aerr = in.OutputExpiresAfter.check("output_expires_after"); aerr != nil {
			s.writeError(ctx, reqID, aerr)
			return
		}
	}
	var cap money.Money
	if v, ok := in.Metadata["max_cost_usd"]; ok {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || !validFloat(x) || x <= 0 {
			s.writeError(ctx, reqID, badRequest("metadata.max_cost_usd", "max_cost_usd must be a positive number"))
			return
		}
		cap = money.USD(x)
	}
	if in.LMLite != nil && in.LMLite.MaxCostUSD != nil {
		x := *in.LMLite.MaxCostUSD
		if !validFloat(x) || x <= 0 {
			s.writeError(ctx, reqID, badRequest("lmlite.max_cost_usd", "max_cost_usd must be a positive number"))
			return
		}
		cap = money.USD(x)
	}
	_, err := s.liveFile(tenant, in.InputFileID)
	var j batch.Job
	if err == nil {
		j, err = s.batches.m.CreateJob(batch.Job{Tenant: tenant, KeyID: keyID, InputFileID: in.InputFileID, Endpoint: in.Endpoint,
			CompletionWindow: in.CompletionWindow, Metadata: in.Metadata, Cap: cap, OutputExpiresAfter: int64(outExpiry / time.Second)})
	}
	var tm *batch.TooManyError
	if errors.As(err, &tm) {
		s.writeError(ctx, reqID, &apiError{status: 429, typ: "requests", code: "batch_limit_exceeded",
			message: "you have " + strconv.Itoa(tm.Max) + " batches not yet ended, your plan's batch_max_unfinished: cancel one or wait for one to end",
			reason:  "quota_batch_max_unfinished"})
		return
	}
	if errors.Is(err, batch.ErrNotFound) {
		s.writeError(ctx, reqID, &apiError{status: 404, typ: "invalid_request_error", code: "not_found", param: "input_file_id",
			message: "No such file: '" + in.InputFileID + "'", reason: "not_found"})
		return
	}
	if err != nil {
		s.internal(ctx, reqID, err)
		return
	}
	writeJSON(ctx, 200, batchObject(&j))
}

// listBatches is GET /v1/batches?after=&limit= (newest first).
func (s *Server) listBatches(ctx *fasthttp.RequestCtx, reqID, tenant string) {
	args := ctx.QueryArgs()
	limit := 20
	if v := args.Peek("limit"); len(v) > 0 {
		n, err := strconv.Atoi(string(v))
		if err != nil || n < 1 || n > 100 {
			s.writeError(ctx, reqID, badRequest("limit", "limit must be between 1 and 100"))
			return
		}
		limit = n
	}
	js, more, err := s.batches.m.Store().Jobs(tenant, string(args.Peek("after")), limit)
	if err != nil {
		s.internal(ctx, reqID, err)
		return
	}
	data := make([]any, 0, len(js))
	for i := range js {
		data = append(data, batchObject(&js[i]))
	}
	out := map[string]any{"object": "list", "data": data, "has_more": more, "first_id": nil, "last_id": nil}
	if len(js) > 0 {
		out["first_id"], out["last_id"] = js[0].ID, js[len(js)-1].ID
	}
	writeJSON(ctx, 200, out)
}

// batchObject is OpenAI's batch object, with lmlite's cap, spend and pause.
func batchObject(j *batch.Job) map[string]any {
	ts := func(t int64) any {
		if t == 0 {
			return nil
		}
		return t
	}
	str := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	o := map[string]any{
		"id": j.ID, "object": "batch", "endpoint": j.Endpoint, "input_file_id": j.InputFileID,
		"completion_window": j.CompletionWindow, "status": j.Status,
		"output_file_id": str(j.OutputFileID), "error_file_id": str(j.ErrorFileID),
		"created_at": j.CreatedAt, "in_progress_at": ts(j.InProgressAt), "expires_at": ts(j.ExpiresAt),
		"finalizing_at": ts(j.FinalizingAt), "completed_at": ts(j.CompletedAt), "failed_at": ts(j.FailedAt),
		"expired_at": ts(j.ExpiredAt), "cancelling_at": ts(j.CancellingAt), "cancelled_at": ts(j.CancelledAt),
		"request_counts": j.Counts, "metadata": j.Metadata, "errors": nil,
	}
	if j.Metadata == nil {
		o["metadata"] = nil
	}
	if len(j.Errors) > 0 {
		o["errors"] = map[string]any{"object": "list", "data": j.Errors}
	}
	lm := map[string]any{"spent_usd": j.Spent.Dollars()}
	if j.Cap > 0 {
		lm["max_cost_usd"] = j.Cap.Dollars()
	}
	if j.PausedReason != "" {
		lm["paused_reason"] = j.PausedReason
	}
	o["lmlite"] = lm
	return o
}

// batchCollector reports, at scrape time, the jobs by status, and the lines and spend
// of each unfinished job.
type batchCollector struct {
	st  *batch.Store
	log interface{ Error(string, ...any) }
}

var (
	batchJobsDesc  = prometheus.NewDesc("lmlite_batch_jobs", "Batch jobs by status.", []string{"status"}, nil)
	batchLinesDesc = prometheus.NewDesc("lmlite_batch_lines", "Lines of the unfinished batch jobs by state (total, completed, failed).", []string{"tenant", "batch", "state"}, nil)
	batchSpendDesc = prometheus.NewDesc("lmlite_batch_spend_usd", "Spend of each unfinished batch job.", []string{"tenant", "batch"}, nil)
)

func (c *batchCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- batchJobsDesc
	ch <- batchLinesDesc
	ch <- batchSpendDesc
}

func (c *batchCollector) Collect(ch chan<- prometheus.Metric) {
	byStatus := map[batch.Status]int{}
	err := c.st.EachJob(func(j *batch.Job) {
		byStatus[j.Status]++
		if j.Status.Terminal() {
			return
		}
		for state, n := range map[string]int{"total": j.Counts.Total, "completed": j.Counts.Completed, "failed": j.Counts.Failed} {
			ch <- prometheus.MustNewConstMetric(batchLinesDesc, prometheus.GaugeValue, float64(n), j.Tenant, j.ID, state)
		}
		ch <- prometheus.MustNewConstMetric(batchSpendDesc, prometheus.GaugeValue, j.Spent.Dollars(), j.Tenant, j.ID)
	})
	if err != nil {
		c.log.Error("batch metrics", "error", err)
	}
	for _, st := range []batch.Status{batch.Validating, batch.Failed, batch.InProgress, batch.Finalizing,
		batch.Completed, batch.Expired, batch.Cancelling, batch.Cancelled} {
		ch <- prometheus.MustNewConstMetric(batchJobsDesc, prometheus.GaugeValue, float64(byStatus[st]), string(st))
	}
}

// nonStringMetadata is the 400 for a batch whose metadata has a value that is not a
// string (OpenAI's metadata values are strings), naming the key, when that is why
// decoding the body failed (param, the field at fault, is in metadata); nil otherwise.
func nonStringMetadata(body []byte, param string) *apiError {
	if !strings.HasPrefix(param, "metadata.") {
		return nil
	}
	var raw struct {
		Metadata map[string]json.RawMessage `json:"metadata"`
	}
	if json.Unmarshal(body, &raw) != nil {
		return nil
	}
	keys := make([]string, 0, len(raw.Metadata))
	for k, v := range raw.Metadata {
		if len(v) == 0 || v[0] != '"' {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 || len(keys[0]) > 64 {
		return badRequest("metadata", "metadata must be an object of at most 16 keys of 64 characters whose values are strings")
	}
	slices.Sort(keys)
	k := keys[0]
	if k == "max_cost_usd" {
		return badRequest("metadata.max_cost_usd", `metadata.max_cost_usd must be a string such as "0.50" (metadata values are strings; lmlite.max_cost_usd takes a number)`)
	}
	return badRequest("metadata."+k, "metadata."+k+" must be a string (metadata values are strings)")
}
