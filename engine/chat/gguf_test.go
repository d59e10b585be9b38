package chat

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/lmlite/lmlite/engine/gguf"
)

// TestGoldenFromGGUF renders the golden cases with the template as the engine
// finds it: the tokenizer.chat_template key of the vocab GGUFs.
func TestGoldenFromGGUF(t *testing.T) {
	shared := sharedDir(t)
	for _, tc := range []struct{ golden, vocab string }{
		{"llama3", "ggml-vocab-llama-bpe.gguf"},
		{"qwen3", "ggml-vocab-qwen2.gguf"},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			f, err := gguf.Open(filepath.Join(shared, "testdata", "tokenizer", tc.vocab))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			src, ok := f.GetString("tokenizer.chat_template")
			if !ok {
				t.Fatal("no tokenizer.chat_template")
			}
			b, err := os.ReadFile(filepath.Join(shared, "testdata", "chat-templates", tc.golden+".json"))
			if err != nil {
				t.Fatal(err)
			}
			var g goldenFile
			if err := json.Unmarshal(b, &g); err != nil {
				t.Fatal(err)
			}
			tpl, err := New(src, Options{BOS: g.BOS, EOS: g.EOS, Now: testNow})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range g.Cases {
				got, err := tpl.Render(c.Messages, c.AddGenerationPrompt)
				if err != nil || got != c.Expected {
					t.Errorf("%s: got %q, %v\nwant %q", c.Name, got, err, c.Expected)
				}
			}
		})
	}
}
