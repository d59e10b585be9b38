package gateway

import (
	"log/slog"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/lmlite/lmlite/batch"
	"github.com/lmlite/lmlite/gateway/openai"
	"github.com/lmlite/lmlite/policies"
	"github.com/lmlite/lmlite/tenancy"
)

// The Batch API's admission (issue 30): uploads and batch creates are rate limited
// per tenant before any of their work (across the processes sharing a Redis, with
// redis:) (reading the file, validating the lines), the
// tenant's files are bounded in bytes and number, and metadata is held to OpenAI's
// limits.

// apiLimiters are the per-tenant token buckets of the Batch API's calls in this
// process, each made from the tenant's plan on its first call (x/time/rate).
type apiLimiters struct {
	mu sync.Mutex
	m  map[string]*rate.Limiter // guarded by mu: by tenant and bucket name
}

// perMinute is the bucket of n calls a minute: n at once, then one every 60/n
// seconds; nil: no limit.
func perMinute(n int) *rate.Limiter {
	if n <= 0 {
		return nil
	}
	return rate.NewLimiter(rate.Limit(float64(n)/60), n)
}

// sharedMinutes are the same buckets in the state several processes share
// (tenancy.RedisShared, GCRA): a tenant's rate holds across them.
type sharedMinutes interface {
	AllowPerMinute(tenant, name string, n int) (wait time.Duration, ok bool, err error)
}

// allowPerMinute takes one call of tenant at now from its bucket name of n calls a
// minute, or says how long until one is free: in shared (when not nil) or, without it
// or while it fails, in this process's buckets.
func (a *apiLimiters) allowPerMinute(shared sharedMinutes, log *slog.Logger, tenant, name string, n int, now time.Time) (time.Duration, bool) {
	if n <= 0 {
		return 0, true
	}
	if shared != nil {
		wait, ok, err := shared.AllowPerMinute(tenant, name, n)
		if err == nil {
			return wait, ok
		}
		log.Warn("batch api: the shared rate limits are unavailable: using this process's", "limit", name, "error", err)
	}
	return a.admit(tenant+"\x00"+name, func() *rate.Limiter { return perMinute(n) }, now)
}

// admit takes one call of key at now from its bucket (made by mk on the first call),
// or says how long until one is free.
func (a *apiLimiters) admit(key string, mk func() *rate.Limiter, now time.Time) (time.Duration, bool) {
	a.mu.Lock()
	if a.m == nil {
		a.m = map[string]*rate.Limiter{}
	}
	l, ok := a.m[key]
	if !ok {
		l = mk()
		a.m[key] = l
	}
	a.mu.Unlock()
	if l == nil {
		return 0, true
	}
	r := l.ReserveN(now, 1)
	if !r.OK() {
		return time.Minute, false
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return d, false
	}
	return 0, true
}

// batchRateLimited is the 429 of an upload or batch create over its plan's rate
// (field: the plan's field).
func batchRateLimited(field string, perMin int, wait time.Duration) *apiError {
	return &apiError{status: 429, typ: "requests", code: "rate_limit_exceeded",
		message: "rate limit reached: " + field + " is " + strconv.Itoa(perMin) + "; retry after " + wait.Round(time.Millisecond).String(),
		retry:   tenancy.RetryAfterSeconds(wait), reason: "rate_" + field}
}

// admitUpload and admitCreate rate-limit POST /v1/files and POST /v1/batches.
func (s *Server) admitUpload(pol *policies.Policy) *apiError {
	b := s.batches
	wait, ok := b.limits.allowPerMinute(b.shared, s.log, pol.Tenant, "uploads", pol.FileUploadsPerMinute, s.now())
	if ok {
		return nil
	}
	return batchRateLimited("file_uploads_per_minute", pol.FileUploadsPerMinute, wait)
}

func (s *Server) admitCreate(pol *policies.Policy) *apiError {
	b := s.batches
	wait, ok := b.limits.allowPerMinute(b.shared, s.log, pol.Tenant, "creates", pol.BatchCreatesPerMinute, s.now())
	if ok {
		return nil
	}
	return batchRateLimited("batch_creates_per_minute", pol.BatchCreatesPerMinute, wait)
}

// fileLimits are the plan's bounds on the tenant's files.
func fileLimits(pol *policies.Policy) batch.FileLimits {
	return batch.FileLimits{MaxBytes: pol.FilesMaxBytes, MaxFiles: pol.FilesMaxCount}
}

// quotaError is the 400 of an upload over the tenant's file quota, naming it.
func quotaError(qe *batch.QuotaError) *apiError {
	what := "stored files"
	if qe.Limit == "files_max_bytes" {
		what = "bytes of stored files"
	}
	return &apiError{status: 400, typ: "invalid_request_error", code: "file_quota_exceeded", param: "file",
		message: "the upload is over your plan's " + qe.Limit + " (" + strconv.FormatInt(qe.Max, 10) + " " + what +
			"); delete files (DELETE /v1/files/{id}) or let them expire", reason: "quota_" + qe.Limit}
}

// checkMetadata holds metadata to OpenAI's limits (openai.CheckMetadata).
func checkMetadata(md map[string]string) *apiError { return fieldError(openai.CheckMetadata(md)) }

// checkAnyMetadata is checkMetadata of a request's decoded metadata (a response's):
// its values must be strings (openai.CheckAnyMetadata).
func checkAnyMetadata(md map[string]any) *apiError { return fieldError(openai.CheckAnyMetadata(md)) }

// expiresAfter is OpenAI's expires_after: {anchor: "created_at", seconds: N}.
type expiresAfter struct {
	Anchor  string `json:"anchor"`
	Seconds *int64 `json:"seconds"`
}

// check validates it (field: its parameter's name) and returns its duration.
func (e *expiresAfter) check(field string) (time.Duration, *apiError) {
	if e.Anchor != "created_at" {
		return 0, badRequest(field+".anchor", field+".anchor must be 'created_at'")
	}
	min, max := int64(batch.MinFileExpiry/time.Second), int64(batch.MaxFileExpiry/time.Second)
	if e.Seconds == nil || *e.Seconds < min || *e.Seconds > max {
		return 0, badRequest(field+".seconds", field+".seconds must be between "+strconv.FormatInt(min, 10)+" and "+strconv.FormatInt(max, 10)+" (one hour to 30 days)")
	}
	return time.Duration(*e.Seconds) * time.Second, nil
}
