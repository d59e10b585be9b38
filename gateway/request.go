package gateway

import (
	"math"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/gateway/core"
	"github.com/lmlite/lmlite/gateway/openai"
)

// apiError is an error in OpenAI's shape with its HTTP status.
type apiError struct {
	status  int
	typ     string // "invalid_request_error", ...
	code    string // "" for null
	param   string // "" for null
	message string
	retry   int    // Retry-After seconds; 0: none
	reason  string // for the rejections metric
}

func (e *apiError) Error() string { return e.message }

func badRequest(param, msg string) *apiError {
	return &apiError{status: 400, typ: "invalid_request_error", param: param, message: msg, reason: "bad_request"}
}

// lmliteFields are the routing fields of the body's "lmlite" object.
type lmliteFields = core.LMLiteFields

// The bodies of chat completions and completions, and their parameters, are
// decoded in package gateway/openai (request.go).
type (
	commonParams      = openai.CommonParams
	chatRequest       = openai.ChatRequest
	completionRequest = openai.CompletionRequest
)

// decodeBody checks the body's encoding and decodes it strictly into v
// (core.DecodeBody).
func decodeBody(body []byte, v any) *apiError { return fieldError(core.DecodeBody(body, v)) }

// strictJSON refuses members the request types do not have (core.StrictJSON).
var strictJSON = core.StrictJSON

// fieldError is a codec's field error as the gateway's 400 (nil for nil).
func fieldError(e *core.FieldError) *apiError {
	if e == nil {
		return nil
	}
	return badRequest(e.Param, e.Message)
}

func isNull(r jsontext.Value) bool { return core.IsNull(r) }

func isEmptyList(r jsontext.Value) bool { return openai.IsEmptyList(r) }

// sampling checks the common sampling parameters (openai.CommonParams.Sampling).
func sampling(p *commonParams, seed uint64) (engine.Sampling, []string, *apiError) {
	s, stop, fe := p.Sampling(seed)
	return s, stop, fieldError(fe)
}

// maxTokensOf returns the requested output limit (openai.MaxTokensOf).
func maxTokensOf(a, b *int, nameA, nameB string) (int, *apiError) {
	n, fe := openai.MaxTokensOf(a, b, nameA, nameB)
	return n, fieldError(fe)
}

func oneOf(s string, set ...string) bool { return core.OneOf(s, set...) }

// validFloat reports whether f is a finite number ≥ 0.
func validFloat(f float64) bool { return f >= 0 && !math.IsInf(f, 0) }

// wire is e as a codec renders it (gateway/core's Error); nil for nil.
func (e *apiError) wire() *core.Error {
	if e == nil {
		return nil
	}
	return &core.Error{Status: e.status, Type: e.typ, Code: e.code, Param: e.param, Message: e.message}
}
