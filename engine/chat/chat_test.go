package chat

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// sharedDir finds ../shared beside the repository root, or skips (fails under CI).
func sharedDir(t testing.TB) string {
	t.Helper()
	dir, err := repoRoot()
	if err != nil {
		t.Fatal("chat: no go.mod above the test directory")
	}
	shared := filepath.Join(dir, "..", "shared")
	if _, err := os.Stat(filepath.Join(shared, "testdata", "chat-templates")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("chat: shared test data missing at %s: %v", shared, err)
		}
		t.Skipf("!!! chat: shared test data missing at %s (%v); SKIPPING", shared, err)
	}
	return shared
}

var testNow = func() time.Time { return time.Date(2026, 11, 22, 10, 30, 0, 0, time.UTC) }

func loadTemplate(t testing.TB, shared, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(shared, "testdata", "hf-tokenizers", name, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	src := templateFromConfig(b)
	if src == "" {
		t.Fatalf("%s: no chat_template", name)
	}
	return src
}

// templateFromConfig returns the chat_template of a tokenizer_config.json.
func templateFromConfig(b []byte) string {
	var cfg struct {
		ChatTemplate string `json:"chat_template"`
	}
	if json.Unmarshal(b, &cfg) != nil {
		return ""
	}
	return cfg.ChatTemplate
}

type goldenFile struct {
	BOS   string `json:"bos_token"`
	EOS   string `json:"eos_token"`
	Cases []struct {
		Name                string    `json:"name"`
		Messages            []Message `json:"messages"`
		AddGenerationPrompt bool      `json:"add_generation_prompt"`
		Expected            string    `json:"expected"`
	} `json:"cases"`
}

func TestGolden(t *testing.T) {
	shared := sharedDir(t)
	for _, name := range []string{"llama3", "qwen3"} {
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(shared, "testdata", "chat-templates", name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			var g goldenFile
			if err := json.Unmarshal(b, &g); err != nil {
				t.Fatal(err)
			}
			if len(g.Cases) == 0 {
				t.Fatal("no cases")
			}
			tpl, err := New(loadTemplate(t, shared, name), Options{BOS: g.BOS, EOS: g.EOS, Now: testNow})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range g.Cases {
				got, err := tpl.Render(c.Messages, c.AddGenerationPrompt)
				if err != nil {
					t.Errorf("%s: %v", c.Name, err)
					continue
				}
				if got != c.Expected {
					t.Errorf("%s:\n got %q\nwant %q", c.Name, got, c.Expected)
				}
			}
		})
	}
}

// TestConcurrent renders one template from many goroutines (run with -race).
func TestConcurrent(t *testing.T) {
	shared := sharedDir(t)
	tpl, err := New(loadTemplate(t, shared, "qwen3"), Options{EOS: "<|im_end|>", Now: testNow})
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				got, err := tpl.Render([]Message{{Role: "user", Content: "Hi"}}, true)
				if err != nil || got != want {
					t.Errorf("got %q, %v", got, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestJinja2Golden renders cases whose expected text Python's jinja2 3.1.6 produced,
// configured as transformers configures it (testdata/gen_golden.py): Qwen3's
// reasoning and tool branches, and a template that uses the features chat
// templates rely on.
func TestJinja2Golden(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "jinja2-golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Name         string         `json:"name"`
		Template     string         `json:"template"`
		TemplateFrom string         `json:"template_from"`
		Messages     []Message      `json:"messages"`
		AGP          bool           `json:"agp"`
		BOS          string         `json:"bos"`
		EOS          string         `json:"eos"`
		Vars         map[string]any `json:"vars"`
		Expected     string         `json:"expected"`
	}
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			src := c.Template
			if c.TemplateFrom != "" {
				src = loadTemplate(t, sharedDir(t), c.TemplateFrom)
			}
			tpl, err := New(src, Options{BOS: c.BOS, EOS: c.EOS, Now: testNow})
			if err != nil {
				t.Fatal(err)
			}
			got, err := tpl.RenderVars(c.Messages, c.AGP, c.Vars)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.Expected {
				t.Errorf("\n got %q\nwant %q", got, c.Expected)
			}
		})
	}
}

func TestRenderVarsReserved(t *testing.T) {
	tpl, err := New("", Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"messages", "bos_token", "raise_exception", "range", "\x00budget"} {
		if _, err := tpl.RenderVars(nil, false, map[string]any{name: "x"}); !errors.Is(err, ErrVar) {
			t.Errorf("%q: %v, want ErrVar", name, err)
		}
	}
}
