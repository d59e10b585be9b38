package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lmlite/lmlite/internal/testenv"
)

// TestNodeClientsSmoke drives `lmlite serve` on the demo (what `make run` serves) with
// the official Node packages, pinned by scripts/nodeclients/setup.sh: openai's
// responses.create (whole, streamed, continued by previous_response_id, retrieved and
// deleted) and @anthropic-ai/sdk's messages.create, messages.stream and countTokens,
// and an authentication error in Anthropic's shape (scripts/nodeclients/smoke.mjs,
// one JSON line a check).
func TestNodeClientsSmoke(t *testing.T) {
	cache := testenv.NodeClients(t)
	script := filepath.Join(testenv.RepoRoot(t), "scripts", "nodeclients", "smoke.mjs") // before the test leaves the package's directory
	addr, key := serveDemoInTempHome(t)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "node", script, cache, "http://"+addr, key, "demo-stories").CombinedOutput()
	t.Logf("smoke.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("the Node clients' smoke test failed: %v (its last line names the check)", err)
	}
	for _, check := range []string{"responses.create", "responses.stream", "responses.previous_response_id", "responses.delete",
		"messages.create", "messages.stream", "messages.count_tokens", "messages.auth_error"} {
		if !strings.Contains(string(out), `{"check":"`+check+`","ok":true`) {
			t.Errorf("check %s did not pass", check)
		}
	}
}

// serveDemoInTempHome runs `lmlite serve` on the demo (what `make run` serves) in a
// fresh home directory, stopped when the test ends, and returns its address and the
// demo tenant's key.
func serveDemoInTempHome(t *testing.T) (addr, key string) {
	t.Helper()
	home := t.TempDir()
	t.Chdir(home)
	t.Setenv("LMLITE_RUN_DIR", filepath.Join(home, "run"))
	t.Setenv("LMLITE_ADMIN_KEY", "")
	addr = freeAddr(t)
	captureOutput(t)
	done := startServe(t, addr, "--listen", addr)
	t.Cleanup(func() { stopServe(t, done) })
	b, err := os.ReadFile(filepath.Join(home, "data", "demo-key"))
	if err != nil {
		t.Fatal(err)
	}
	return addr, strings.TrimSpace(string(b))
}
