package gateway

import (
	"fmt"
	"testing"

	"github.com/lmlite/lmlite/engine"
)

// TestGrammarBudgetIsAClientError: a generation ended by its grammar budget (the
// client's schema is too expensive to enforce) is answered 400 invalid_request_error
// grammar_budget_exceeded, the OpenAI shape (or that error event at the end of a
// stream), and settled with that status; not a 500 server error.
func TestGrammarBudgetIsAClientError(t *testing.T) {
	err := fmt.Errorf("%w: one token's mask takes more than 1048576 steps", engine.ErrGrammarBudget)
	e := generationError(err)
	if e.status != 400 || e.typ != "invalid_request_error" || e.code != "grammar_budget_exceeded" {
		t.Errorf("answer: %d %s %s, want 400 invalid_request_error grammar_budget_exceeded", e.status, e.typ, e.code)
	}
	if got := string(appendErrorJSON(nil, e)); got == "" || e.message == "" {
		t.Errorf("empty error body %q", got)
	}
	if s := statusOf(engine.Usage{}, err); s != 400 {
		t.Errorf("settled status %d, want 400", s)
	}
}
