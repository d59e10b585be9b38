package testenv

import (
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var nodeClients struct {
	once sync.Once
	dir  string
	err  error
}

// NodeClients returns the folder that scripts/nodeclients/setup.sh fills outside the
// repository (the official `openai` and `@anthropic-ai/sdk` Node packages, pinned),
// running the script the first time. Without node, npm or the registry the test is
// skipped, or fails in CI, as Missing.
func NodeClients(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		Missing(t, "node (for the official Node client packages)", err)
	}
	setup := filepath.Join(RepoRoot(t), "scripts", "nodeclients", "setup.sh")
	nodeClients.once.Do(func() {
		cmd := exec.Command("bash", setup)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			nodeClients.err = &setupError{err: err, stderr: stderr.String()}
			return
		}
		nodeClients.dir = strings.TrimSpace(string(out))
	})
	if nodeClients.err != nil {
		Missing(t, "the official Node client packages ("+setup+")", nodeClients.err)
	}
	return nodeClients.dir
}
