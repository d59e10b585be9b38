package gateway

import (
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
