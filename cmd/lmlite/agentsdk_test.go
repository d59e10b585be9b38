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

// TestAgentsSDKToolTurn drives `lmlite serve` on the demo (what `make run` serves)
// with the OpenAI Agents SDK for JavaScript (@openai/agents, pinned by
// scripts/agentsdk/setup.sh): an agent whose tool is required runs one turn through
// /v1/responses, whole and streamed; the model calls the tool, the SDK runs it and
// its output is the final output, and the usage is reported
// (scripts/agentsdk/agent.mjs, one JSON line a check).
func TestAgentsSDKToolTurn(t *testing.T) {
	cache := testenv.AgentsSDK(t)
	script := filepath.Join(testenv.RepoRoot(t), "scripts", "agentsdk", "agent.mjs") // before the test leaves the package's directory
	addr, key := serveDemoInTempHome(t)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// demo-random-qwen3: the demo's model with a tools template and room for the
	// SDK's prompt (demo-stories' 512 tokens are too few).
	cmd := exec.CommandContext(ctx, "node", script, cache, "http://"+addr, key, "demo-random-qwen3")
	cmd.Env = append(os.Environ(), "OPENAI_AGENTS_DISABLE_TRACING=1")
	out, err := cmd.CombinedOutput()
	t.Logf("agent.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("the Agents SDK's smoke test failed: %v (its last line names the check)", err)
	}
	for _, check := range []string{"agents.tool_call", "agents.final_output", "agents.usage", "agents.stream"} {
		if !strings.Contains(string(out), `{"check":"`+check+`","ok":true`) {
			t.Errorf("check %s did not pass", check)
		}
	}
}
