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
// engine_restarting (503) when the engine restarts, else 500.
func generationError(err error) *apiError {
	if errors.Is(err, engine.ErrRestarting) {
		return restarting(err)
	}
	return &apiError{status: 500, typ: "server_error", message: "generation failed: " + err.Error(), reason: "internal"}
}
