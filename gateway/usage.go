package gateway

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/lmlite/lmlite/money"
	"github.com/lmlite/lmlite/policies"
	"github.com/lmlite/lmlite/tenancy"
	"github.com/lmlite/lmlite/usage"
)

// Usage: the rollups written at settlement (package usage) and the API that reads
// them, in OpenAI's organization usage and costs shapes, scoped to the caller:
//
//	GET /v1/organization/usage/completions   tokens and requests per bucket
//	GET /v1/organization/costs               money per bucket
//	GET /v1/lmlite/limits                    the caller's plan, limits and usage against them
//
// A tenant's key sees its own tenant only; the admin key sees every tenant, or those
// named by tenant_ids (or project_ids: a tenant is OpenAI's project here, and
// group_by=project_id groups by tenant).

// initUsage sets the server's rollups: r, or in-memory ones loaded from the rollups
// the ledger's store keeps beside the ledger (usage.PutBolt; the ledger is not read)
// and following the ledger from there (tenancy.Store.FollowRollups: the store counts
// each entry as its group is written). The ledger is the one feed of usage: a settled
// request is counted from its entry, a refusal before admission from the entry refuse
// writes (coalesced: counted in the followed rollups at once, written within a
// second); the usage API, the limits and the dashboards read the same numbers, before
// and after a restart.
func (s *Server) initUsage(r usage.Rollups) error {
	if r != nil {
		s.usage = r
		return nil
	}
	m := usage.NewMemory()
	s.usage = m
	if s.ten == nil || s.ten.Store() == nil {
		return nil
	}
	return s.ten.Store().FollowRollups(m, s.now())
}

// refusalOf classifies a refused request by its status and the gateway's reason.
func refusalOf(status int, apiReason string) usage.Reason {
	switch {
	case apiReason == "rate_concurrency":
		return usage.Concurrency
	case strings.HasPrefix(apiReason, "rate_"):
		return usage.Rate
	case status == 429:
		return usage.Budget
	case status == 403:
		return usage.Policy
	case status == 400 || status == 404 || status == 413 || status == 422:
		return usage.BadRequest
	}
	return usage.NotRefused
}

// refuse answers a refusal before admission (the tenant is known) and ledgers it
// (tenancy.Entry.NotAdmitted: a refusal in the rollups, not a request): coalesced
// with the tenant's other refusals of the same key, model and reason into one entry
// per flush (tenancy.Store.RecordRefusal), so the answer waits for no commit and a
// flood of refusals is a few ledger entries.
func (j *job) refuse(ctx *fasthttp.RequestCtx, e *apiError) {
	if r := refusalOf(e.status, e.reason); r != usage.NotRefused && j.s.ten != nil {
		tk := j.s.ten.NotAdmitted(j.s.quota(j.pol))
		_, err := tk.Settle(tenancy.Entry{Time: j.s.now(), RequestID: j.reqID, ClientRequestID: j.clientID, KeyID: j.keyID,
			Tenant: j.pol.Tenant, Status: e.status, Refused: r.String(), NotAdmitted: true})
		if err != nil {
			j.s.log.Error("ledger", "request_id", j.reqID, "error", err)
		}
	}
	j.writeError(ctx, e)
}

// handleUsageAPI serves the usage endpoints; false when path is not one of them.
func (s *Server) handleUsageAPI(ctx *fasthttp.RequestCtx, reqID string, path []byte) bool {
	var costs bool
	switch string(path) {
	case "/v1/organization/usage/completions":
	case "/v1/organization/costs":
		costs = true
	case "/v1/lmlite/limits":
		if s.method(ctx, reqID, "GET") {
			s.handleLimits(ctx, reqID)
		}
		return true
	default:
		return false
	}
	if !s.method(ctx, reqID, "GET") {
		return true
	}
	tenants, aerr := s.usageScope(ctx)
	if aerr != nil {
		s.writeError(ctx, reqID, aerr)
		return true
	}
	q, page, aerr := parseUsageQuery(ctx.QueryArgs(), tenants, s.now())
	if aerr != nil {
		s.writeError(ctx, reqID, aerr)
		return true
	}
	bs, err := s.usage.Query(q.Query)
	if errors.Is(err, usage.ErrTooManyBuckets) {
		s.writeError(ctx, reqID, badRequest("limit", err.Error()))
		return true
	}
	if err != nil { // the shared rollups (Redis) cannot be read
		s.writeError(ctx, reqID, &apiError{status: 503, typ: "server_error", code: "usage_unavailable",
			message: "usage rollups unavailable: " + err.Error(), retry: 1, reason: "unavailable"})
		return true
	}
	writeJSON(ctx, 200, usagePage(bs, q, page, costs))
	return true
}

// usageScope is the tenants the caller may see: its own (a tenant key), or for the
// admin key those of tenant_ids / project_ids (nil: every tenant).
func (s *Server) usageScope(ctx *fasthttp.RequestCtx) ([]string, *apiError) {
	key, _ := bytes.CutPrefix(ctx.Request.Header.Peek("Authorization"), []byte("Bearer "))
	var asked, askedBy []string // askedBy[i]: the parameter that named asked[i]
	for _, name := range []string{"tenant_ids", "tenant_ids[]", "project_ids", "project_ids[]"} {
		for _, v := range ctx.QueryArgs().PeekMulti(name) {
			for _, t := range strings.Split(string(v), ",") {
				if t != "" {
					asked = append(asked, t)
					askedBy = append(askedBy, strings.TrimSuffix(name, "[]"))
				}
			}
		}
	}
	if s.admin != nil && len(key) > 0 && subtle.ConstantTimeCompare(key, s.admin) == 1 {
		return asked, nil
	}
	_, pol, aerr := s.authenticate(ctx)
	if aerr != nil {
		return nil, aerr
	}
	for i, t := range asked {
		if t != pol.Tenant {
			return nil, &apiError{status: 403, typ: "invalid_request_error", code: "permission_denied", param: askedBy[i],
				message: "a tenant's key sees its own usage only; " + askedBy[i] + " needs the admin key", reason: "forbidden"}
		}
	}
	return []string{pol.Tenant}, nil
}

// usageQuery is a parsed usage or costs request.
type usageQuery struct {
	usage.Query
	limit int
	end   time.Time // the request's end_time; Query.End is this page's
}

// Default and largest limits per bucket width, OpenAI's.
var (
	defaultLimit = [...]int{usage.Minute: 60, usage.Hour: 24, usage.Day: 7}
	maxLimit     = [...]int{usage.Minute: 1440, usage.Hour: 168, usage.Day: 31}
)

// maxUnixTime is the largest start_time or end_time: 9999-12-31T23:59:59Z.
const maxUnixTime = 253402300799

// parseUsageQuery reads start_time (Unix seconds, inclusive, required), end_time
// (exclusive; default now), bucket_width (1m, 1h, 1d; default 1d), group_by (model,
// adapter, tier, project_id), limit (buckets per page) and page (the cursor of next_page).
func parseUsageQuery(a *fasthttp.Args, tenants []string, now time.Time) (usageQuery, time.Time, *apiError) {
	var q usageQuery
	q.Tenants = tenants
	unix := func(name string, def time.Time) (time.Time, *apiError) {
		v := a.Peek(name)
		if len(v) == 0 {
			if def.IsZero() {
				return def, badRequest(name, name+" is required (Unix seconds)")
			}
			return def, nil
		}
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil || n < 0 || n > maxUnixTime {
			// Bounded so that bucket arithmetic (a start plus limit widths) cannot overflow.
			return time.Time{}, badRequest(name, name+" must be Unix seconds from 0 to "+strconv.FormatInt(maxUnixTime, 10)+" (the end of year 9999)")
		}
		return time.Unix(n, 0).UTC(), nil
	}
	start, aerr := unix("start_time", time.Time{})
	if aerr != nil {
		return q, start, aerr
	}
	end, aerr := unix("end_time", now)
	if aerr != nil {
		return q, start, aerr
	}
	if !end.After(start) {
		return q, start, badRequest("end_time", "end_time must be after start_time")
	}
	q.Width = usage.Day
	if v := a.Peek("bucket_width"); len(v) > 0 {
		w, ok := usage.ParseWidth(string(v))
		if !ok {
			return q, start, badRequest("bucket_width", "bucket_width must be 1m, 1h or 1d")
		}
		q.Width = w
	}
	for _, name := range []string{"group_by", "group_by[]"} {
		for _, v := range a.PeekMulti(name) {
			for _, g := range strings.Split(string(v), ",") {
				switch g {
				case "model":
					q.ByModel = true
				case "tier":
					q.ByTier = true
				case "adapter":
					q.ByAdapter = true
				case "project_id", "tenant_id":
					q.ByTenant = true
				default:
					return q, start, badRequest("group_by", "group_by may be model, adapter, tier or project_id, not '"+g+"'")
				}
			}
		}
	}
	q.limit = defaultLimit[q.Width]
	if v := a.Peek("limit"); len(v) > 0 {
		n, err := strconv.Atoi(string(v))
		if err != nil || n < 1 || n > maxLimit[q.Width] {
			return q, start, badRequest("limit", "limit must be 1 to "+strconv.Itoa(maxLimit[q.Width])+" for bucket_width "+q.Width.String())
		}
		q.limit = n
	}
	pageStart := q.Width.Start(start)
	if v := a.Peek("page"); len(v) > 0 {
		t, ok := parseCursor(string(v))
		if !ok || t.Before(pageStart) || !t.Before(end) || !t.Equal(q.Width.Start(t)) {
			return q, start, badRequest("page", "page must be a next_page value of this query")
		}
		pageStart = t
	}
	// Buckets are whole: start_time is rounded down to its bucket's start, and the
	// last bucket is the one holding end_time - 1 s.
	q.Start, q.end = pageStart, end
	q.End = pageStart.Add(time.Duration(q.limit) * q.Width.Duration())
	if end.Before(q.End) {
		q.End = end
	}
	return q, pageStart, nil
}

func cursor(t time.Time) string {
	return "page_" + base64.RawURLEncoding.EncodeToString(strconv.AppendInt(nil, t.Unix(), 10))
}

func parseCursor(s string) (time.Time, bool) {
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(s, "page_"))
	if err != nil || !strings.HasPrefix(s, "page_") {
		return time.Time{}, false
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(n, 0).UTC(), true
}

// The response shapes: OpenAI's page of buckets; each result names what it is
// grouped by (null otherwise), and tier is lmlite's.
type (
	usagePageJSON struct {
		Object   string       `json:"object"`
		Data     []bucketJSON `json:"data"`
		HasMore  bool         `json:"has_more"`
		NextPage *string      `json:"next_page"`
	}
	bucketJSON struct {
		Object    string `json:"object"`
		StartTime int64  `json:"start_time"`
		EndTime   int64  `json:"end_time"`
		Results   []any  `json:"results"`
	}
	completionsResult struct {
		Object            string `json:"object"`
		InputTokens       int64  `json:"input_tokens"`
		OutputTokens      int64  `json:"output_tokens"`
		InputCachedTokens int64  `json:"input_cached_tokens"`
		InputAudioTokens  int64  `json:"input_audio_tokens"`
		OutputAudioTokens int64  `json:"output_audio_tokens"`
		NumModelRequests  int64  `json:"num_model_requests"`
		// lmlite's: the requests that waited for their model to load or their
		// worker process to start (scale to zero), and their total wait.
		NumColdStarts    int64   `json:"num_cold_starts"`
		ColdStartSeconds float64 `json:"cold_start_seconds"`
		// And the time their structured outputs' grammar masks took to compute.
		GrammarSeconds float64 `json:"grammar_seconds"`
		ProjectID      *string `json:"project_id"`
		UserID         *string `json:"user_id"`
		APIKeyID       *string `json:"api_key_id"`
		Model          *string `json:"model"`
		Batch          *bool   `json:"batch"`
		Tier           *string `json:"tier,omitempty"`
		// lmlite's: grouped by adapter, the LoRA adapter applied on model (absent:
		// the bare model, or not grouped by adapter).
		Adapter *string `json:"adapter,omitempty"`
	}
	costsResult struct {
		Object    string     `json:"object"`
		Amount    amountJSON `json:"amount"`
		LineItem  *string    `json:"line_item"`
		ProjectID *string    `json:"project_id"`
		Model     *string    `json:"model,omitempty"`
		Tier      *string    `json:"tier,omitempty"`
		Adapter   *string    `json:"adapter,omitempty"`
	}
	amountJSON struct {
		Value    float64 `json:"value"`
		Currency string  `json:"currency"`
	}
)

func usagePage(bs []usage.Bucket, q usageQuery, pageStart time.Time, costs bool) usagePageJSON {
	p := usagePageJSON{Object: "page", Data: make([]bucketJSON, 0, len(bs))}
	opt := func(on bool, v string) *string {
		if !on {
			return nil
		}
		return &v
	}
	for _, b := range bs {
		bj := bucketJSON{Object: "bucket", StartTime: b.Start.Unix(), EndTime: b.End.Unix(), Results: []any{}}
		for _, r := range b.Results {
			if costs {
				bj.Results = append(bj.Results, costsResult{Object: "organization.costs.result",
					Amount:    amountJSON{Value: r.Cost.Dollars(), Currency: "usd"},
					ProjectID: opt(q.ByTenant, r.Tenant), Model: opt(q.ByModel, r.Model), Tier: opt(q.ByTier, r.Tier), Adapter: opt(q.ByAdapter, r.Adapter)})
				continue
			}
			bj.Results = append(bj.Results, completionsResult{Object: "organization.usage.completions.result",
				InputTokens: r.InputTokens, OutputTokens: r.OutputTokens, InputCachedTokens: r.CachedTokens,
				NumModelRequests: r.Requests, NumColdStarts: r.ColdStarts, ColdStartSeconds: r.ColdStartTime.Seconds(), GrammarSeconds: r.GrammarTime.Seconds(), ProjectID: opt(q.ByTenant, r.Tenant), Model: opt(q.ByModel, r.Model),
				Tier: opt(q.ByTier, r.Tier), Adapter: opt(q.ByAdapter, r.Adapter)})
		}
		p.Data = append(p.Data, bj)
	}
	if next := pageStart.Add(time.Duration(q.limit) * q.Width.Duration()); next.Before(q.end) {
		c := cursor(next)
		p.HasMore, p.NextPage = true, &c
	}
	return p
}

// handleLimits answers the caller's plan, its money left per window, its rate and
// concurrency limits (null: none) and its current usage against them.
func (s *Server) handleLimits(ctx *fasthttp.RequestCtx, reqID string) {
	_, pol, aerr := s.authenticate(ctx)
	if aerr != nil {
		s.writeError(ctx, reqID, aerr)
		return
	}
	l, err := s.limitsOf(pol, s.now())
	if errors.Is(err, tenancy.ErrUnavailable) {
		s.writeError(ctx, reqID, unavailable(err))
		return
	}
	if err != nil {
		s.writeError(ctx, reqID, &apiError{status: 500, typ: "server_error", message: err.Error(), reason: "internal"})
		return
	}
	writeJSON(ctx, 200, l)
}

type (
	limitsJSON struct {
		Object  string            `json:"object"`
		Tenant  string            `json:"tenant"`
		Plan    string            `json:"plan"`
		Budgets map[string]window `json:"budgets"`
		Rate    rateJSON          `json:"rate_limits"`
		Usage   currentJSON       `json:"usage"`
		// Stored is the tenant's stored responses against its plan's quota; absent
		// when the server keeps none (Options.Responses) or its store did not answer.
		Stored *storedJSON `json:"stored_responses,omitempty"`
	}
	storedJSON struct {
		Count    int64  `json:"count"`
		Bytes    int64  `json:"bytes"`
		MaxCount *int64 `json:"max_count"` // null: no limit
		MaxBytes *int64 `json:"max_bytes"`
	}
	window struct {
		LimitUSD     *float64 `json:"limit_usd"`
		SpentUSD     float64  `json:"spent_usd"`
		RemainingUSD *float64 `json:"remaining_usd"`
		ResetsAt     int64    `json:"resets_at"`
	}
	rateJSON struct {
		RequestsPerSecond *float64 `json:"requests_per_second"`
		Burst             *int     `json:"burst"`
		TokensPerMinute   *int     `json:"tokens_per_minute"`
		MaxConcurrency    *int     `json:"max_concurrency"`
	}
	currentJSON struct {
		InFlight           int   `json:"in_flight"`
		RequestsThisMinute int64 `json:"requests_this_minute"`
		TokensThisMinute   int64 `json:"tokens_this_minute"`
		RefusalsThisMinute int64 `json:"refusals_this_minute"`
		RequestsToday      int64 `json:"requests_today"`
	}
)

func (s *Server) limitsOf(pol *policies.Policy, now time.Time) (limitsJSON, error) {
	now = now.UTC()
	day, month, err := s.ten.Spent(pol.Tenant, now) // every process's, with Redis
	if err != nil {
		return limitsJSON{}, err
	}
	win := func(limit, spent money.Money, reset time.Time) window {
		w := window{SpentUSD: spent.Dollars(), ResetsAt: reset.Unix()}
		if limit > 0 {
			l, r := limit.Dollars(), max(0, limit-spent).Dollars()
			w.LimitUSD, w.RemainingUSD = &l, &r
		}
		return w
	}
	dayStart := usage.Day.Start(now)
	monthStart := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	l := limitsJSON{Object: "lmlite.limits", Tenant: pol.Tenant, Plan: pol.Plan, Budgets: map[string]window{
		"day":   win(pol.DailyBudget, day, dayStart.Add(24*time.Hour)),
		"month": win(pol.MonthlyBudget, month, monthStart.AddDate(0, 1, 0)),
	}}
	if pol.RequestsPerSecond > 0 {
		r, b := pol.RequestsPerSecond, pol.Burst
		l.Rate.RequestsPerSecond, l.Rate.Burst = &r, &b
	}
	if pol.TokensPerMinute > 0 {
		n := pol.TokensPerMinute
		l.Rate.TokensPerMinute = &n
	}
	if pol.MaxConcurrency > 0 {
		n := pol.MaxConcurrency
		l.Rate.MaxConcurrency = &n
	}
	l.Usage.InFlight = s.ten.InFlight(pol.Tenant)
	one := []string{pol.Tenant}
	if bs, err := s.usage.Query(usage.Query{Tenants: one, Start: now, End: now.Add(time.Nanosecond), Width: usage.Minute}); err == nil && len(bs) == 1 && len(bs[0].Results) == 1 {
		c := bs[0].Results[0]
		l.Usage.RequestsThisMinute, l.Usage.TokensThisMinute, l.Usage.RefusalsThisMinute = c.Requests, c.InputTokens+c.OutputTokens, c.RefusedTotal()
	}
	if bs, err := s.usage.Query(usage.Query{Tenants: one, Start: now, End: now.Add(time.Nanosecond), Width: usage.Day}); err == nil && len(bs) == 1 && len(bs[0].Results) == 1 {
		l.Usage.RequestsToday = bs[0].Results[0].Requests
	}
	l.Stored = s.storedOf(pol)
	return l, nil
}

// storedOf is the tenant's stored responses against its quota; nil without a store
// or when it does not answer (logged: the rest of the limits still answer).
func (s *Server) storedOf(pol *policies.Policy) *storedJSON {
	if s.stored == nil {
		return nil
	}
	u, err := s.stored.Usage(context.Background(), pol.Tenant)
	if err != nil {
		s.log.Warn("stored responses' usage", "tenant", pol.Tenant, "err", err)
		return nil
	}
	st := &storedJSON{Count: u.Count, Bytes: u.Bytes}
	lim := responseLimits(pol)
	if lim.MaxCount > 0 {
		st.MaxCount = &lim.MaxCount
	}
	if lim.MaxBytes > 0 {
		st.MaxBytes = &lim.MaxBytes
	}
	return st
}

// metricsAllowed checks the bearer token of GET /metrics when one is configured,
// answering 401 otherwise.
func (s *Server) metricsAllowed(ctx *fasthttp.RequestCtx) bool {
	if s.metricsKey == nil {
		return true
	}
	key, ok := bytes.CutPrefix(ctx.Request.Header.Peek("Authorization"), []byte("Bearer "))
	if ok && subtle.ConstantTimeCompare(key, s.metricsKey) == 1 {
		return true
	}
	ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="metrics"`)
	ctx.SetStatusCode(401)
	ctx.SetContentType("text/plain; charset=utf-8")
	ctx.SetBodyString("401: /metrics needs the metrics bearer token (metrics_key_env)\n")
	return false
}
