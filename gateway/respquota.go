package gateway

import (
	"context"
	"strconv"

	"github.com/lmlite/lmlite/policies"
	"github.com/lmlite/lmlite/respstore"
)

// responseLimits are the plan's bounds on the tenant's stored responses
// (respstore.Store.PutWithin's).
func responseLimits(pol *policies.Policy) respstore.Limits {
	return respstore.Limits{MaxCount: pol.ResponsesMaxCount, MaxBytes: pol.ResponsesMaxBytes}
}

// responsesQuotaError is the 400 of a response that would pass the tenant's stored
// responses quota (a respstore.LimitError), naming it: as with files, waiting does not
// help until the tenant deletes responses or they expire.
func responsesQuotaError(le *respstore.LimitError) *apiError {
	what := "stored responses"
	if le.Limit == "responses_max_bytes" {
		what = "bytes of stored responses"
	}
	return &apiError{status: 400, typ: "invalid_request_error", code: "response_quota_exceeded", param: "store",
		message: "storing the response would pass your plan's " + le.Limit + " (" + strconv.FormatInt(le.Max, 10) + " " + what +
			"); delete responses (DELETE /v1/responses/{id}), let them expire, or send store: false", reason: "quota_" + le.Limit}
}

// admitStore refuses, before any of the request's generation work, a request that
// asks to store its response (store: true, the default) while its tenant's stored
// responses are at its plan's limits (responseLimits; respstore.Limits.Full): a 400
// response_quota_exceeded naming the limit (responsesQuotaError), charged nothing. It
// keeps the limits for the Put at the request's end (responsesCodec.save), which is what
// holds the limit under concurrency: requests admitted together may pass this check
// at once, and the store's Put (PutWithin: one transaction or one script) refuses
// the ones that would pass it. Such a response, or one whose own size passes
// responses_max_bytes, is answered all the same, not stored, and says "store": false.
//
// A plan without limits costs nothing here; otherwise one read of the store (bbolt: a
// read transaction, about 1 µs; Redis: one HMGET, one round trip). When the store
// does not answer, the request is admitted (logged): the Put at its end still checks
// the limits, so the quota is never passed, and fails as the store fails.
func (c *responsesCodec) admitStore(in *input, pol *policies.Policy) *apiError {
	ri := in.resp
	if ri == nil || !ri.store || c.store == nil {
		return nil
	}
	ri.limits = responseLimits(pol)
	if ri.limits == (respstore.Limits{}) {
		return nil
	}
	le, err := c.store.Full(context.Background(), pol.Tenant, ri.limits)
	if le != nil {
		return responsesQuotaError(le)
	}
	if err != nil && c.log != nil {
		c.log.Warn("responses: the stored responses' usage did not answer; admitted, its store checks the limits", "tenant", pol.Tenant, "error", err)
	}
	return nil
}
