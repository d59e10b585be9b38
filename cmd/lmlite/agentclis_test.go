package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lmlite/lmlite/engine/genmodel"
	"github.com/lmlite/lmlite/internal/testenv"
)

// TestAgentCLIsSmoke runs the real agent CLIs once each against `lmlite serve`:
// Claude Code (`claude -p`, /v1/messages) and Codex (`codex exec`, /v1/responses),
// pinned by scripts/agentclis/setup.sh, on a generated qwen3 with random weights
// whose context takes their prompts (about 28k tokens for Claude Code 2.1.332,
// 14k for Codex 0.171.0). It passes when the server refused none of their requests
// and each CLI read its answers to the end. It is opt-in (`make smoke-agent-clis`,
// LMLITE_AGENT_CLIS=1): the CLIs are 800 MB and Claude Code's first prompt takes
// minutes to prefill on a small CPU, too long for `make test`.
func TestAgentCLIsSmoke(t *testing.T) {
	if os.Getenv("LMLITE_AGENT_CLIS") == "" {
		t.Skip("SKIPPING the agent CLIs' smoke test (Claude Code, Codex): opt-in, run `make smoke-agent-clis` (LMLITE_AGENT_CLIS=1)")
	}
	if _, err := exec.LookPath("npm"); err != nil {
		t.Fatalf("LMLITE_AGENT_CLIS is set but npm is missing: %v", err)
	}
	setup := filepath.Join(testenv.RepoRoot(t), "scripts", "agentclis", "setup.sh")
	out, err := exec.Command("bash", setup).Output()
	if err != nil {
		t.Fatalf("%s: %v", setup, err)
	}
	bin := filepath.Join(strings.TrimSpace(string(out)), "node_modules", ".bin")

	home := t.TempDir()
	t.Chdir(home)
	t.Setenv("LMLITE_RUN_DIR", filepath.Join(home, "run"))
	t.Setenv("LMLITE_ADMIN_KEY", "")
	model := filepath.Join(home, "qwen3-64k.gguf")
	if err := genmodel.Generate(genmodel.Options{Arch: "qwen3", Preset: "tiny", Type: "q4_k_m", Seed: 2, Context: 65536}, model); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	// Codex sends no max_output_tokens: its model's context ends about 2k tokens
	// after its prompt, which bounds a random model's answer.
	cfg := "listen: " + addr + "\ndata_dir: " + filepath.Join(home, "data") + "\nmax_body_bytes: 8388608\nledger: {sync: process}\nmodels:\n" +
		"  - {id: random-qwen3-64k, path: " + model + ", max_model_len: 65536, max_concurrency: 2}\n" +
		"  - {id: random-qwen3-16k, path: " + model + ", max_model_len: 16384, max_concurrency: 2}\n"
	if err := os.WriteFile("cli.yaml", []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut := captureOutput(t)
	done := startServe(t, addr, "-v", "--config", "cli.yaml")
	defer stopServe(t, done)
	b, err := os.ReadFile(filepath.Join(home, "data", "demo-key"))
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(string(b))

	run := func(name string, env []string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(bin, name), args...)
		cmd.Dir = home
		cmd.Env = append([]string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}, env...)
		start := time.Now()
		out, err := cmd.CombinedOutput()
		t.Logf("%s (%v, %s):\n%s", name, err, time.Since(start).Round(time.Second), out)
		if ctx.Err() != nil {
			t.Fatalf("%s did not finish in 10 minutes", name)
		}
		return string(out)
	}
	// Claude Code: a random model never ends its answer, so with 16 output tokens
	// it stops at max_tokens every time; Claude Code reads that (stop_reason
	// max_tokens), continues twice and then says so.
	claude := run("claude", []string{"ANTHROPIC_BASE_URL=http://" + addr, "ANTHROPIC_API_KEY=" + key,
		"CLAUDE_CODE_MAX_OUTPUT_TOKENS=16", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_TELEMETRY=1"},
		"-p", "say hi", "--model", "random-qwen3-64k")
	if !strings.Contains(claude, "exceeded the 16 output token maximum") {
		t.Errorf("Claude Code did not read its answers to their max_tokens stop")
	}
	codexHome := filepath.Join(home, "codex")
	os.MkdirAll(codexHome, 0o700)
	toml := "model = \"random-qwen3-16k\"\nmodel_provider = \"lmlite\"\nweb_search = \"disabled\"\n\n[features]\nmulti_agent = false\ngoals = false\n\n" +
		"[model_providers.lmlite]\nname = \"lmlite\"\nbase_url = \"http://" + addr + "/v1\"\nwire_api = \"responses\"\nenv_key = \"LMLITE_API_KEY\"\n"
	if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	// Codex: the random model's answer runs to the end of its context, which Codex
	// reads from the stream's response.incomplete (and says so).
	codex := run("codex", []string{"CODEX_HOME=" + codexHome, "LMLITE_API_KEY=" + key}, "exec", "--skip-git-repo-check", "say hi")
	if strings.Contains(codex, "ERROR: {") || !strings.Contains(codex, "Incomplete response returned, reason: max_output_tokens") {
		t.Errorf("Codex did not read its answer to its end (response.incomplete)")
	}
	log := errOut.take()
	if strings.Contains(log, "msg=rejected") || !strings.Contains(log, "model=random-qwen3-16k") || !strings.Contains(log, "model=random-qwen3-64k") {
		t.Errorf("the server refused a request, or a CLI never reached it:\n%s", log)
	}
}
