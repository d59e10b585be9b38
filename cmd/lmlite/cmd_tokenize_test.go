package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/internal/testenv"
)

func TestTokenizeCommand(t *testing.T) {
	model := testenv.SharedFile(t, "models/stories260K.gguf")
	vocab := testenv.SharedFile(t, "testdata/tokenizer/ggml-vocab-qwen2.gguf") // no tensors
	dir := t.TempDir()
	text := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(text, []byte("Once upon a time\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	notGGUF := filepath.Join(dir, "bad.gguf")
	if err := os.WriteFile(notGGUF, []byte("this is not a gguf file at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		want string
		err  error // matched with errors.Is when set
	}{
		{"prompt with BOS", []string{"--model", model, "--prompt", "Once upon a time"}, "[1, 403, 407, 261, 378]\n", nil},
		{"no BOS", []string{"--model", model, "--no-bos", "--prompt", "Once upon a time"}, "[403, 407, 261, 378]\n", nil},
		{"file keeps its newline", []string{"--model", model, "--file", text}, "[1, 403, 407, 261, 378, 13]\n", nil},
		{"prompt is literal", []string{"--model", model, "--no-bos", "--prompt", `a\n`}, "[261, 500, 416]\n", nil},
		{"vocab-only, special parsed", []string{"--model", vocab, "--parse-special", "--prompt", "<|im_start|>user\nhi<|im_end|>"}, "[151644, 872, 198, 6023, 151645]\n", nil},
		{"vocab-only, special as text", []string{"--model", vocab, "--prompt", "<|im_end|>"}, "[27, 91, 318, 6213, 91, 29]\n", nil},
		{"missing model", []string{"--model", filepath.Join(dir, "nope.gguf"), "--prompt", "x"}, "", os.ErrNotExist},
		{"not a GGUF", []string{"--model", notGGUF, "--prompt", "x"}, "", gguf.ErrFormat},
		{"missing file", []string{"--model", model, "--file", filepath.Join(dir, "nope.txt")}, "", os.ErrNotExist},
		{"no text", []string{"--model", model}, "", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out strings.Builder
			err := runTokenize(c.args, &out)
			if c.want == "" {
				if err == nil {
					t.Fatalf("no error; printed %q", out.String())
				}
				if c.err != nil && !errors.Is(err, c.err) {
					t.Fatalf("error %v is not %v", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if out.String() != c.want {
				t.Errorf("printed %q, want %q", out.String(), c.want)
			}
		})
	}
}
