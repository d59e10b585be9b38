package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/engine/gguf"
)

// TestGenModelChatTemplate: --chat-template stores the file's template as the
// model's tokenizer.chat_template; an empty or missing file is an error.
func TestGenModelChatTemplate(t *testing.T) {
	dir := t.TempDir()
	const tmpl = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
	tf := filepath.Join(dir, "t.jinja")
	if err := os.WriteFile(tf, []byte(tmpl), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "m.gguf")
	if err := commands["gen-model"].run([]string{"--preset", "tiny", "--type", "q8_0", "--chat-template", tf, "--out", out}); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := f.GetString("tokenizer.chat_template")
	f.Close()
	if got != tmpl {
		t.Errorf("chat template %q", got)
	}
	empty := filepath.Join(dir, "empty.jinja")
	os.WriteFile(empty, nil, 0o644)
	for _, bad := range []string{empty, filepath.Join(dir, "missing.jinja")} {
		err := commands["gen-model"].run([]string{"--chat-template", bad, "--out", filepath.Join(dir, "x.gguf")})
		if err == nil || !strings.Contains(err.Error(), filepath.Base(bad)) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
