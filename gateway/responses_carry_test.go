package gateway

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/responses"

	"github.com/lmlite/lmlite/engine"
	"github.com/lmlite/lmlite/respstore"
)

// TestStoredResponseOneLedgerWrite: with the store in ledger mode (as lmlite serve
// opens it), each stored response, one after the other, costs one ledger record:
// its request's settlement carries it (before: the settlement's record, then the
// store's own). The response is stored and read back, and the journal is unused.
func TestStoredResponseOneLedgerWrite(t *testing.T) {
	rb, err := respstore.OpenBoltLedger(filepath.Join(t.TempDir(), "responses.db"), respstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rb.Close() })
	es := startEngineWith(t, strings.Replace(respQuotaConfig, "responses_max_count: 2", "responses_max_count: 10", 1), engine.Config{}, Options{Responses: rb}, nil)
	ctx := context.Background()
	c := es.sdk("acme")
	p := responses.ResponseNewParams{Model: "tiny", Input: textInput("Once upon a time"), MaxOutputTokens: openai.Int(2)}
	if _, err := c.Responses.New(ctx, p); err != nil { // the first: holds and model warm-up
		t.Fatal(err)
	}
	unstored := p
	unstored.Store = openai.Bool(false)
	before := es.store.Commits()
	if _, err := c.Responses.New(ctx, unstored); err != nil {
		t.Fatal(err)
	}
	base := es.store.Commits() - before // its hold's and its settlement's
	before = es.store.Commits()
	r, err := c.Responses.New(ctx, p)
	if err != nil || !storedSays(t, r.RawJSON()) {
		t.Fatalf("%v", err)
	}
	if n := es.store.Commits() - before; n != base {
		t.Errorf("%d ledger records for a stored response, %d for one not stored: want as many (its settlement carries it)", n, base)
	}
	if _, err := c.Responses.Get(ctx, r.ID, responses.ResponseGetParams{}); err != nil {
		t.Errorf("GET of the stored response: %v", err)
	}
	// Streamed: the store happens as the stream ends, and the settlement rides in it.
	before = es.store.Commits()
	st := c.Responses.NewStreaming(ctx, p)
	id := ""
	for st.Next() {
		if ev := st.Current(); ev.Response.ID != "" {
			id = ev.Response.ID
		}
	}
	if err := st.Err(); err != nil || id == "" {
		t.Fatalf("stream: %v (id %q)", err, id)
	}
	if n := es.store.Commits() - before; n != base {
		t.Errorf("streamed: %d ledger records for a stored response, want %d", n, base)
	}
	if _, err := c.Responses.Get(ctx, id, responses.ResponseGetParams{}); err != nil {
		t.Errorf("GET of the streamed stored response: %v", err)
	}
}
