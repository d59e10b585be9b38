package main

import (
	"errors"
	"io/fs"
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
	for _, c := range []struct {
		bad  string
		kind error // nil: the message alone (an empty template has no kind)
	}{{empty, nil}, {filepath.Join(dir, "missing.jinja"), fs.ErrNotExist}} {
		err := commands["gen-model"].run([]string{"--chat-template", c.bad, "--out", filepath.Join(dir, "x.gguf")})
		if err == nil || c.kind != nil && !errors.Is(err, c.kind) || !strings.Contains(err.Error(), filepath.Base(c.bad)) {
			t.Errorf("%s: %v", c.bad, err)
		}
	}
}
