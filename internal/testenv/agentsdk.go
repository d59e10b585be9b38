package testenv

import (
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var agentsSDK struct {
	once sync.Once
	dir  string
	err  error
}

// AgentsSDK returns the folder that scripts/agentsdk/setup.sh fills outside the
// repository (the OpenAI Agents SDK for JavaScript, @openai/agents, with zod and
// openai, pinned), running the script the first time. Without node, npm or the
// registry the test is skipped, or fails in CI, as Missing.
func AgentsSDK(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		Missing(t, "node (for the OpenAI Agents SDK)", err)
	}
	setup := filepath.Join(RepoRoot(t), "scripts", "agentsdk", "setup.sh")
	agentsSDK.once.Do(func() {
		cmd := exec.Command("bash", setup)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			agentsSDK.err = &setupError{err: err, stderr: stderr.String()}
			return
		}
		agentsSDK.dir = strings.TrimSpace(string(out))
	})
	if agentsSDK.err != nil {
		Missing(t, "the OpenAI Agents SDK ("+setup+")", agentsSDK.err)
	}
	return agentsSDK.dir
}
