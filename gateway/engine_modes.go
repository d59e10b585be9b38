package gateway

import (
	"errors"

	"github.com/lmlite/lmlite/engine"
)

// restarting is the answer to a request whose model's engine is restarting (the
// workers mode: its worker process crashed or hung, or waits out its restart
// backoff): 503 engine_restarting with Retry-After, nothing wrong with the request.
func restarting(err error) *apiError {
	return &apiError{status: 503, typ: "server_error", code: "engine_restarting", retry: 1, reason: "engine_restarting",
		message: "the model's engine is restarting; retry shortly (" + err.Error() + ")"}
}

// generationError is the answer for a generation that failed after it started:
// engine_restarting (503) when the engine restarts; 400 grammar_budget_exceeded
// when the output's grammar (response_format's schema, or a tool call's) took more
// mask work than the model's grammar budget allows (the client's schema is too
// expensive to enforce; a streamed answer ends with it as an error event after the
// tokens sent); else 500.
func generationError(err error) *apiError {
	if errors.Is(err, engine.ErrRestarting) {
		return restarting(err)
	}
	if errors.Is(err, engine.ErrGrammarBudget) {
		return &apiError{status: 400, typ: "invalid_request_error", code: "grammar_budget_exceeded", reason: "bad_request",
			message: "the output's JSON schema (response_format) or tool grammar takes more work to enforce than this server allows; simplify it (fewer anyOf alternatives that start alike, fewer bounded strings): " + err.Error()}
	}
	return &apiError{status: 500, typ: "server_error", message: "generation failed: " + err.Error(), reason: "internal"}
}
